// Issue 11: the JS API fuzzer in CI: bounded, with fixed seeds, so a failure here replays
// exactly (`node --import tsx scripts/fuzz-api.ts --seed S --ops N --backend B`). Every public
// method, invariants checked after every call (__test__/fuzz/; docs/fuzzing-js.md for long runs).
import test from 'ava'
import { copies } from './fuzz/copies'
import type { Index } from './fuzz/model'
import { runGcChild, runWithWorkers } from './fuzz/modes'
import { report, run, type RunResult } from './fuzz/runner'

const OPS = 2500
const SEEDS = [1, 2, 3, 4, 5, 6, 7, 8]
/** Two copies of the package: every run mixes objects of both. */
const both = copies(2)

function explain(r: RunResult, how: string): string {
  return r.failure ? report(r, how) : ''
}

for (const backend of ['host', 'virtual'] as const) {
  for (const seed of SEEDS) {
    test(`every promise holds over ${OPS} random calls with two copies of the package (seed ${seed}, ${backend})`, async (t) => {
      const r = await run({ seed, ops: OPS, backend, copies: both })
      t.is(r.failure, null, explain(r, `node --import tsx scripts/fuzz-api.ts --seed ${seed} --ops ${OPS} --backend ${backend} --copies 2`))
      // A run that skipped most of its operations would prove little.
      t.true(r.calls > OPS * 0.9, `${r.calls} calls`)
    })
  }
}

for (const [seed, backend] of [
  [1, 'host'],
  [2, 'virtual'],
] as const) {
  test(`references dropped and collected mid-run leave every promise holding (seed ${seed}, ${backend}, child process with --expose-gc)`, async (t) => {
    const r = await runGcChild({ seed, ops: OPS, backend })
    t.is(r.failure, null, r.failure ? report(r as RunResult, `node --import tsx scripts/fuzz-api.ts --mode gc --seed ${seed} --ops ${OPS} --backend ${backend}`) : '')
    t.true((r.outcomes['gc.collect']?.ok ?? 0) > 0, 'the run collected garbage')
    t.true(r.calls > OPS * 0.9, `${r.calls} calls`)
  })

  test(`workers sharing a factory, terminated mid-run, give every byte back once this thread releases its handles (seed ${seed}, ${backend})`, async (t) => {
    const r = await runWithWorkers({ seed, ops: 1500, backend, workers: 2 })
    t.is(r.failure, null, `${r.failure ?? ''}\n${explain(r.main, `node --import tsx scripts/fuzz-api.ts --mode workers --seed ${seed} --ops 1500 --backend ${backend}`)}`)
    t.true(r.calls > 1500, `${r.calls} calls`)
  })
}

/** The package with `AllocatorFactory` changed by `patch` (a planted defect). */
function planted(idx: Index, patch: (f: InstanceType<Index['AllocatorFactory']>) => void): Index {
  class Broken extends idx.AllocatorFactory {
    constructor(...args: ConstructorParameters<Index['AllocatorFactory']>) {
      super(...args)
      patch(this)
    }
  }
  return { ...idx, AllocatorFactory: Broken }
}

test('the fuzzer reports a free that wraps addresses modulo 2^64 (a planted defect)', async (t) => {
  const idx = planted(both[0], (f) => {
    const create = f.createAllocator.bind(f)
    f.createAllocator = (...args) => {
      const a = create(...args)
      const free = a.free.bind(a)
      a.free = (p) => free(typeof p === 'bigint' ? BigInt.asUintN(64, p) : p)
      return a
    }
  })
  const r = await run({ seed: 2, ops: OPS, backend: 'host', copies: [idx] })
  t.is(r.failure?.check, 'expected-error', r.failure?.message ?? 'not found')
})

test('the fuzzer reports a release that does not release (a planted defect)', async (t) => {
  const idx = planted(both[0], (f) => {
    f.releaseAllocator = () => {}
  })
  const r = await run({ seed: 2, ops: OPS, backend: 'virtual', copies: [idx] })
  t.truthy(r.failure, 'not found')
})
