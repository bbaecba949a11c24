import test from 'ava'
import { Worker } from 'node:worker_threads'
import { join } from 'node:path'
import { AllocatorFactory } from '../ts/index'

test('four workers share one factory by name and leave consistent stats', async (t) => {
  const name = `workers-${process.pid}`
  const f = new AllocatorFactory({ name, backend: 'virtual' })
  const a = f.createAllocator({ name: 'Cuda' })
  const results = await Promise.all(
    [1, 2, 3, 4].map(
      (seed) =>
        new Promise<{ allocs: number }>((resolve, reject) => {
          // The worker runs TypeScript sources: register tsx in it, then load the fixture.
          const boot = `require('tsx/cjs'); require(${JSON.stringify(join(__dirname, 'fixtures', 'worker.ts'))})`
          const w = new Worker(boot, { eval: true, workerData: { name, ops: 20_000, seed } })
          w.once('message', resolve)
          w.once('error', reject)
        }),
    ),
  )
  const allocs = results.reduce((s, r) => s + r.allocs, 0)
  const s = a.getStats()
  t.is(s.numAllocs, BigInt(allocs), 'every worker allocated from the one shared arena')
  t.is(s.inUse, 0n)
  t.is(s.requestedInUse, 0n)
  t.is(f.deviceStats(0).rawBytesOutstanding, s.totalAllocated)
  f.releaseAllocator(a)
  t.is(f.deviceStats(0).rawBytesOutstanding, 0n)
})
