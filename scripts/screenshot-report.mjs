#!/usr/bin/env node
// The `--html` page in Debian's chromium (headless, through playwright-core), after `npm run build`.
//
//   npm run screenshot                      refreshes docs/replay-report.png: the page of
//                                           `replay --sample inference --compare arena.extend_strategy=1`
//   npm run screenshot -- --measure 1000000 [--kind mixed]
//                                           the page of a generated trace (gen-trace's kind, default
//                                           mixed) of that many ops, compared under two configs: its
//                                           bytes, and the time from navigation to drawn (median of 5
//                                           loads), for docs/replay-report.md
import { spawnSync } from 'node:child_process'
import { existsSync, mkdtempSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { chromium } from 'playwright-core'

const root = join(dirname(fileURLToPath(import.meta.url)), '..')
const CHROMIUM = '/usr/bin/chromium'
const cli = join(root, 'dist', 'cli.js')

function run(args) {
  const r = spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8' })
  if (r.status !== 0) throw new Error(`cuda-arena ${args.join(' ')}: ${r.stderr}`)
  return r.stdout
}

async function open(browser, page, viewport = { width: 1400, height: 1000 }) {
  const tab = await browser.newPage({ viewport })
  const errors = []
  tab.on('pageerror', (e) => errors.push(e.message))
  tab.on('console', (m) => m.type() === 'error' && errors.push(m.text()))
  await tab.goto(pathToFileURL(page).href)
  await tab.waitForFunction(() => document.documentElement.dataset.ready !== undefined, null, { timeout: 120_000 })
  if (errors.length || (await tab.evaluate(() => document.documentElement.dataset.ready)) !== '1') throw new Error(`the page failed: ${errors.join('; ')}`)
  return tab
}

if (!existsSync(cli)) throw new Error('run npm run build first')
if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is needed (Debian's chromium)`)
const dir = mkdtempSync(join(tmpdir(), 'cuda-arena-screenshot-'))
const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu'] })
try {
  const measure = process.argv.indexOf('--measure')
  if (measure >= 0) {
    const ops = process.argv[measure + 1] ?? '1000000'
    const kindAt = process.argv.indexOf('--kind')
    const kind = kindAt >= 0 ? process.argv[kindAt + 1] : 'mixed'
    const trace = join(dir, `${kind}.jsonl`)
    run(['gen-trace', '--kind', kind, '--ops', ops, '--seed', '1', '-o', trace])
    const page = join(dir, 'report.html')
    const started = Date.now()
    run(['replay', trace, '--backend', 'virtual', '--compare', 'arena.extend_strategy=1', '--html', page])
    const replayMs = Date.now() - started
    const times = []
    for (let i = 0; i < 5; i++) {
      const tab = await open(browser, page)
      times.push(Number(await tab.evaluate(() => document.documentElement.dataset.renderMs)))
      await tab.close()
    }
    times.sort((a, b) => a - b)
    console.log(`${Number(ops).toLocaleString('en')} ops (${kind}, seed 1, base and arena.extend_strategy=1, virtual): page ${statSync(page).size.toLocaleString('en')} bytes; replay with --html ${replayMs} ms; drawn ${times[2]} ms after navigation (median of 5: ${times.join(', ')})`)
  } else {
    const page = join(dir, 'report.html')
    run(['replay', '--sample', 'inference', '--backend', 'virtual', '--compare', 'arena.extend_strategy=1', '--html', page])
    const tab = await open(browser, page)
    // The whole page in the viewport (a full-page screenshot resizes it, and the page redraws
    // on resize, which would drop the tooltip).
    await tab.setViewportSize({ width: 1400, height: await tab.evaluate(() => document.documentElement.scrollHeight) })
    await tab.waitForTimeout(400)
    // As a user would: drag on the overview over ops 50,000 … 51,500 to zoom into a few
    // requests, fit the bytes axis to them, click the first timeline to see both maps after
    // the same op, and hover a band.
    const overview = await tab.locator('#overview rect.plot').boundingBox()
    const y = overview.y + overview.height / 2
    await tab.mouse.move(overview.x + overview.width * 0.5, y)
    await tab.mouse.down()
    await tab.mouse.move(overview.x + overview.width * 0.515, y, { steps: 4 })
    await tab.mouse.up()
    await tab.check('#fit-y')
    const plot = await tab.locator('section.run[data-run="0"] rect.plot').boundingBox()
    await tab.mouse.click(plot.x + plot.width * 0.6, plot.y + 10)
    const band = await tab.locator('section.run[data-run="1"] rect.plot').boundingBox()
    // The first point down the plot at 43% of its width that is over an allocation's band.
    const at = await tab.evaluate(({ x, y0, y1 }) => {
      for (let y = y0; y < y1; y += 2) {
        const e = document.elementFromPoint(x, y)
        if (e?.matches('polygon.band:not(.rest)')) return y
      }
      return null
    }, { x: band.x + band.width * 0.43, y0: band.y, y1: band.y + band.height })
    await tab.mouse.move(band.x + band.width * 0.43, (at ?? band.y) + 3, { steps: 3 })
    const out = join(root, 'docs', 'replay-report.png')
    await tab.screenshot({ path: out })
    console.log(`wrote ${out}`)
  }
} finally {
  await browser.close()
  rmSync(dir, { recursive: true, force: true })
}
