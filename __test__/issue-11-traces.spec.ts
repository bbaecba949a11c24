/**
 * Issue 11, items 5, 12 (the trace parts) and 16: no argument of the trace functions aborts,
 * wraps or truncates, and the `cuda-arena` command answers every bad input with one bounded
 * line naming the file and line, exit code 1, in bounded memory.
 */
import test from 'ava'
import { spawnSync, type SpawnSyncOptions } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { tmpdir } from 'node:os'
import { mixedTrace, nativePairNs, replayTrace, type TraceOp } from '../ts/index'
import { factory, throwsCode } from './helpers'

const root = join(__dirname, '..')
const bin = join(root, 'dist', 'cli.js')
const dist = join(root, 'dist', 'index.js')
const dir = mkdtempSync(join(tmpdir(), 'cuda-arena-issue-11-'))
const INVALID = 'ERR_ARENA_INVALID_ARGUMENT'

test.before(() => {
  if (!existsSync(bin)) throw new Error(`${bin} is missing: run npm run build first`)
})
test.after.always(() => rmSync(dir, { recursive: true, force: true }))

interface Run {
  code: number | null
  signal: NodeJS.Signals | null
  out: string
  err: string
}

function spawn(cmd: string, args: string[], options: SpawnSyncOptions = {}): Run {
  const r = spawnSync(cmd, args, { encoding: 'utf8', maxBuffer: 64 << 20, ...options })
  return { code: r.status, signal: r.signal, out: String(r.stdout), err: String(r.stderr) }
}

/** `cuda-arena ...args`, the built command, as a user runs it. */
function cli(...args: string[]): Run {
  return spawn(process.execPath, [bin, ...args])
}

/** Runs `body` (JavaScript, with the built package as `m`) in a child: an abort kills only it. */
function child(body: string): Run {
  return spawn(process.execPath, ['-e', `const m = require(${JSON.stringify(dist)});\n${body}`])
}

/** In a child: calls `call` and prints the error's code, or `no error`. */
function codeInChild(call: string): Run {
  return child(`try { ${call}; console.log('no error') } catch (e) { console.log(e.code) }`)
}

/** A one-line error message: one line on stderr, no stack trace, bounded. */
function assertOneLine(t: import('ava').ExecutionContext, r: Run, what: string): void {
  t.is(r.code, 1, `${what}: exit code (stderr: ${r.err.slice(0, 300)})`)
  const lines = r.err.trimEnd().split('\n')
  t.is(lines.length, 1, `${what}: one line, got ${r.err.slice(0, 600)}`)
  t.true(lines[0].startsWith('cuda-arena '), `${what}: ${lines[0].slice(0, 200)}`)
  t.notRegex(r.err, /\n\s+at /, `${what}: no stack trace`)
  t.true(r.err.length < 600, `${what}: ${r.err.length} characters`)
}

function file(name: string, content: string | Buffer): string {
  const path = join(dir, name)
  writeFileSync(path, content)
  return path
}

const ALLOC = (id: number, size = 4096, stream?: number): string =>
  JSON.stringify(stream === undefined ? { op: 'alloc', id, size } : { op: 'alloc', id, size, stream })
const FREE = (id: number): string => JSON.stringify({ op: 'free', id })

// ---- item 5: no argument aborts the process -------------------------------------------------

test('mixedTrace(-1) is an invalid argument, not an abort (item 5)', (t) => {
  const r = codeInChild('m.mixedTrace(-1)')
  t.is(r.signal, null, r.err)
  t.is(r.out.trim(), INVALID, r.err)
})

test('mixedTrace of more ops than its documented maximum is an invalid argument (item 5)', (t) => {
  for (const ops of ['1e12', '2 ** 32 - 1', '10_000_001']) {
    const r = codeInChild(`m.mixedTrace(${ops})`)
    t.is(r.signal, null, `${ops}: ${r.err}`)
    t.is(r.out.trim(), INVALID, ops)
  }
})

test('replayTrace with streams: -1 is an invalid argument, not an abort (item 5)', (t) => {
  const r = codeInChild(`
    const f = new m.AllocatorFactory({ name: 'streams-' + process.pid, backend: 'virtual' })
    m.replayTrace(f.createAllocator({ name: 'Cuda' }), [], { streams: -1 })`)
  t.is(r.signal, null, r.err)
  t.is(r.out.trim(), INVALID, r.err)
})

test('replayTrace with more streams than the maximum is an invalid argument (item 5)', (t) => {
  const a = factory('virtual').createAllocator({ name: 'Cuda' })
  for (const streams of [1025, 2 ** 32, 1.5, Number.NaN]) throwsCode(t, () => replayTrace(a, [], { streams }), INVALID, String(streams))
})

// ---- item 12: integer arguments are checked, never wrapped or truncated ---------------------

test('mixedTrace(2**32+3) is an invalid argument, not a 3-op trace (item 12)', (t) => {
  throwsCode(t, () => mixedTrace(2 ** 32 + 3), INVALID)
})

test('mixedTrace takes a whole number of ops and returns exactly that many (item 12)', (t) => {
  for (const ops of [0, 1, 2, 3, 1001]) t.is(mixedTrace(ops).length, ops, String(ops))
  for (const ops of [1.5, Number.NaN, -0.5, Infinity, '10', 10n]) throwsCode(t, () => mixedTrace(ops as number), INVALID, String(ops))
})

test("mixedTrace's options minSize, maxSize, maxLive and seed are checked integers (item 12)", (t) => {
  const bad: [string, unknown][] = [
    ['minSize', 0],
    ['minSize', -1],
    ['minSize', 1.5],
    ['maxSize', Number.NaN],
    ['maxSize', 2 ** 53],
    ['maxLive', -1],
    ['maxLive', 0],
    ['maxLive', 2 ** 32 + 1],
    ['seed', -1],
    ['seed', 0.5],
    ['seed', 2 ** 53],
    ['colour', 1],
  ]
  for (const [key, value] of bad) {
    const err = t.throws(() => mixedTrace(10, { [key]: value }), undefined, `${key}=${String(value)}`) as { code?: string; message: string }
    t.is(err.code, INVALID, key)
    t.true(err.message.includes(`options.${key}`), `names options.${key}: ${err.message}`)
  }
  throwsCode(t, () => mixedTrace(10, { minSize: 1000, maxSize: 999 }), INVALID, 'maxSize below minSize')
  throwsCode(t, () => mixedTrace(10, 5 as never), INVALID, 'options not an object')
})

test('mixedTrace ids and sizes are exact: every id is allocated once and freed once', (t) => {
  const trace = mixedTrace(20_000, { minSize: 256, maxSize: 2 ** 40, maxLive: 100, seed: 9 })
  const live = new Set<number>()
  for (const op of trace) {
    t.true(Number.isSafeInteger(op.id))
    if (op.op === 'alloc') {
      t.false(live.has(op.id))
      t.true(op.size >= 256 && op.size <= 2 ** 40)
      live.add(op.id)
    } else {
      t.true(live.delete(op.id))
    }
  }
  t.is(live.size, 0)
})

test('trace ids are not wrapped: 2**32+1 and 1 are two allocations (item 12)', (t) => {
  const a = factory('virtual').createAllocator({ name: 'Cuda' })
  const trace: TraceOp[] = [
    { op: 'alloc', id: 1, size: 256 },
    { op: 'alloc', id: 2 ** 32 + 1, size: 512 },
    { op: 'free', id: 1 },
    { op: 'free', id: 2 ** 32 + 1 },
  ]
  const r = replayTrace(a, trace)
  t.is(r.peakRequested, 768)
  t.is(r.ops, 4)
})

test('trace ids may be bigints up to 2^64-1 (item 12)', (t) => {
  const a = factory('virtual').createAllocator({ name: 'Cuda' })
  const big = 2n ** 64n - 1n
  const r = replayTrace(a, [
    { op: 'alloc', id: big, size: 256 },
    { op: 'alloc', id: 2n ** 53n, size: 256 },
    { op: 'free', id: big },
    { op: 'free', id: 2n ** 53n },
  ])
  t.is(r.peakRequested, 512)
})

test('a trace element with a bad op, id, size or stream is an invalid argument naming it (item 12)', (t) => {
  const a = factory('virtual').createAllocator({ name: 'Cuda' })
  const ok = { op: 'alloc', id: 1, size: 256 }
  const bad: [unknown, string][] = [
    [{ ...ok, id: -1 }, 'trace[1].id'],
    [{ ...ok, id: 1.5 }, 'trace[1].id'],
    [{ ...ok, id: 2 ** 53 }, 'trace[1].id'],
    [{ ...ok, id: -1n }, 'trace[1].id'],
    [{ ...ok, id: 2n ** 64n }, 'trace[1].id'],
    [{ ...ok, id: '1' }, 'trace[1].id'],
    [{ op: 'free' }, 'trace[1].id'],
    [{ ...ok, size: -1 }, 'trace[1].size'],
    [{ ...ok, size: Number.NaN }, 'trace[1].size'],
    [{ ...ok, size: 1.5 }, 'trace[1].size'],
    [{ ...ok, size: '12' }, 'trace[1].size'],
    [{ op: 'alloc', id: 1 }, 'trace[1].size'],
    [{ ...ok, stream: -1 }, 'trace[1].stream'],
    [{ ...ok, stream: 1.5 }, 'trace[1].stream'],
    [{ ...ok, stream: 2 ** 32 }, 'trace[1].stream'],
    [{ ...ok, stream: 1 }, 'trace[1].stream'],
    [{ ...ok, op: 'grow' }, 'trace[1].op'],
    [{ ...ok, colour: 1 }, 'trace[1].colour'],
    [null, 'trace[1]'],
    [5, 'trace[1]'],
  ]
  for (const [element, name] of bad) {
    const before = a.getStats()
    const err = t.throws(() => replayTrace(a, [{ op: 'alloc', id: 7, size: 256 }, element as TraceOp]), undefined, name) as { code?: string; message: string }
    t.is(err.code, INVALID, `${name}: ${err.message}`)
    t.true(err.message.includes(name), `names ${name}: ${err.message}`)
    t.deepEqual(a.getStats(), before, `${name}: nothing changed`)
  }
  throwsCode(t, () => replayTrace(a, 'trace' as never), INVALID, 'trace not an array')
  throwsCode(t, () => replayTrace(a, [], 5 as never), INVALID, 'options not an object')
  throwsCode(t, () => replayTrace(a, [], { trackPeaks: 'yes' } as never), INVALID, 'trackPeaks not a boolean')
  throwsCode(t, () => replayTrace(a, [], { colour: 1 } as never), INVALID, 'unknown option')
})

const twoStreams = (s1: number, s2: number): TraceOp[] => [
  { op: 'alloc', id: 1, size: 2 ** 20, stream: s1 },
  { op: 'free', id: 1 },
  { op: 'alloc', id: 2, size: 2 ** 20, stream: s2 },
  { op: 'free', id: 2 },
]

test('replayTrace allocates stream N on the Nth given stream', (t) => {
  // In the region arena (ORT's rule) a chunk freed on stream 1 is not taken by stream 2 (it
  // never waited on stream 1), so the arena grows; without streams the freed chunk is reused.
  const region = { useVirtualMemory: false }
  const onStreams = replayTrace(factory('virtual').createAllocator({ name: 'Cuda' }, region), twoStreams(1, 2), { streams: 2, trackPeaks: true })
  const noStreams = replayTrace(factory('virtual').createAllocator({ name: 'Cuda' }, region), twoStreams(0, 0), { trackPeaks: true })
  t.is(noStreams.peakHeld, 2 ** 20)
  t.true(onStreams.peakHeld > noStreams.peakHeld)
})

test('in the default mode, stream 2 is served from the page stream 1 mapped: nothing grows', (t) => {
  const onStreams = replayTrace(factory('virtual').createAllocator({ name: 'Cuda' }), twoStreams(1, 2), { streams: 2, trackPeaks: true })
  const noStreams = replayTrace(factory('virtual').createAllocator({ name: 'Cuda' }), twoStreams(0, 0), { trackPeaks: true })
  t.is(noStreams.peakHeld, 2 ** 21, 'one 2 MiB page')
  t.is(onStreams.peakHeld, noStreams.peakHeld)
})

test('a replay that ends with allocations live says how many, and frees them', (t) => {
  const a = factory('virtual').createAllocator({ name: 'Cuda' })
  const r = replayTrace(a, [
    { op: 'alloc', id: 1, size: 256 },
    { op: 'alloc', id: 2, size: 256 },
    { op: 'free', id: 1 },
  ])
  t.is(r.liveAtEnd, 1)
  t.is(a.getStats().inUse, 0n)
})

test('nativePairNs takes a checked size and iteration count (item 12)', (t) => {
  const a = factory('virtual').createAllocator({ name: 'Cuda' })
  for (const size of [-1, Number.NaN, 1.5, 2 ** 53, '256']) throwsCode(t, () => nativePairNs(a, size as number, 10), INVALID, `size ${String(size)}`)
  for (const n of [-1, 1.5, 2 ** 32, Number.NaN]) throwsCode(t, () => nativePairNs(a, 256, n), INVALID, `iterations ${n}`)
  t.true(nativePairNs(a, 256, 10) >= 0)
})

// ---- item 16: the command -----------------------------------------------------------------

test('--html to an unwritable path is one line with exit 1, before any replay (item 16)', (t) => {
  for (const html of ['/proc/nope/x.html', dir]) {
    const r = cli('replay', '--sample', 'small', '--backend', 'virtual', '--html', html)
    assertOneLine(t, r, html)
    t.true(r.err.includes(html), r.err)
    t.is(r.out, '', 'nothing replayed, nothing printed')
  }
})

test('--compare arena.use_cuda_mempool=1 replays through the memory pool, under its label (item 16)', (t) => {
  const trace = file('pool.jsonl', [ALLOC(1, 300_000), ALLOC(2, 5_000), FREE(1), ALLOC(3, 300_000), FREE(2), FREE(3)].join('\n') + '\n')
  const r = cli('replay', trace, '--backend', 'virtual', '--json', '--compare', 'arena.use_cuda_mempool=1')
  t.is(r.code, 0, r.err)
  type RunJson = { label: string; allocator: string; peakHeld: number; peakRequested: number; memoryLog: { regions: unknown[] } }
  const runs = (JSON.parse(r.out) as { runs: RunJson[] }).runs
  t.deepEqual(
    runs.map((x) => [x.label, x.allocator]),
    [
      ['base', 'arena'],
      ['arena.use_cuda_mempool=1', 'memory pool'],
    ],
  )
  t.is(runs[1].memoryLog.regions.length, 0, 'a pool has no regions')
  // The library's own pool, on the same trace, holds what the command says the pool held.
  const pool = factory('virtual').createAllocator({ name: 'Cuda' }, { 'arena.use_cuda_mempool': '1' })
  const own = replayTrace(pool, readFileSync(trace, 'utf8').trim().split('\n').map((l) => JSON.parse(l) as TraceOp), { trackPeaks: true })
  t.is(runs[1].peakHeld, own.peakHeld)
  t.not(runs[1].peakHeld, runs[0].peakHeld)

  const table = cli('replay', trace, '--backend', 'virtual', '--compare', 'arena.use_cuda_mempool=1')
  t.is(table.code, 0, table.err)
  t.regex(table.out, /memory pool/)
})

test('an invalid UTF-8 byte is an error naming its line, and --lenient skips that line (item 16)', (t) => {
  const bad = file('utf8.jsonl', Buffer.concat([Buffer.from(ALLOC(1) + '\n'), Buffer.from('{"op":"alloc","id":2,"size":1}\xff\n', 'latin1'), Buffer.from(FREE(1) + '\n')]))
  const r = cli('replay', bad, '--backend', 'virtual')
  assertOneLine(t, r, 'utf-8')
  t.true(r.err.includes(`${bad}:line 2`), r.err)
  const lenient = cli('replay', bad, '--backend', 'virtual', '--lenient', '--json')
  t.is(lenient.code, 0, lenient.err)
  const json = JSON.parse(lenient.out) as { linesSkipped: string[]; runs: { ops: number }[] }
  t.is(json.linesSkipped.length, 1)
  t.is(json.runs[0].ops, 2)
})

test('"stream": N lines replay on trace stream N (item 16)', (t) => {
  const streams = file('streams.jsonl', [ALLOC(1, 2 ** 20, 7), FREE(1), ALLOC(2, 2 ** 20, 9), FREE(2)].join('\n') + '\n')
  const none = file('nostreams.jsonl', [ALLOC(1, 2 ** 20, 0), FREE(1), ALLOC(2, 2 ** 20, 0), FREE(2)].join('\n') + '\n')
  // The region arena keeps ORT's rule: no stream takes another's free chunk before a reset.
  const region = ['--config', 'arena.use_virtual_memory=0']
  const a = cli('replay', streams, '--backend', 'virtual', '--json', ...region)
  const b = cli('replay', none, '--backend', 'virtual', '--json', ...region)
  t.is(a.code, 0, a.err)
  t.is(b.code, 0, b.err)
  const held = (r: Run): number => (JSON.parse(r.out) as { runs: { peakHeld: number }[] }).runs[0].peakHeld
  t.true(held(a) > held(b), 'memory freed on stream 7 is not taken by stream 9')
})

test('more distinct stream numbers than the maximum is an error naming the line (item 16)', (t) => {
  const lines = Array.from({ length: 1025 }, (_, i) => ALLOC(i + 1, 256, i + 1))
  const r = cli('replay', file('many-streams.jsonl', lines.join('\n') + '\n'), '--backend', 'virtual')
  assertOneLine(t, r, 'streams')
  t.regex(r.err, /line 1025/)
})

test('a UTF-8 byte order mark at the start is skipped (item 16)', (t) => {
  const bom = file('bom.jsonl', '\ufeff' + ALLOC(1) + '\n' + FREE(1) + '\n')
  for (const lenient of [[], ['--lenient']]) {
    const r = cli('replay', bom, '--backend', 'virtual', '--json', ...lenient)
    t.is(r.code, 0, r.err)
    const json = JSON.parse(r.out) as { linesSkipped: string[]; runs: { ops: number }[] }
    t.is(json.runs[0].ops, 2)
    t.deepEqual(json.linesSkipped, [])
  }
})

test('a huge number is quoted in a bounded message (item 16)', (t) => {
  // Within the line limit: the message quotes a short prefix of the number.
  const long = file('long-number.jsonl', `{"op":"alloc","id":1,"size":${'9'.repeat(4000)}}\n`)
  const r = cli('replay', long, '--backend', 'virtual')
  assertOneLine(t, r, 'long number')
  t.true(r.err.includes(`${long}:line 1`), r.err)
  // A 100 MB line: refused at the line limit, after reading a few KiB.
  const huge = join(dir, 'huge-number.jsonl')
  writeFileSync(huge, Buffer.alloc(100 << 20, '1'))
  const h = cli('replay', huge, '--backend', 'virtual')
  assertOneLine(t, h, '100 MB number')
  t.regex(h.err, /line 1: longer than 4096 bytes/)
  rmSync(huge)
})

test('a line just over the maximum line length is refused; one at the maximum is read (item 16)', (t) => {
  const line = (n: number): string => {
    const base = ALLOC(1, 256)
    return base.slice(0, -1) + ' '.repeat(n - base.length) + '}'
  }
  const at = cli('replay', file('at-max.jsonl', line(4096) + '\n' + FREE(1) + '\n'), '--backend', 'virtual')
  t.is(at.code, 0, at.err)
  const over = cli('replay', file('over-max.jsonl', line(4097) + '\n' + FREE(1) + '\n'), '--backend', 'virtual', '--lenient')
  assertOneLine(t, over, 'over the maximum, even with --lenient')
  t.regex(over.err, /line 1: longer than 4096 bytes/)
})

test('duplicate keys in a line are an error naming the key (item 16)', (t) => {
  const dup = file('dup.jsonl', '{"op":"alloc","id":1,"size":5,"id":2}\n')
  const r = cli('replay', dup, '--backend', 'virtual')
  assertOneLine(t, r, 'duplicate key')
  t.regex(r.err, /line 1: .*"id"/)
})

test('replay /dev/zero stops at once in bounded memory (item 16)', (t) => {
  // 2 GB of address space: Node starts in it, and the old read of the whole file did not fit.
  const r = spawn('prlimit', ['--as=2000000000', process.execPath, bin, 'replay', '/dev/zero', '--backend', 'virtual'])
  assertOneLine(t, r, '/dev/zero')
  t.regex(r.err, /\/dev\/zero:line 1: longer than 4096 bytes/)
})

test('a binary file is an error naming its first line; --lenient skips lines but never stores them all (item 16)', (t) => {
  // Bytes 0..255 over and over: a newline every 256 bytes, and invalid UTF-8 in every line.
  const bytes = Buffer.alloc(1 << 20)
  for (let i = 0; i < bytes.length; i++) bytes[i] = i & 0xff
  const binary = file('binary.bin', bytes)
  const r = cli('replay', binary, '--backend', 'virtual')
  assertOneLine(t, r, 'binary')
  t.true(r.err.includes(`${binary}:line 1`), r.err)
  const lenient = cli('replay', binary, '--backend', 'virtual', '--lenient', '--json')
  t.is(lenient.code, 0, lenient.err)
  const json = JSON.parse(lenient.out) as { linesSkipped: string[]; linesSkippedCount: number; runs: { ops: number }[] }
  t.is(json.linesSkippedCount, 4097)
  t.true(json.linesSkipped.length <= 1000)
  t.is(json.runs[0].ops, 0)
})

test('an endless stream of lines stops at the line limit, which the message states (item 16)', (t) => {
  // `yes` writes the same alloc forever; --lenient skips every repeat. The limit is lowered for
  // the test through CUDA_ARENA_MAX_TRACE_LINES.
  const line = ALLOC(1, 256)
  const r = spawn('sh', ['-c', `yes '${line}' | prlimit --as=2000000000 "${process.execPath}" "${bin}" replay /dev/stdin --backend virtual --lenient`], {
    env: { ...process.env, CUDA_ARENA_MAX_TRACE_LINES: '100000' },
  })
  assertOneLine(t, r, 'endless')
  t.regex(r.err, /line 100001: .*100000 lines/)
})

test('a trace file that is a directory is one line with exit 1 (item 16)', (t) => {
  const r = cli('replay', dir, '--backend', 'virtual')
  assertOneLine(t, r, 'directory')
  t.true(r.err.includes(dir))
})

test('gen-trace --ops N writes exactly N ops, for every kind (item 16)', (t) => {
  for (const kind of ['inference', 'mixed', 'small', 'growing']) {
    for (const n of [0, 1, 2, 3, 17, 64, 100, 1001]) {
      const r = cli('gen-trace', '--kind', kind, '--ops', String(n))
      t.is(r.code, 0, `${kind} ${n}: ${r.err}`)
      t.is(r.out === '' ? 0 : r.out.trimEnd().split('\n').length, n, `${kind} --ops ${n}`)
    }
  }
})

test('a generated trace that ends with allocations live replays and says so (item 16)', (t) => {
  const path = join(dir, 'one.jsonl')
  t.is(cli('gen-trace', '--kind', 'inference', '--ops', '1', '-o', path).code, 0)
  const r = cli('replay', path, '--backend', 'virtual')
  t.is(r.code, 0, r.err)
  t.regex(r.out, /1 ops on virtual, 1 allocation live at the end/)
  const json = JSON.parse(cli('replay', path, '--backend', 'virtual', '--json').out) as { runs: { liveAtEnd: number; stats: { inUse: number } }[] }
  t.is(json.runs[0].liveAtEnd, 1)
  t.is(json.runs[0].stats.inUse, 0, 'freed after the replay')
})

test('gen-trace --ops takes decimal digits up to the maximum (item 16)', (t) => {
  for (const ops of ['-5', '1e3', '1.5', ' 7', '0x10', '100000001', '9'.repeat(1000), '']) {
    const r = cli('gen-trace', '--kind', 'mixed', '--ops', ops)
    assertOneLine(t, r, `--ops ${ops.slice(0, 20)}`)
  }
  t.regex(cli('gen-trace', '--kind', 'mixed', '--ops', '100000001').err, /100000000/)
  for (const seed of ['-1', '1.5', '9007199254740992']) assertOneLine(t, cli('gen-trace', '--kind', 'mixed', '--seed', seed), `--seed ${seed}`)
})

test('gen-trace to an unwritable file is one line with exit 1 (item 16)', (t) => {
  for (const out of ['/proc/nope/x.jsonl', dir]) assertOneLine(t, cli('gen-trace', '--kind', 'small', '--ops', '10', '-o', out), out)
})

test('gen-trace into a pipe closed early exits quietly (item 16)', (t) => {
  const r = spawn('sh', ['-c', `"${process.execPath}" "${bin}" gen-trace --kind mixed --ops 1000000 | head -c 100 >/dev/null`])
  t.notRegex(r.err, /\n\s+at /, r.err)
  t.is(r.err, '')
})

test('a long --config value is quoted in a bounded message (item 16)', (t) => {
  const r = cli('replay', '--sample', 'small', '--backend', 'virtual', '--config', `arena.max_mem=${'9'.repeat(100_000)}`)
  assertOneLine(t, r, 'long config')
  const u = cli('replay', '--sample', 'small', '--backend', 'virtual', `--${'x'.repeat(100_000)}`)
  assertOneLine(t, u, 'long option')
})

test('gen-trace writes the same trace to a file and to standard output', (t) => {
  const a = join(dir, 'a.jsonl')
  t.is(cli('gen-trace', '--kind', 'growing', '--ops', '5000', '-o', a).code, 0)
  const b = cli('gen-trace', '--kind', 'growing', '--ops', '5000')
  t.is(b.out, readFileSync(a, 'utf8'))
})
