/** The `--html` page's maps and hovers against the library's own numbers (`replay --memory-log-at`). */
import test from 'ava'
import { spawnSync } from 'node:child_process'
import { join } from 'node:path'
import { mixedTrace } from '../ts/index'
import { logChunks, mapChunks, pickOp, replay, root, tempDir, withPage, writeTrace } from './html-page'

/** 4,000 ops on three streams and none, with a reserve: free chunks end up owned by streams. */
function streamedTrace(): object[] {
  const lines: object[] = mixedTrace(4000, { minSize: 1024, maxSize: 4 << 20, maxLive: 80, seed: 11 }).map((op) =>
    op.op === 'alloc' ? { op: 'alloc', id: op.id, size: op.size, stream: Number(op.id) % 4 } : { op: 'free', id: op.id },
  )
  lines.splice(100, 0, { op: 'reserve', id: 1_000_000, size: 3 << 20 })
  lines.splice(3000, 0, { op: 'free', id: 1_000_000 })
  return lines
}

/** Eight ops whose first allocation (3,000,000 bytes on stream 1) lives from op 1 to op 8. */
const KNOWN = [
  { op: 'alloc', id: 1, size: 3_000_000, stream: 1 },
  { op: 'alloc', id: 2, size: 1_000_000, stream: 0 },
  { op: 'alloc', id: 3, size: 2_500_000, stream: 2 },
  { op: 'free', id: 2 },
  { op: 'alloc', id: 4, size: 700_000, stream: 1 },
  { op: 'free', id: 3 },
  { op: 'free', id: 4 },
  { op: 'free', id: 1 },
]

test("the map after an op picked on the page is the library's own memory log after that op, stream-owned free chunks included, with regions or mapped extents", async (t) => {
  const dir = tempDir()
  const trace = writeTrace(dir, 'streams.jsonl', streamedTrace())
  const page = join(dir, 'report.html')
  const at = 1234
  const configs = ['--compare', 'arena.extend_strategy=1', '--compare', 'arena.use_virtual_memory=1']
  const json = replay(t, [trace, '--backend', 'virtual', ...configs, '--json', '--memory-log-at', String(at), '--html', page])
  t.is(json.runs.length, 3)
  const logs = json.runs.map((run) => run.memoryLogsAt?.find((l) => l.op === at)?.memoryLog)
  for (const log of logs) {
    if (!log) return t.fail(`no memory log after op ${at}`)
    t.true(
      log.regions.some((r) => r.chunks.some((c) => !c.inUse && (c.stream ?? 0) !== 0)),
      'some free chunk is owned by a stream then',
    )
    t.true(log.reserves.length > 0, 'and a reserve is live')
  }
  await withPage(t, page, async ({ tab, errors }) => {
    await pickOp(tab, at)
    for (let run = 0; run < json.runs.length; run++) {
      t.is(await tab.getAttribute(`figure.map-fig[data-run="${run}"] svg.map`, 'data-op'), String(at))
      t.deepEqual(await mapChunks(tab, run), logChunks(logs[run] as NonNullable<(typeof logs)[number]>), `${json.runs[run].label}: every chunk as the log has it`)
      const regions = await tab.$$eval(`figure.map-fig[data-run="${run}"] rect.region`, (rs) => [...new Set(rs.map((r) => Number(r.getAttribute('data-region'))))])
      t.deepEqual(
        regions,
        (logs[run]?.regions ?? []).map((r) => r.id),
        'and every region',
      )
    }
    t.deepEqual(errors, [])
  })
})

test('clicking a timeline shows the maps after the op clicked', async (t) => {
  const dir = tempDir()
  const trace = writeTrace(dir, 'known.jsonl', KNOWN)
  const page = join(dir, 'report.html')
  replay(t, [trace, '--backend', 'virtual', '--html', page])
  await withPage(t, page, async ({ tab }) => {
    const plot = await tab.locator('section.run[data-run="0"] rect.plot').boundingBox()
    if (!plot) return t.fail('no plot')
    // Ops 0 … 8 are nine columns: the middle of the sixth is op 5.
    await tab.mouse.click(plot.x + (plot.width * 5.5) / 9, plot.y + 5)
    t.is(await tab.getAttribute('figure.map-fig[data-run="0"] svg.map', 'data-op'), '5')
    t.regex((await tab.textContent('figure.map-fig[data-run="0"] figcaption')) ?? '', /after op 5$/)
  })
})

test("by default each map shows its config at its peak held: the library's memory log after that op holds the peak", async (t) => {
  const dir = tempDir()
  const page = join(dir, 'report.html')
  const first = replay(t, ['--sample', 'growing', '--backend', 'virtual', '--compare', 'arena.extend_strategy=1', '--json', '--html', page])
  let ops: number[] = []
  await withPage(t, page, async ({ tab }) => {
    ops = await tab.$$eval('figure.map-fig svg.map', (svgs) => svgs.map((s) => Number(s.getAttribute('data-op'))))
    const captions = await tab.$$eval('figure.map-fig figcaption', (cs) => cs.map((c) => c.textContent ?? ''))
    captions.forEach((c, i) => t.true(c.endsWith(`at peak held, after op ${ops[i].toLocaleString('en')}`), c))
  })
  t.is(ops.length, 2)
  const args = ['--sample', 'growing', '--backend', 'virtual', '--compare', 'arena.extend_strategy=1', '--json']
  for (const [i, op] of ops.entries()) {
    const log = replay(t, [...args, '--memory-log-at', String(op - 1), '--memory-log-at', String(op)]).runs[i].memoryLogsAt ?? []
    t.is(log[1]?.memoryLog.stats.totalAllocated, first.runs[i].peakHeld, `${first.runs[i].label} holds its peak after op ${op}`)
    t.true((log[0]?.memoryLog.stats.totalAllocated ?? Infinity) < first.runs[i].peakHeld, 'and not before it')
  }
})

test("hovering an allocation's band shows its size, requested size, the ops that allocated and freed it, and its stream", async (t) => {
  const dir = tempDir()
  const trace = writeTrace(dir, 'known.jsonl', KNOWN)
  const page = join(dir, 'report.html')
  const json = replay(t, [trace, '--backend', 'virtual', '--json', '--memory-log-at', '3', '--html', page])
  const chunk = json.runs[0].memoryLogsAt?.[0].memoryLog.regions.flatMap((r) => r.chunks).find((c) => c.inUse && c.requestedSize === 3_000_000)
  if (!chunk) return t.fail('the first allocation is in the log')
  await withPage(t, page, async ({ tab }) => {
    await tab.hover('section.run[data-run="0"] polygon.band[data-alloc="0"]')
    const tip = (await tab.textContent('#tip')) ?? ''
    t.true(await tab.isVisible('#tip'))
    t.true(tip.includes(`size ${(chunk.size / 2 ** 20).toFixed(1)} MiB (${chunk.size.toLocaleString('en')} bytes)`), tip)
    t.true(tip.includes('requested 2.9 MiB (3,000,000 bytes)'), tip)
    t.true(tip.includes('allocated at op 1, freed at op 8'), tip)
    t.true(tip.includes('stream 1'), tip)
    t.true(tip.includes(`at 0x${chunk.addr.toString(16)}`), tip)
  })
})

test("hovering a chunk of the map shows its allocation's size, requested size, the ops that allocated and freed it, and its stream", async (t) => {
  const dir = tempDir()
  const trace = writeTrace(dir, 'known.jsonl', KNOWN)
  const page = join(dir, 'report.html')
  const json = replay(t, [trace, '--backend', 'virtual', '--json', '--memory-log-at', '3', '--html', page])
  const chunk = json.runs[0].memoryLogsAt?.[0].memoryLog.regions.flatMap((r) => r.chunks).find((c) => c.inUse && c.requestedSize === 2_500_000)
  if (!chunk) return t.fail('the third allocation is in the log')
  await withPage(t, page, async ({ tab }) => {
    await pickOp(tab, 3)
    await tab.hover(`figure.map-fig[data-run="0"] rect.chunk[data-addr="${chunk.addr}"]:not([data-part])`)
    const tip = (await tab.textContent('#tip')) ?? ''
    t.true(tip.includes(`size ${(chunk.size / 2 ** 20).toFixed(1)} MiB (${chunk.size.toLocaleString('en')} bytes)`), tip)
    t.true(tip.includes('requested 2.4 MiB (2,500,000 bytes)'), tip)
    t.true(tip.includes('allocated at op 3, freed at op 6'), tip)
    t.true(tip.includes('stream 2'), tip)
  })
})

test("--memory-log-at past the trace's last op is refused, naming the trace's length", (t) => {
  const dir = tempDir()
  const trace = writeTrace(dir, 'known.jsonl', KNOWN)
  const r = spawnSync(process.execPath, [join(root, 'dist', 'cli.js'), 'replay', trace, '--backend', 'virtual', '--json', '--memory-log-at', '9'], { encoding: 'utf8' })
  t.is(r.status, 1)
  t.regex(r.stderr, /ERR_ARENA_INVALID_ARGUMENT: .*after op 9, and the trace has 8 operations/)
})

test('past 20,000 chunks a map draws runs of chunks under a pixel wide as one shape each, and counts every chunk', async (t) => {
  const dir = tempDir()
  const lines: object[] = []
  for (let id = 1; id <= 30_000; id++) lines.push({ op: 'alloc', id, size: 1024 + ((id * 37) % 3000), stream: 0 })
  for (let id = 1; id <= 30_000; id += 2) lines.push({ op: 'free', id })
  const trace = writeTrace(dir, 'many.jsonl', lines)
  const page = join(dir, 'report.html')
  const at = 40_000
  // The region arena: its largest region sets the row, so these chunks are under a pixel wide.
  const json = replay(t, [trace, '--backend', 'virtual', '--config', 'arena.use_virtual_memory=0', '--json', '--memory-log-at', String(at), '--html', page])
  const log = json.runs[0].memoryLogsAt?.[0].memoryLog
  if (!log) return t.fail('no memory log')
  const chunks = log.regions.reduce((n, r) => n + r.chunks.length, 0)
  t.true(chunks > 20_000)
  await withPage(t, page, async ({ tab, errors }) => {
    await pickOp(tab, at)
    const drawn = await tab.$$eval('figure.map-fig svg.map rect.chunk', (rs) => ({
      shapes: rs.length,
      counted: rs.reduce((n, r) => n + (r.classList.contains('many') ? Number(r.getAttribute('data-count')) : r.hasAttribute('data-part') ? 0 : 1), 0),
    }))
    t.true(drawn.shapes < 2_000, `${drawn.shapes} shapes`)
    t.is(drawn.counted, chunks)
    t.deepEqual(errors, [])
  })
})

test("a PyTorch snapshot's page names torch's stream of an allocation when hovered", async (t) => {
  const dir = tempDir()
  const page = join(dir, 'report.html')
  const json = replay(t, [join(__dirname, 'fixtures', 'torch-snapshot.pickle'), '--backend', 'virtual', '--json', '--memory-log-at', '3', '--html', page]) as ReturnType<typeof replay> & {
    snapshot: { streams: number[] }
  }
  const chunk = json.runs[0].memoryLogsAt?.[0].memoryLog.regions.flatMap((r) => r.chunks).find((c) => c.inUse && c.stream === 2)
  if (!chunk) return t.fail('an allocation on trace stream 2 is live after op 3')
  await withPage(t, page, async ({ tab, errors }) => {
    await pickOp(tab, 3)
    await tab.hover(`figure.map-fig[data-run="0"] rect.chunk[data-addr="${chunk.addr}"]:not([data-part])`)
    const tip = (await tab.textContent('#tip')) ?? ''
    t.true(tip.includes(`stream 2 (torch stream 0x${json.snapshot.streams[1].toString(16)})`), tip)
    t.true(tip.includes(`(${chunk.requestedSize.toLocaleString('en')} bytes)`), tip)
    t.deepEqual(errors, [])
  })
})
