// `npm run bench` (after `npm run build`): what running an onnxruntime-node session through
// cuda-arena costs. Two sessions of the test model (__test__/ort/model.ts) in one process, one on
// ONNX Runtime's own CPU allocator (its default arena) and one on cuda-arena's `Cpu` arena
// (useWithOnnxRuntime), run in turn (A B, then B A, …) so drift hits both alike; the median of
// each session's `session.run` times, per batch size (the smaller first, so the arena's peak
// in use is each batch's own). Also what the arena saw per run.
import { AllocatorFactory, useWithOnnxRuntime, type AllocatorStats } from '../ts/index'
import { INPUT, TEST_MODEL, modelInput } from '../__test__/ort/model'
import { ort, ortAvailable } from '../__test__/ort/runtime'
import { createSession } from '../__test__/ort/session'

const WARMUP = 20
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]
const MiB = (n: bigint): string => (Number(n) / 2 ** 20).toFixed(2)
const KiB = (n: bigint): string => (Number(n) / 2 ** 10).toFixed(0)

async function main(): Promise<void> {
  if (!ortAvailable) {
    console.log('ort-bench: onnxruntime-node is not installed; skipped')
    return
  }
  const { Tensor } = ort()
  const factory = new AllocatorFactory({ name: `ort-bench-${process.pid}`, backend: 'host' })
  const registration = useWithOnnxRuntime(factory, { name: 'Cpu' })
  // One intra-op thread each: a run's time then depends on one core, not on how busy the others are.
  const options = { intraOpNumThreads: 1 }
  const own = await createSession(undefined, options)
  const arena = await createSession(registration, options)
  const created = registration.allocator.getStats()

  const rows: string[][] = []
  const perRun: string[] = []
  for (const [batch, pairs] of [[1, 3000], [64, 300], [512, 100]] as const) {
    const feeds = { [INPUT]: new Tensor('float32', modelInput(TEST_MODEL, batch), [batch, TEST_MODEL.width]) }
    const time = async (s: typeof own): Promise<number> => {
      const start = process.hrtime.bigint()
      await s.run(feeds)
      return Number(process.hrtime.bigint() - start) / 1e3
    }
    for (let i = 0; i < WARMUP; i++) {
      await time(own)
      await time(arena)
    }
    const before: AllocatorStats = registration.allocator.getStats()
    const a: number[] = []
    const b: number[] = []
    for (let i = 0; i < pairs; i++) {
      if (i % 2 === 0) {
        a.push(await time(own))
        b.push(await time(arena))
      } else {
        b.push(await time(arena))
        a.push(await time(own))
      }
    }
    const after = registration.allocator.getStats()
    // The ratio is the median of each pair's ratio: the two runs of a pair ran back to back,
    // under the same load, so drift over the whole loop cancels.
    const ratio = median(b.map((x, i) => x / a[i]))
    rows.push([`${batch} × ${TEST_MODEL.width}`, String(pairs), median(a).toFixed(1), median(b).toFixed(1), ratio.toFixed(3)])
    perRun.push(
      `batch ${batch}: ${Number(after.numAllocs - before.numAllocs) / pairs} allocations per run, ` +
        `peak in use ${KiB(after.maxInUse - created.reservedBytes)} KiB beyond the reserves, InUse after the runs ${MiB(after.inUse)} MiB`,
    )
  }
  await Promise.all([own.release(), arena.release()])
  registration.unregister()

  console.log(`\nonnxruntime-node ${registration.ortVersion}, OrtApi ${registration.apiVersion}, one intra-op thread: the test model (${TEST_MODEL.layers} × MatMul ${TEST_MODEL.width}² + Add + Relu, ${MiB(BigInt(TEST_MODEL.layers * TEST_MODEL.width * TEST_MODEL.width * 4))} MiB of weights)`)
  console.log(`reserved at session creation: ${created.numReserves} reserves, ${MiB(created.reservedBytes)} MiB`)
  for (const line of perRun) console.log(line)
  console.log('| batch | runs each | ONNX Runtime’s allocator, median µs | cuda-arena, median µs | cuda-arena / ORT, median of pairs |')
  console.log('|---|---:|---:|---:|---:|')
  for (const r of rows) console.log(`| ${r.join(' | ')} |`)
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
