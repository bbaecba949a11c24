/** Helpers of the `--html` page's tests (`html*.spec.ts`): the command, and the page in Debian's chromium. */
import type { ExecutionContext } from 'ava'
import { spawnSync } from 'node:child_process'
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { chromium, type Browser, type Page } from 'playwright-core'

export const root = join(__dirname, '..')
const CHROMIUM = '/usr/bin/chromium'

/** A fresh directory for a test's files. */
export function tempDir(): string {
  return mkdtempSync(join(tmpdir(), 'cuda-arena-html-'))
}

/** A trace file of `lines` (objects written one per line) in `dir`. */
export function writeTrace(dir: string, name: string, lines: object[]): string {
  const file = join(dir, name)
  writeFileSync(file, lines.map((l) => JSON.stringify(l)).join('\n') + '\n')
  return file
}

/** One chunk of a memory log as `replay --json` prints it (numbers). */
export interface LogChunk {
  addr: number
  size: number
  requestedSize: number
  inUse: boolean
  stream?: number | null
}

/** A memory log as `replay --json` prints it. */
export interface Log {
  regions: { id: number; base: number; size: number; chunks: LogChunk[] }[]
  reserves: { addr: number; size: number }[]
  stats: { totalAllocated: number }
}

/** What the tests read of `replay --json`. */
export interface ReplayJson {
  runs: {
    label: string
    allocator: string
    ops: number
    peakHeld: number
    peakRequested: number
    failedAllocs: number
    elapsedNs: number
    stats: { numArenaExtensions: number; numArenaShrinkages: number }
    memoryLog: Log
    memoryLogsAt?: { op: number; memoryLog: Log }[]
  }[]
}

/** Runs `cuda-arena replay` (the built dist/cli.js) with `args`; its JSON when `--json` is in them. */
export function replay(t: ExecutionContext, args: string[]): ReplayJson {
  const r = spawnSync(process.execPath, [join(root, 'dist', 'cli.js'), 'replay', ...args], { encoding: 'utf8', maxBuffer: 1 << 28 })
  t.is(r.status, 0, r.stderr)
  return args.includes('--json') ? (JSON.parse(r.stdout) as ReplayJson) : { runs: [] }
}

/** A page open in chromium, with every request it made besides its own file, and every
 * error it logged. */
export interface OpenPage {
  tab: Page
  requests: string[]
  errors: string[]
}

/** Opens the page at `file` in Debian's chromium (headless), refusing any request but the
 * page itself, and waits until it has drawn; runs `body`, then closes the browser. */
export async function withPage(t: ExecutionContext, file: string, body: (p: OpenPage) => Promise<void>, viewport = { width: 1400, height: 1000 }): Promise<void> {
  t.true(existsSync(CHROMIUM), `${CHROMIUM} is needed (Debian's chromium; .ci/run installs it)`)
  const browser: Browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  })
  try {
    const context = await browser.newContext({ viewport })
    const own = pathToFileURL(file).href
    const requests: string[] = []
    await context.route('**/*', (route) => {
      const url = route.request().url()
      if (url === own) return route.continue()
      requests.push(url)
      return route.abort()
    })
    const tab = await context.newPage()
    tab.on('request', (req) => {
      if (req.url() !== own && !requests.includes(req.url())) requests.push(req.url())
    })
    const errors: string[] = []
    tab.on('pageerror', (e) => errors.push(e.message))
    tab.on('console', (m) => {
      if (m.type() === 'error') errors.push(m.text())
    })
    await tab.goto(own)
    await tab.waitForFunction(() => document.documentElement.dataset.ready !== undefined, null, { timeout: 90_000 })
    await body({ tab, requests, errors })
  } finally {
    await browser.close()
  }
}

/** Shows the maps after op `k`, as a user does: typing it into the op box. */
export async function pickOp(tab: Page, k: number): Promise<void> {
  await tab.fill('#op-number', String(k))
  await tab.press('#op-number', 'Enter')
}

/** The chunks a map draws (one per chunk, its first piece), as `[addr, size, state, stream]`. */
export async function mapChunks(tab: Page, run: number): Promise<[number, number, string, number][]> {
  return tab.$$eval(`figure.map-fig[data-run="${run}"] svg.map rect.chunk:not([data-part])`, (rects) =>
    rects.map((r) => [Number(r.getAttribute('data-addr')), Number(r.getAttribute('data-size')), r.getAttribute('data-state') ?? '', Number(r.getAttribute('data-stream') ?? 0)] as [number, number, string, number]),
  )
}

/** The same of a memory log: every region's chunks, then the reserves. */
export function logChunks(log: Log): [number, number, string, number][] {
  return [
    ...log.regions.flatMap((r) => r.chunks.map((c) => [c.addr, c.size, c.inUse ? 'in-use' : 'free', c.stream ?? 0] as [number, number, string, number])),
    ...log.reserves.map((r) => [r.addr, r.size, 'reserve', 0] as [number, number, string, number]),
  ]
}
