import test from 'ava'
import { spawnSync } from 'node:child_process'
import { closeSync, constants, existsSync, mkdtempSync, openSync, readFileSync, readSync } from 'node:fs'
import { join } from 'node:path'
import { tmpdir } from 'node:os'
import type { OrtAllocator } from '../ts/index'
import { factory, throwsCode } from './helpers'

// Trace recording (issue 12, item 4): an allocator's traffic in the trace format, replayed by
// the `cuda-arena` command as a user would run it.

const root = join(__dirname, '..')
/** The built command, what `npx cuda-arena` runs (`npm run build` makes it). */
const bin = join(root, 'dist', 'cli.js')
const dir = mkdtempSync(join(tmpdir(), 'cuda-arena-recording-'))
let files = 0
function tracePath(): string {
  files += 1
  return join(dir, `trace-${files}.jsonl`)
}

test.before(() => {
  if (!existsSync(bin)) throw new Error(`${bin} is missing: run npm run build first`)
})

/** What `cuda-arena replay FILE --json --backend virtual` printed for the one config. */
interface ReplayRun {
  ops: number
  peakRequested: number
  failedAllocs: number
  liveAtEnd: number
  stats: { numAllocs: number; numReserves: number }
}

function replayFile(file: string): ReplayRun {
  const r = spawnSync(process.execPath, [bin, 'replay', file, '--json', '--backend', 'virtual'], { encoding: 'utf8' })
  if (r.status !== 0) throw new Error(`cuda-arena replay failed (${r.status}): ${r.stderr}`)
  const out = JSON.parse(r.stdout) as { runs: ReplayRun[] }
  return out.runs[0]
}

/**
 * A session: allocations and reserves of varied sizes, freed in another order; returns the
 * largest sum of requested bytes live at once, counted here, and how many were reserves.
 */
function session(a: OrtAllocator, alloc: (size: number) => bigint | null = (size) => a.alloc(size)): { peak: number; reserves: number } {
  const live: [bigint, number][] = []
  let requested = 0
  let peak = 0
  let reserves = 0
  for (let i = 0; i < 500; i++) {
    const size = 1 + ((i * 7919) % 300_000)
    const p = i % 6 === 0 ? a.reserve(size) : alloc(size)
    if (i % 6 === 0) reserves += 1
    if (p === null) throw new Error('allocation failed')
    live.push([p, size])
    requested += size
    peak = Math.max(peak, requested)
    if (i % 3 === 2) {
      const [q, s] = live.splice((i * 31) % live.length, 1)[0]
      a.free(q)
      requested -= s
    }
  }
  for (const [p] of live) a.free(p)
  return { peak, reserves }
}

test('a recording replays with cuda-arena replay to the peak requested of the live run', (t) => {
  const f = factory('host')
  const a = f.createAllocator({ name: 'Cpu' })
  const file = tracePath()
  a.startRecording(file)
  const { peak, reserves } = session(a)
  const summary = a.stopRecording()
  t.is(summary.path, file)
  t.is(summary.error, undefined)
  t.is(summary.peakRequested, BigInt(peak))
  t.is(summary.bytes, BigInt(readFileSync(file).length))
  const run = replayFile(file)
  t.is(run.peakRequested, peak)
  t.is(run.ops, Number(summary.ops))
  t.is(run.failedAllocs, 0)
  t.is(run.liveAtEnd, 0)
  // Every call of the live run is in the trace: the replay's counters are the live ones.
  const live = a.getStats()
  t.is(run.stats.numAllocs, Number(live.numAllocs))
  t.is(run.stats.numReserves, reserves)
  t.is(run.stats.numReserves, Number(live.numReserves))
  f.releaseAllocator(a)
})

test('allocations on streams are recorded with stream numbers and replay on streams of their own', (t) => {
  const f = factory('virtual')
  const a = f.createAllocator({ name: 'Cuda' })
  const [s, u] = [f.createStream(), f.createStream()]
  const file = tracePath()
  a.startRecording(file)
  let i = 0
  const { peak } = session(a, (size) => a.allocOnStream!(size, ++i % 2 === 0 ? s : u))
  const summary = a.stopRecording()
  const streams = new Set(
    readFileSync(file, 'utf8')
      .split('\n')
      .filter((l) => l.includes('"alloc"'))
      .map((l) => (JSON.parse(l) as { stream: number }).stream),
  )
  t.deepEqual([...streams].sort(), [1, 2])
  t.is(replayFile(file).peakRequested, peak)
  t.is(summary.peakRequested, BigInt(peak))
  s.release()
  u.release()
  f.releaseAllocator(a)
})

test('every user of a shared allocator is recorded, whichever user started the recording', (t) => {
  const f = factory('host')
  const [a, b] = [f.createAllocator({ name: 'Cpu' }), f.createAllocator({ name: 'Cpu' })]
  a.startRecording(tracePath())
  b.free(b.alloc(1000))
  throwsCode(t, () => b.startRecording(tracePath()), 'ERR_ARENA_INVALID_ARGUMENT', 'the recording is the shared allocator’s')
  t.is(b.stopRecording().ops, 2n)
  f.releaseAllocator(a)
  f.releaseAllocator(b)
})

test('a second startRecording is ERR_ARENA_INVALID_ARGUMENT and the first recording goes on', (t) => {
  const f = factory('host')
  const a = f.createAllocator({ name: 'Cpu' })
  const file = tracePath()
  a.startRecording(file)
  const p = a.alloc(100)
  throwsCode(t, () => a.startRecording(file), 'ERR_ARENA_INVALID_ARGUMENT')
  a.free(p)
  t.is(a.stopRecording().ops, 2n)
  t.is(readFileSync(file, 'utf8').split('\n').filter(Boolean).length, 2)
  f.releaseAllocator(a)
})

test('a path that cannot be created is ERR_ARENA_INVALID_ARGUMENT naming it, and nothing records', (t) => {
  const f = factory('host')
  const a = f.createAllocator({ name: 'Cpu' })
  const bad = join(dir, 'no-such-dir', 'trace.jsonl')
  const err = t.throws(() => a.startRecording(bad)) as Error & { code?: string }
  t.is(err.code, 'ERR_ARENA_INVALID_ARGUMENT')
  t.true(err.message.includes(bad))
  throwsCode(t, () => a.startRecording(dir), 'ERR_ARENA_INVALID_ARGUMENT', 'a directory')
  throwsCode(t, () => a.stopRecording(), 'ERR_ARENA_INVALID_ARGUMENT', 'nothing is recording')
  f.releaseAllocator(a)
})

/** A FIFO made with mkfifo(1), or null where there is none. */
function fifo(): string | null {
  const path = join(dir, `fifo-${(files += 1)}`)
  return spawnSync('mkfifo', [path]).status === 0 ? path : null
}

test('a FIFO no process reads is ERR_ARENA_INVALID_ARGUMENT at once, and nothing records', (t) => {
  const path = fifo()
  if (path === null) return t.pass('no mkfifo here')
  const f = factory('host')
  const a = f.createAllocator({ name: 'Cpu' })
  // Before, open(2) waited for a reader here and froze the event loop for good.
  throwsCode(t, () => a.startRecording(path), 'ERR_ARENA_INVALID_ARGUMENT', 'no process has open for reading')
  throwsCode(t, () => a.stopRecording(), 'ERR_ARENA_INVALID_ARGUMENT', 'nothing is recording')
  f.releaseAllocator(a)
})

test('a FIFO a process reads takes the recording', (t) => {
  const path = fifo()
  if (path === null) return t.pass('no mkfifo here')
  const reader = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK)
  const f = factory('host')
  const a = f.createAllocator({ name: 'Cpu' })
  a.startRecording(path)
  a.free(a.alloc(1000))
  t.is(a.stopRecording().ops, 2n)
  const buf = Buffer.alloc(4096)
  const n = readSync(reader, buf)
  closeSync(reader)
  t.deepEqual(buf.subarray(0, n).toString('utf8').split('\n').filter(Boolean), [
    '{"op":"alloc","id":1,"size":1000,"stream":0}',
    '{"op":"free","id":1}',
  ])
  f.releaseAllocator(a)
})

test('a file another process records to is ERR_ARENA_INVALID_ARGUMENT there, and this recording goes on whole', (t) => {
  const f = factory('host')
  const a = f.createAllocator({ name: 'Cpu' })
  const file = tracePath()
  a.startRecording(file)
  a.alloc(1000)
  // A second process (a cluster's worker given the same path): before, it truncated the file
  // and both wrote into it.
  const child = `
    const { AllocatorFactory } = require(${JSON.stringify(join(root, 'dist', 'index.js'))})
    const a = new AllocatorFactory({ name: 'other', backend: 'host' }).createAllocator({ name: 'Cpu' })
    try { a.startRecording(${JSON.stringify(file)}); a.alloc(5); a.stopRecording(); console.log('recorded') }
    catch (e) { console.log(e.code + ' ' + e.message) }`
  const r = spawnSync(process.execPath, ['-e', child], { encoding: 'utf8' })
  t.is(r.status, 0, r.stderr)
  t.regex(r.stdout, /^ERR_ARENA_INVALID_ARGUMENT .*another process/)
  t.is(a.stopRecording().ops, 1n)
  t.deepEqual(readFileSync(file, 'utf8').split('\n').filter(Boolean), ['{"op":"alloc","id":1,"size":1000,"stream":0}'])
  // Stopped, the file is free for the other process.
  t.is(spawnSync(process.execPath, ['-e', child], { encoding: 'utf8' }).stdout.trim(), 'recorded')
  f.releaseAllocator(a)
})

test('a path that is not a string is ERR_ARENA_INVALID_ARGUMENT', (t) => {
  const f = factory('host')
  const a = f.createAllocator({ name: 'Cpu' })
  for (const bad of [undefined, null, 5, {}, Symbol('x')]) {
    throwsCode(t, () => a.startRecording(bad as unknown as string), 'ERR_ARENA_INVALID_ARGUMENT', String(bad))
  }
  f.releaseAllocator(a)
})

test('stopRecording with no recording on is ERR_ARENA_INVALID_ARGUMENT', (t) => {
  const f = factory('host')
  const a = f.createAllocator({ name: 'Cpu' })
  throwsCode(t, () => a.stopRecording(), 'ERR_ARENA_INVALID_ARGUMENT')
  f.releaseAllocator(a)
})

test('a released allocator cannot start or stop a recording: ERR_ARENA_RELEASED', (t) => {
  const f = factory('host')
  const a = f.createAllocator({ name: 'Cpu' })
  const keep = f.createAllocator({ name: 'Cpu' })
  a.startRecording(tracePath())
  f.releaseAllocator(a)
  throwsCode(t, () => a.startRecording(tracePath()), 'ERR_ARENA_RELEASED')
  throwsCode(t, () => a.stopRecording(), 'ERR_ARENA_RELEASED')
  // The recording is the shared allocator's: another user still stops it.
  t.is(keep.stopRecording().ops, 0n)
  f.releaseAllocator(keep)
})

test('the last release writes everything recorded to the file', (t) => {
  const f = factory('host')
  const a = f.createAllocator({ name: 'Cpu' })
  const file = tracePath()
  a.startRecording(file)
  a.alloc(1000)
  f.releaseAllocator(a)
  t.deepEqual(readFileSync(file, 'utf8').split('\n').filter(Boolean), ['{"op":"alloc","id":1,"size":1000,"stream":0}'])
})

test('a full disk stops the recording with the reason, and allocations go on', (t) => {
  if (process.platform !== 'linux') return t.pass('/dev/full is Linux')
  const f = factory('host')
  const a = f.createAllocator({ name: 'Cpu' })
  a.startRecording('/dev/full')
  for (let i = 0; i < 50_000; i++) a.free(a.alloc(4096))
  const summary = a.stopRecording()
  t.is(summary.ops, 0n)
  t.is(typeof summary.error, 'string')
  t.is(a.getStats().inUse, 0n)
  f.releaseAllocator(a)
})
