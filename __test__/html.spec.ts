import test from 'ava'
import { spawnSync } from 'node:child_process'
import { existsSync, mkdtempSync } from 'node:fs'
import { join } from 'node:path'
import { tmpdir } from 'node:os'
import { pathToFileURL } from 'node:url'
import { chromium } from 'playwright-core'

const root = join(__dirname, '..')
const CHROMIUM = '/usr/bin/chromium'

test("the --html page renders in a real browser without errors, one shape per region of the JSON's final map", async (t) => {
  t.true(existsSync(CHROMIUM), `${CHROMIUM} is needed (Debian's chromium; .ci/run installs it)`)
  const dir = mkdtempSync(join(tmpdir(), 'cuda-arena-html-'))
  const page = join(dir, 'report.html')
  const r = spawnSync(
    process.execPath,
    [join(root, 'dist', 'cli.js'), 'replay', '--sample', 'growing', '--backend', 'virtual', '--compare', 'arena.extend_strategy=1', '--json', '--html', page],
    { encoding: 'utf8' },
  )
  t.is(r.status, 0, r.stderr)
  const json = JSON.parse(r.stdout) as { runs: { memoryLog: { regions: unknown[] } }[] }
  const regions = json.runs.reduce((n, run) => n + run.memoryLog.regions.length, 0)
  t.true(regions > 0)

  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  })
  try {
    const tab = await browser.newPage()
    const errors: string[] = []
    tab.on('pageerror', (e) => errors.push(e.message))
    tab.on('console', (m) => {
      if (m.type() === 'error') errors.push(m.text())
    })
    const requests: string[] = []
    tab.on('request', (req) => requests.push(req.url()))
    await tab.goto(pathToFileURL(page).href)
    t.deepEqual(errors, [])
    t.deepEqual(requests, [pathToFileURL(page).href], 'the page fetches nothing')
    t.is(await tab.locator('svg.map rect.region').count(), regions)
    t.is(await tab.locator('svg.chart').count(), json.runs.length)
    t.is(await tab.locator('svg.chart polyline.series').count(), 3 * json.runs.length)
    await tab.screenshot({ path: join(dir, 'report.png'), fullPage: true })
  } finally {
    await browser.close()
  }
})

// Issue 11, item 16: the pool's run showed the arena's regions under the pool's label.
test("a memory pool's section says it has no regions instead of drawing a map", async (t) => {
  t.true(existsSync(CHROMIUM), `${CHROMIUM} is needed (Debian's chromium; .ci/run installs it)`)
  const dir = mkdtempSync(join(tmpdir(), 'cuda-arena-html-'))
  const page = join(dir, 'pool.html')
  const r = spawnSync(
    process.execPath,
    [join(root, 'dist', 'cli.js'), 'replay', '--sample', 'small', '--backend', 'virtual', '--compare', 'arena.use_cuda_mempool=1', '--json', '--html', page],
    { encoding: 'utf8' },
  )
  t.is(r.status, 0, r.stderr)
  const json = JSON.parse(r.stdout) as { runs: { allocator: string; memoryLog: { regions: unknown[] } }[] }
  t.deepEqual(
    json.runs.map((run) => run.allocator),
    ['arena', 'memory pool'],
  )
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  })
  try {
    const tab = await browser.newPage()
    await tab.goto(pathToFileURL(page).href)
    const sections = tab.locator('section')
    t.is(await sections.count(), 2)
    t.is(await sections.nth(0).locator('svg.map rect.region').count(), json.runs[0].memoryLog.regions.length)
    t.is(await sections.nth(1).locator('svg.map').count(), 0)
    t.regex((await sections.nth(1).locator('p.no-map').textContent()) ?? '', /memory pool has no regions/)
    t.is(await tab.locator('svg.chart').count(), 2, 'both draw memory over the replay')
  } finally {
    await browser.close()
  }
})
