/** The `--html` page of a 1,000,000-op trace stays small enough to open. */
import test from 'ava'
import { spawnSync } from 'node:child_process'
import { statSync } from 'node:fs'
import { join } from 'node:path'
import { replay, root, tempDir, withPage } from './html-page'

/** The bound asserted: the page measured 9.6 MB (docs/replay-report.md); the rest is room
 * for changes of the arena's layout, which move addresses and sizes. */
const MAX_PAGE_BYTES = 12_000_000

test(`a 1,000,000-op trace compared under two configs makes a page under ${MAX_PAGE_BYTES.toLocaleString('en')} bytes that draws without errors`, async (t) => {
  t.timeout(5 * 60_000)
  const dir = tempDir()
  const trace = join(dir, 'mixed.jsonl')
  const gen = spawnSync(process.execPath, [join(root, 'dist', 'cli.js'), 'gen-trace', '--kind', 'mixed', '--ops', '1000000', '--seed', '1', '-o', trace], { encoding: 'utf8' })
  t.is(gen.status, 0, gen.stderr)
  const page = join(dir, 'report.html')
  replay(t, [trace, '--backend', 'virtual', '--compare', 'arena.extend_strategy=1', '--html', page])
  const bytes = statSync(page).size
  t.true(bytes < MAX_PAGE_BYTES, `${bytes} bytes`)
  t.log(`${bytes.toLocaleString('en')} bytes`)
  await withPage(t, page, async ({ tab, errors, requests }) => {
    t.is(await tab.evaluate(() => document.documentElement.dataset.ready), '1')
    t.deepEqual(errors, [])
    t.deepEqual(requests, [])
    t.is(await tab.locator('section.run svg.chart').count(), 2)
    t.is(await tab.locator('figure.map-fig svg.map').count(), 2)
  })
})
