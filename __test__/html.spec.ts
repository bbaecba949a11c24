/** The `--html` page of `cuda-arena replay` in a real browser: what it draws for the configs compared. */
import test from 'ava'
import { join } from 'node:path'
import { replay, tempDir, withPage, writeTrace } from './html-page'

test('the --html page draws in a real browser with no console errors and fetches nothing', async (t) => {
  const page = join(tempDir(), 'report.html')
  replay(t, ['--sample', 'growing', '--backend', 'virtual', '--compare', 'arena.extend_strategy=1', '--html', page])
  await withPage(t, page, async ({ tab, requests, errors }) => {
    t.is(await tab.evaluate(() => document.documentElement.dataset.ready), '1')
    t.deepEqual(errors, [])
    t.deepEqual(requests, [], 'the page fetches nothing')
    t.true((await tab.locator('svg.chart polygon.band').count()) > 2, 'live allocations are drawn as bands')
    t.true((await tab.locator('svg.map rect.chunk').count()) > 2, 'chunks are drawn')
  })
})

test("the summary table gives each config's peak held, held/requested, extensions, failed allocations and ns/op from the replay", async (t) => {
  const page = join(tempDir(), 'report.html')
  const json = replay(t, ['--sample', 'inference', '--backend', 'virtual', '--compare', 'arena.extend_strategy=1', '--json', '--html', page])
  await withPage(t, page, async ({ tab }) => {
    const rows = await tab.$$eval('table.summary tbody tr', (trs) => trs.map((tr) => Array.from(tr.children, (c) => c.textContent?.trim() ?? '')))
    const head = await tab.$$eval('table.summary thead th', (ths) => ths.map((th) => th.textContent?.trim() ?? ''))
    const cell = (row: string[], name: string): string => row[head.indexOf(name)]
    const mib = (n: number): string => `${(n / 2 ** 20).toFixed(1)} MiB`
    t.is(rows.length, json.runs.length)
    json.runs.forEach((run, i) => {
      t.is(cell(rows[i], 'config'), run.label)
      t.is(cell(rows[i], 'peak held'), mib(run.peakHeld))
      t.is(cell(rows[i], 'held/requested'), (run.peakHeld / run.peakRequested).toFixed(3))
      t.is(cell(rows[i], 'extensions'), run.stats.numArenaExtensions.toLocaleString('en'))
      t.is(cell(rows[i], 'failed allocs'), String(run.failedAllocs))
      t.is(cell(rows[i], 'ns/op'), (run.elapsedNs / run.ops).toFixed(1))
    })
  })
})

test('the configs stand side by side: their timelines share one op axis and their maps stand in one row', async (t) => {
  const page = join(tempDir(), 'report.html')
  replay(t, ['--sample', 'small', '--backend', 'virtual', '--compare', 'arena.extend_strategy=1', '--compare', 'arena.max_dead_bytes_per_chunk=1024', '--html', page])
  await withPage(t, page, async ({ tab }) => {
    const plots = await tab.$$eval('section.run svg.chart rect.plot', (rs) => rs.map((r) => r.getBoundingClientRect()).map((b) => [b.left, b.width]))
    t.is(plots.length, 3)
    t.deepEqual(new Set(plots.map((p) => p.join())).size, 1, 'every timeline spans the same pixels')
    const opLabels = await tab.$$eval('section.run svg.chart', (svgs) => svgs.map((s) => Array.from(s.querySelectorAll('text'), (x) => x.textContent).filter((x) => x && /^[0-9,]+$/.test(x)).join(' ')))
    t.is(new Set(opLabels).size, 1, 'and the same ops')
    const maps = await tab.$$eval('figure.map-fig', (fs) => fs.map((f) => f.getBoundingClientRect()).map((b) => [b.top, b.left]))
    t.is(maps.length, 3)
    t.is(new Set(maps.map(([top]) => top)).size, 1, 'the maps are in one row')
    t.true(maps[0][1] < maps[1][1] && maps[1][1] < maps[2][1], 'left to right in the order compared')
  })
})

test("dragging across a timeline zooms every config's timeline into the ops dragged over", async (t) => {
  const page = join(tempDir(), 'report.html')
  replay(t, ['--sample', 'growing', '--backend', 'virtual', '--compare', 'arena.extend_strategy=1', '--html', page])
  await withPage(t, page, async ({ tab }) => {
    const before = await tab.textContent('#range')
    const plot = await tab.locator('section.run[data-run="1"] rect.plot').boundingBox()
    if (!plot) return t.fail('no plot')
    const y = plot.y + plot.height / 2
    await tab.mouse.move(plot.x + plot.width * 0.25, y)
    await tab.mouse.down()
    await tab.mouse.move(plot.x + plot.width * 0.5, y, { steps: 5 })
    await tab.mouse.up()
    const after = await tab.textContent('#range')
    t.not(after, before)
    const [from, to] = (/ops ([0-9,]+) … ([0-9,]+) of/.exec(after ?? '') ?? []).slice(1).map((s) => Number(s.replace(/,/g, '')))
    t.true(from > 20_000 && to < 55_000 && from < to, `zoomed to ${after}`)
    const firstTicks = await tab.$$eval('section.run svg.chart', (svgs) =>
      svgs.map((s) => Array.from(s.querySelectorAll('text'), (x) => x.textContent ?? '').filter((x) => /^[0-9,]+$/.test(x))[0]),
    )
    t.is(new Set(firstTicks).size, 1, 'both timelines show the same ops')
    t.true(Number(firstTicks[0].replace(/,/g, '')) >= from)
  })
})

// Issue 11, item 16: the pool's run showed the arena's regions under the pool's label.
test("a memory pool's map says it has no regions instead of drawing one", async (t) => {
  const page = join(tempDir(), 'pool.html')
  const json = replay(t, ['--sample', 'small', '--backend', 'virtual', '--compare', 'arena.use_cuda_mempool=1', '--json', '--html', page])
  t.deepEqual(
    json.runs.map((run) => run.allocator),
    ['arena', 'memory pool'],
  )
  await withPage(t, page, async ({ tab, errors }) => {
    t.deepEqual(errors, [])
    const maps = tab.locator('figure.map-fig')
    t.is(await maps.count(), 2)
    t.true((await maps.nth(0).locator('svg.map rect.region').count()) > 0)
    t.is(await maps.nth(1).locator('svg.map').count(), 0)
    t.regex((await maps.nth(1).locator('p.no-map').textContent()) ?? '', /memory pool has no regions/)
    t.is(await tab.locator('section.run svg.chart').count(), 2, 'both draw memory over the replay')
  })
})

test('an allocation that fails for lack of memory is marked under its op on the timeline', async (t) => {
  const dir = tempDir()
  const trace = writeTrace(dir, 'oom.jsonl', [
    { op: 'alloc', id: 1, size: 1 << 20, stream: 0 },
    { op: 'alloc', id: 2, size: 8 << 20, stream: 0 },
    { op: 'free', id: 2 },
    { op: 'free', id: 1 },
  ])
  const page = join(dir, 'report.html')
  const json = replay(t, [trace, '--backend', 'virtual', '--config', `arena.max_mem=${4 << 20}`, '--json', '--html', page])
  t.is(json.runs[0].failedAllocs, 1)
  await withPage(t, page, async ({ tab }) => {
    const marks = tab.locator('section.run svg.chart path.failed')
    t.is(await marks.count(), 1)
    const plot = await tab.locator('section.run svg.chart rect.plot').boundingBox()
    const mark = await marks.boundingBox()
    if (!plot || !mark) return t.fail('no plot')
    // Ops 0 … 4 are five columns: op 2 is the third.
    t.is(Math.floor(((mark.x + mark.width / 2 - plot.x) / plot.width) * 5), 2)
  })
})
