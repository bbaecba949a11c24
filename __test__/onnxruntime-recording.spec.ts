// Issue 12, item 5: an onnxruntime-node session's traffic through cuda-arena's Cpu arena,
// recorded and replayed with `cuda-arena replay`: the replay's peak requested is the live
// session's. ONNX Runtime's environment is process-wide, so the test is serial.
import { spawnSync } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { tmpdir } from 'node:os'
import { factory } from './helpers'
import { runOnFactory } from './ort/session'
import { ortSerial } from './ort/test'

const bin = join(__dirname, '..', 'dist', 'cli.js')

ortSerial('a recorded onnxruntime-node session replays with cuda-arena replay to the live session’s peak requested and counts', async (t) => {
  if (!existsSync(bin)) throw new Error(`${bin} is missing: run npm run build first`)
  const file = join(mkdtempSync(join(tmpdir(), 'cuda-arena-ort-recording-')), 'session.jsonl')
  const f = factory('host')
  // A user of the same shared Cpu arena, so the recording outlives the registration's release.
  const mine = f.createAllocator({ name: 'Cpu' })
  const run = await runOnFactory(f, { runs: 3, onRegistered: (registration) => registration.allocator.startRecording(file) })
  const summary = mine.stopRecording()
  f.releaseAllocator(mine)
  t.is(summary.error, undefined)
  t.is(summary.failedAllocs, 0n)
  t.is(summary.untrackedFrees, 0n, 'the recording saw every allocation it saw freed')

  const r = spawnSync(process.execPath, [bin, 'replay', file, '--json', '--backend', 'virtual'], { encoding: 'utf8' })
  t.is(r.status, 0, r.stderr)
  const replay = (JSON.parse(r.stdout) as { runs: { ops: number; peakRequested: number; failedAllocs: number; liveAtEnd: number; stats: { numAllocs: number; numReserves: number } }[] }).runs[0]
  const live = run.afterRuns[run.afterRuns.length - 1]

  // The peak of requested bytes: the replay's is the one the live session had, as the
  // recorder counted it and as the live stats say: the test model's tensors are whole 256-byte
  // units that the arena hands out exactly (InUse is RequestedInUse), so the live MaxInUse is
  // the peak of requested bytes.
  t.is(replay.peakRequested, Number(summary.peakRequested))
  for (const s of [run.created, ...run.afterRuns]) t.is(s.inUse, s.requestedInUse)
  t.is(replay.peakRequested, Number(live.maxInUse))
  // What the live stats said: every reserve (at creation) and allocation (per run) is replayed.
  t.is(replay.stats.numReserves, Number(live.numReserves))
  t.is(replay.stats.numAllocs, Number(live.numAllocs))
  t.is(replay.ops, Number(summary.ops))
  t.is(replay.failedAllocs, 0)
  t.is(replay.liveAtEnd, Number(summary.liveAtStop))
  t.true(BigInt(replay.peakRequested) > run.created.requestedInUse, 'intermediates on top of the weights')
  t.true(readFileSync(file, 'utf8').includes('"op":"reserve"'), 'the weights are reserves')
})
