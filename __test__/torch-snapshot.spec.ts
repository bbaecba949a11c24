/**
 * Issue 13, item 3: `cuda-arena replay` reads PyTorch memory snapshots, the pickles of
 * `torch.cuda.memory._dump_snapshot()`. The fixture is a small snapshot written by CPython's
 * pickle as torch writes one (`python3 scripts/gpu/make_snapshot.py --synthetic
 * __test__/fixtures/torch-snapshot.pickle`); crates/arena-core/tests/torch_snapshot.rs lists the
 * trace it reads as, and checks the reader on snapshots it writes itself.
 */
import test from 'ava'
import { spawnSync, type SpawnSyncOptions } from 'node:child_process'
import { closeSync, existsSync, ftruncateSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync, writeSync } from 'node:fs'
import { join } from 'node:path'
import { tmpdir } from 'node:os'
import { AllocatorFactory, replayTrace, type TraceOp } from '../ts/index'

const root = join(__dirname, '..')
const bin = join(root, 'dist', 'cli.js')
const fixture = join(__dirname, 'fixtures', 'torch-snapshot.pickle')
const dir = mkdtempSync(join(tmpdir(), 'cuda-arena-torch-'))

test.before(() => {
  if (!existsSync(bin)) throw new Error(`${bin} is missing: run npm run build first`)
})
test.after.always(() => rmSync(dir, { recursive: true, force: true }))

interface Run {
  code: number | null
  out: string
  err: string
}

function spawn(cmd: string, args: string[], options: SpawnSyncOptions = {}): Run {
  const r = spawnSync(cmd, args, { encoding: 'utf8', maxBuffer: 64 << 20, ...options })
  return { code: r.status, out: String(r.stdout), err: String(r.stderr) }
}

/** `cuda-arena ...args`, the built command, as a user runs it. */
function cli(...args: string[]): Run {
  return spawn(process.execPath, [bin, ...args])
}

/** A one-line error on stderr with exit code 1, naming `file`. */
function assertOneLineError(t: import('ava').ExecutionContext, r: Run, file: string): void {
  t.is(r.code, 1, `exit code (stderr: ${r.err.slice(0, 300)})`)
  const lines = r.err.trimEnd().split('\n')
  t.is(lines.length, 1, r.err.slice(0, 600))
  t.true(lines[0].startsWith('cuda-arena replay: '), lines[0])
  t.true(lines[0].includes(file), lines[0])
  t.true(r.err.length < 1000, `${r.err.length} characters`)
}

function file(name: string, content: string | Buffer): string {
  const path = join(dir, name)
  writeFileSync(path, content)
  return path
}

interface SnapshotJson {
  snapshot: {
    device: number
    deviceEvents: number[]
    allocs: number
    frees: number
    unknownFrees: number
    liveAddressAllocs: number
    zeroSizeAllocs: number
    freedAtEnd: number
    freeCompleted: number
    segmentEvents: number
    otherEvents: number
    streams: number[]
  } | null
  runs: { label: string; ops: number; peakRequested: number; peakHeld: number; liveAtEnd: number; stats: { inUse: number } }[]
}

/** The trace the fixture's device 1 reads as (crates/arena-core/tests/torch_snapshot.rs). */
const FIXTURE_TRACE: TraceOp[] = [
  { op: 'alloc', id: 1, size: 1000, stream: 1 },
  { op: 'alloc', id: 2, size: 3000, stream: 2 },
  { op: 'alloc', id: 3, size: 40000, stream: 1 },
  { op: 'free', id: 1 },
  { op: 'alloc', id: 4, size: 800, stream: 1 },
  { op: 'free', id: 2 },
  { op: 'free', id: 3 },
  { op: 'free', id: 4 },
]

test('replay reads a PyTorch snapshot: allocs and requested frees of the device with the most events, the rest counted', (t) => {
  const r = cli('replay', fixture, '--backend', 'virtual', '--json', '--compare', 'arena.extend_strategy=1')
  t.is(r.code, 0, r.err)
  const json = JSON.parse(r.out) as SnapshotJson
  t.deepEqual(json.snapshot, {
    device: 1,
    deviceEvents: [3, 13],
    allocs: 4,
    frees: 2,
    unknownFrees: 1,
    liveAddressAllocs: 0,
    zeroSizeAllocs: 0,
    freedAtEnd: 2,
    freeCompleted: 2,
    segmentEvents: 2,
    otherEvents: 2,
    streams: [0, 0x55d0c0ffee00],
  })
  t.deepEqual(
    json.runs.map((run) => run.label),
    ['base', 'arena.extend_strategy=1'],
  )
  // Each config replays exactly the trace above: the library's replay of it measures the same.
  for (const [i, config] of [{}, { 'arena.extend_strategy': '1' }].entries() as Iterable<[number, Record<string, string>]>) {
    const f = new AllocatorFactory({ name: `torch-snapshot-${process.pid}-${i}`, backend: 'virtual' })
    const own = replayTrace(f.createAllocator({ name: 'Cuda' }, config), FIXTURE_TRACE, { trackPeaks: true, streams: 2 })
    const run = json.runs[i]
    t.is(run.ops, 8)
    t.is(run.peakRequested, own.peakRequested)
    t.is(run.peakHeld, own.peakHeld)
    t.is(run.liveAtEnd, 0, 'blocks live at the end of the history are freed by the trace itself')
    t.is(run.stats.inUse, 0)
  }
})

test('--device picks another device of the snapshot', (t) => {
  const r = cli('replay', fixture, '--backend', 'virtual', '--json', '--device', '0')
  t.is(r.code, 0, r.err)
  const json = JSON.parse(r.out) as SnapshotJson
  t.is(json.snapshot?.device, 0)
  t.is(json.snapshot?.allocs, 1)
  t.is(json.runs[0].ops, 2)
  t.is(json.runs[0].peakRequested, 512)
})

test('the table says what the snapshot reader replayed and skipped', (t) => {
  const r = cli('replay', fixture, '--backend', 'virtual')
  t.is(r.code, 0, r.err)
  const lines = r.out.split('\n')
  t.regex(lines[0], /^trace .*torch-snapshot\.pickle: 8 ops on virtual$/)
  t.regex(lines[1], /^PyTorch snapshot, device 1 \(of 2, 13 events\): 4 allocs and 2 frees replayed on 2 streams, 2 blocks live at the end freed at the end; not replayed: 1 free of blocks allocated before the history starts/)
})

test('a trace file reports no snapshot', (t) => {
  const trace = file('t.jsonl', '{"op":"alloc","id":1,"size":64}\n{"op":"free","id":1}\n')
  const r = cli('replay', trace, '--backend', 'virtual', '--json')
  t.is(r.code, 0, r.err)
  t.is((JSON.parse(r.out) as SnapshotJson).snapshot, null)
})

test('a snapshot reads from a pipe too', (t) => {
  const r = spawn('sh', ['-c', `cat "${fixture}" | "${process.execPath}" "${bin}" replay /dev/stdin --backend virtual --json`])
  t.is(r.code, 0, r.err)
  t.is((JSON.parse(r.out) as SnapshotJson).snapshot?.allocs, 4)
})

// ---- bad files: one line, exit code 1, the file named ------------------------------------------

test('a truncated snapshot is not a snapshot, and says it is cut short', (t) => {
  const bytes = readFileSync(fixture)
  for (const n of [1, 2, 100, bytes.length - 1]) {
    const cut = file(`cut-${n}.pickle`, bytes.subarray(0, n))
    const r = cli('replay', cut, '--backend', 'virtual')
    assertOneLineError(t, r, cut)
    t.regex(r.err, /not a PyTorch memory snapshot: byte \d+: .*cut short/, `${n} bytes`)
  }
})

test('a pickle of a list is not a snapshot', (t) => {
  // CPython's pickle.dumps([1, 2], protocol=2).
  const list = file('list.pickle', Buffer.from('80025d7100284b014b02652e', 'hex'))
  const r = cli('replay', list, '--backend', 'virtual')
  assertOneLineError(t, r, list)
  t.regex(r.err, /not a PyTorch memory snapshot: the pickle holds a list/)
})

test('a snapshot saved as JSON is read as JSON lines and refused at line 1', (t) => {
  const json = file('snapshot.json', JSON.stringify({ segments: [], device_traces: [[{ action: 'alloc', addr: 1, size: 1, stream: 0 }]] }))
  const r = cli('replay', json, '--backend', 'virtual')
  assertOneLineError(t, r, json)
  t.regex(r.err, /snapshot\.json:line 1: /)
})

test('an empty file is neither a trace nor a snapshot', (t) => {
  const empty = file('empty.pickle', '')
  const r = cli('replay', empty, '--backend', 'virtual')
  assertOneLineError(t, r, empty)
  t.regex(r.err, /is empty: neither a trace \(JSON lines\) nor a PyTorch memory snapshot/)
})

test('/dev/zero stops at its first line in bounded memory', (t) => {
  const r = spawn('prlimit', ['--as=2000000000', process.execPath, bin, 'replay', '/dev/zero', '--backend', 'virtual'])
  assertOneLineError(t, r, '/dev/zero')
  t.regex(r.err, /line 1: longer than 4096 bytes/)
})

test('a directory is refused', (t) => {
  const r = cli('replay', dir, '--backend', 'virtual')
  assertOneLineError(t, r, dir)
  t.regex(r.err, /it is a directory/)
})

test('a snapshot file over the maximum size is refused before it is read', (t) => {
  // A sparse file: a pickle's first byte, then a hole up to one byte past 1 GiB.
  const big = join(dir, 'big.pickle')
  const fd = openSync(big, 'w')
  writeSync(fd, Buffer.from([0x80, 0x04]))
  ftruncateSync(fd, 2 ** 30 + 1)
  closeSync(fd)
  const r = spawn('prlimit', ['--as=2000000000', process.execPath, bin, 'replay', big, '--backend', 'virtual'])
  assertOneLineError(t, r, big)
  t.regex(r.err, /1073741825 bytes, more than the 1073741824 bytes a PyTorch memory snapshot is read up to/)
})

test('--device is refused when the snapshot lacks the device, for a trace file, and with --sample', (t) => {
  const missing = cli('replay', fixture, '--backend', 'virtual', '--device', '2')
  assertOneLineError(t, missing, fixture)
  t.regex(missing.err, /--device 2: the snapshot has 2 devices \(0 to 1\)/)
  const trace = file('d.jsonl', '{"op":"alloc","id":1,"size":64}\n')
  const onTrace = cli('replay', trace, '--backend', 'virtual', '--device', '0')
  assertOneLineError(t, onTrace, trace)
  t.regex(onTrace.err, /--device 0 is for PyTorch memory snapshots/)
  const onSample = cli('replay', '--sample', 'small', '--backend', 'virtual', '--device', '0')
  t.is(onSample.code, 1)
  t.regex(onSample.err, /--device is for a PyTorch memory snapshot, not --sample/)
  const bad = cli('replay', fixture, '--backend', 'virtual', '--device', '-1')
  t.is(bad.code, 1)
  t.regex(bad.err, /--device must be a whole number/)
})
