// Issue 12: onnxruntime-node sessions on a cuda-arena allocator (useWithOnnxRuntime), with the
// test model of __test__/ort/model.ts on ONNX Runtime's CPU provider. ONNX Runtime's
// environment is process-wide, so every test here is serial. Orders of registration,
// unregistration, session release and exit are in onnxruntime-lifetimes.spec.ts (child
// processes).
import test from 'ava'
import { execFileSync } from 'node:child_process'
import {
  ERR_ARENA_INVALID_ARGUMENT,
  ERR_ARENA_INVALID_CONFIG,
  ERR_ARENA_RELEASED,
  ERR_ORT_LOAD,
  ERR_ORT_REFUSED,
  ERR_ORT_VERSION,
  ORT_ERROR_CODES,
  nativeOrtErrorCodes,
  useWithOnnxRuntime,
  type AllocatorFactory,
  type OnnxRuntimeRegistration,
} from '../ts/index'
import { factory, throwsCode } from './helpers'
import { TEST_MODEL } from './ort/model'
import { createSession, runOnFactory, runOnce } from './ort/session'
import { ortSerial } from './ort/test'

const bytesOf = (a: Float32Array): Buffer => Buffer.from(a.buffer, a.byteOffset, a.byteLength)
const WEIGHT_BYTES = BigInt(TEST_MODEL.layers * TEST_MODEL.width * TEST_MODEL.width * 4)
const BIAS_BYTES = BigInt(TEST_MODEL.layers * TEST_MODEL.width * 4)

/** Raw bytes a factory's device 0 still holds once `a` (a probe allocation's arena) is released: 0 unless something else holds a user. */
function leftAfterRelease(f: AllocatorFactory, a: ReturnType<AllocatorFactory['createAllocator']>, p: bigint | null): bigint {
  a.free(p)
  f.releaseAllocator(a)
  return f.deviceStats(0).rawBytesOutstanding
}

/** `fn` with a registration that is unregistered afterwards, also when `fn` fails. */
async function withRegistration<T>(reg: OnnxRuntimeRegistration, fn: (reg: OnnxRuntimeRegistration) => Promise<T>): Promise<T> {
  try {
    return await fn(reg)
  } finally {
    reg.unregister()
  }
}

ortSerial('a session on the Cpu arena computes outputs bitwise equal to a session on ONNX Runtime’s own allocator', async (t) => {
  const plain = await createSession()
  const expected = await runOnce(plain)
  await plain.release()
  const run = await runOnFactory(factory('host'), { runs: 3 })
  t.true(run.afterRuns[2].numAllocs > run.created.numAllocs, 'the runs allocated from the arena')
  for (const out of run.outputs) t.is(Buffer.compare(bytesOf(out), bytesOf(expected)), 0)
})

ortSerial('ONNX Runtime reserves the weights in the arena at session creation, and nothing else', async (t) => {
  const run = await runOnFactory(factory('host'), { runs: 0 })
  t.is(run.registered.numAllocs, 0n)
  const { numReserves, reservedBytes, numAllocs, inUse } = run.created
  // One reserve per prepacked MatMul weight (the biases may or may not be reserved).
  t.true(numReserves >= BigInt(TEST_MODEL.layers) && numReserves <= BigInt(2 * TEST_MODEL.layers), `${numReserves} reserves`)
  t.true(reservedBytes >= WEIGHT_BYTES && reservedBytes <= WEIGHT_BYTES + BIAS_BYTES + 256n * numReserves, `${reservedBytes} bytes reserved`)
  t.is(numAllocs, numReserves, 'no allocation besides the reserves')
  t.is(inUse, reservedBytes)
})

ortSerial('each run allocates from the arena and InUse is back to the reserves after it', async (t) => {
  const run = await runOnFactory(factory('host'), { runs: 4 })
  let before = run.created
  for (const after of run.afterRuns) {
    t.true(after.numAllocs > before.numAllocs, 'the run allocated')
    t.is(after.numReserves, run.created.numReserves, 'no reserve at run time')
    t.is(after.inUse, run.created.reservedBytes)
    t.is(after.requestedInUse, run.created.reservedBytes)
    t.true(after.maxInUse > run.created.reservedBytes, 'intermediates were in use during the run')
    before = after
  }
  // After the first run (which plans ONNX Runtime's memory pattern), every run does the same.
  const perRun = run.afterRuns.slice(1).map((s, i) => s.numAllocs - run.afterRuns[i].numAllocs)
  t.deepEqual(perRun, perRun.map(() => perRun[0]))
})

ortSerial('memoryLog shows the reserves, and the regions the runs allocated from, free after each run', async (t) => {
  const f = factory('host')
  await withRegistration(useWithOnnxRuntime(f, { name: 'Cpu' }), async (reg) => {
    const session = await createSession(reg)
    await runOnce(session)
    const log = reg.allocator.memoryLog()
    const stats = reg.allocator.getStats()
    t.deepEqual(log.stats, stats)
    t.is(BigInt(log.reserves.length), stats.numReserves)
    t.is(log.reserves.reduce((n, r) => n + r.size, 0n), stats.reservedBytes)
    t.true(log.regions.length > 0, 'the run grew the arena')
    t.is(log.regions.reduce((n, r) => n + r.size, 0n), stats.totalAllocated - stats.reservedBytes)
    t.true(log.regions.every((r) => r.chunks.every((c) => !c.inUse)), 'every chunk is free after the run')
    await session.release()
    t.deepEqual(reg.allocator.memoryLog().reserves, [], 'releasing the session freed its reserves')
  })
})

ortSerial('a second registration for the same memory info is ERR_ORT_REFUSED, changes nothing, and the first stays registered', async (t) => {
  const f1 = factory('host')
  const f2 = factory('host')
  await withRegistration(useWithOnnxRuntime(f1, { name: 'Cpu' }), async (first) => {
    const probe = f2.createAllocator({ name: 'Cpu' })
    const p = probe.alloc(1000)
    throwsCode(t, () => useWithOnnxRuntime(f2, { name: 'Cpu' }), ERR_ORT_REFUSED)
    t.is(leftAfterRelease(f2, probe, p), 0n, 'the refused registration kept no user of f2’s arena')
    t.true(first.registered)
    const session = await createSession(first)
    await runOnce(session)
    await session.release()
    t.true(first.allocator.getStats().numAllocs > 0n, 'sessions still use the first')
  })
})

ortSerial('unregister twice does nothing the second time, and never unregisters a later registration', async (t) => {
  const f = factory('host')
  const first = useWithOnnxRuntime(f, { name: 'Cpu' })
  first.unregister()
  t.false(first.registered)
  throwsCode(t, () => first.allocator.getStats(), ERR_ARENA_RELEASED, 'unregister released the registration’s allocator')
  await withRegistration(useWithOnnxRuntime(factory('host'), { name: 'Cpu' }), async (second) => {
    t.notThrows(() => first.unregister())
    t.true(second.registered)
    const session = await createSession(second)
    await runOnce(session)
    await session.release()
    t.true(second.allocator.getStats().numAllocs > 0n, 'sessions use the later registration')
  })
})

ortSerial('after unregister, new sessions use ONNX Runtime’s allocator and sessions created before keep the arena', async (t) => {
  const f = factory('host')
  const reg = useWithOnnxRuntime(f, { name: 'Cpu' })
  const before = await createSession(reg)
  reg.unregister()
  // The view keeps the arena alive; another user of the factory watches it.
  const watch = f.createAllocator({ name: 'Cpu' })
  const after = await createSession(reg)
  const start = watch.getStats()
  await runOnce(after)
  t.deepEqual(watch.getStats(), start, 'a session created after unregister does not touch the arena')
  await runOnce(before)
  t.true(watch.getStats().numAllocs > start.numAllocs, 'a session created before still allocates from it')
  await Promise.all([before.release(), after.release()])
  t.is(watch.getStats().inUse, 0n)
  f.releaseAllocator(watch)
})

ortSerial('calls() counts what ONNX Runtime called: Reserve for the weights, Alloc and Free for a run, none for a session on its own allocator', async (t) => {
  const f = factory('host')
  await withRegistration(useWithOnnxRuntime(f, { name: 'Cpu' }), async (reg) => {
    const none = { alloc: 0, reserve: 0, allocOnStream: 0, allocOnStreamWithoutStream: 0, free: 0, freeIgnored: 0, failed: 0, getStats: 0, shrink: 0, newStreams: 0, streamHandles: [] }
    t.deepEqual(reg.calls(), none)
    const own = await createSession()
    await runOnce(own)
    await own.release()
    t.deepEqual(reg.calls(), none, 'a session on ONNX Runtime’s own allocator calls nothing')
    const session = await createSession(reg)
    const created = reg.calls()
    t.is(created.reserve, TEST_MODEL.layers)
    t.is(created.alloc, 0)
    await runOnce(session)
    const ran = reg.calls()
    t.true(ran.alloc > 0)
    t.is(ran.free, ran.alloc, 'every tensor of the run freed')
    t.is(ran.allocOnStream, 0, 'the Cpu arena has no AllocOnStream')
    t.is(BigInt(ran.alloc + ran.reserve), reg.allocator.getStats().numAllocs)
    await session.release()
    t.is(reg.calls().free, ran.alloc + TEST_MODEL.layers, 'the reserves freed with the session')
  })
})

ortSerial('unregister hands the arena’s free memory back, and a session made before still runs after it', async (t) => {
  const f = factory('host')
  const reg = useWithOnnxRuntime(f, { name: 'Cpu' })
  const watch = f.createAllocator({ name: 'Cpu' })
  const kept = await createSession(reg)
  const done = await createSession(reg)
  await runOnce(done)
  await done.release()
  const before = watch.getStats()
  reg.unregister()
  const after = watch.getStats()
  t.true(after.totalAllocated < before.totalAllocated, `held ${before.totalAllocated} -> ${after.totalAllocated}`)
  t.is(after.inUse, before.inUse, 'the kept session’s weights stay')
  t.true(after.numArenaShrinkages > before.numArenaShrinkages)
  await runOnce(kept)
  await kept.release()
  t.is(watch.getStats().inUse, 0n)
  f.releaseAllocator(watch)
  t.deepEqual(reg.calls().streamHandles, [], 'calls() answers after unregister')
})

ortSerial('a registration after the factory’s allocator was released gets a new arena, which sessions use', async (t) => {
  const f = factory('host')
  const old = f.createAllocator({ name: 'Cpu' })
  old.free(old.alloc(4096))
  f.releaseAllocator(old)
  t.is(f.deviceStats(0).rawBytesOutstanding, 0n)
  const run = await runOnFactory(f, { runs: 1 })
  t.true(run.afterRuns[0].numAllocs > run.created.numAllocs)
  throwsCode(t, () => old.getStats(), ERR_ARENA_RELEASED)
})

ortSerial('releasing the registration’s allocator while a session uses it leaves the arena to the session', async (t) => {
  const plain = await createSession()
  const expected = await runOnce(plain)
  await plain.release()
  const f = factory('host')
  await withRegistration(useWithOnnxRuntime(f, { name: 'Cpu' }), async (reg) => {
    const session = await createSession(reg)
    f.releaseAllocator(reg.allocator)
    const out = await runOnce(session)
    t.is(Buffer.compare(bytesOf(out), bytesOf(expected)), 0)
    await session.release()
  })
})

ortSerial('the API version is the highest both know unless one is asked for', async (t) => {
  await withRegistration(useWithOnnxRuntime(factory('host'), { name: 'Cpu' }), async (reg) => {
    t.regex(reg.ortVersion, /^1\.\d+\./)
    // cuda-arena knows OrtApi up to 30 (ort-sys's api-30); onnxruntime-node 1.N offers up to N.
    t.is(reg.apiVersion, Math.min(30, Number(reg.ortVersion.split('.')[1])))
    t.regex(reg.libraryPath, /onnxruntime-node\/bin\/napi-v6\/linux\/(x64|arm64)\/libonnxruntime\.so\.1$/)
  })
  const run = await runOnFactory(factory('host'), { runs: 1, ortOptions: { apiVersion: 23 } })
  t.true(run.afterRuns[0].numAllocs > run.created.numAllocs, 'a view of version 23 works too')
})

ortSerial('an API version the library does not offer, or older than cuda-arena supports, is ERR_ORT_VERSION and changes nothing', async (t) => {
  const f = factory('host')
  const probe = f.createAllocator({ name: 'Cpu' })
  const p = probe.alloc(1000)
  throwsCode(t, () => useWithOnnxRuntime(f, { name: 'Cpu' }, undefined, { apiVersion: 31 }), ERR_ORT_VERSION, '31 (ONNX Runtime 1.30 offers 1 … 30)')
  throwsCode(t, () => useWithOnnxRuntime(f, { name: 'Cpu' }, undefined, { apiVersion: 22 }), ERR_ORT_VERSION, '22 (before GetStats and AllocOnStream)')
  t.is(leftAfterRelease(f, probe, p), 0n)
})

ortSerial('a libraryPath that does not exist, or is not ONNX Runtime, is ERR_ORT_LOAD and changes nothing', async (t) => {
  const f = factory('host')
  const probe = f.createAllocator({ name: 'Cpu' })
  const p = probe.alloc(1000)
  throwsCode(t, () => useWithOnnxRuntime(f, { name: 'Cpu' }, undefined, { libraryPath: '/nonexistent/libonnxruntime.so.1' }), ERR_ORT_LOAD)
  const libc = (process.report.getReport() as { sharedObjects: string[] }).sharedObjects.find((s) => /\/libc\.so\.6$/.test(s))
  t.truthy(libc, 'libc is loaded')
  throwsCode(t, () => useWithOnnxRuntime(f, { name: 'Cpu' }, undefined, { libraryPath: libc! }), ERR_ORT_LOAD, 'libc has no OrtGetApiBase')
  t.is(leftAfterRelease(f, probe, p), 0n)
})

ortSerial('a huge or unprintable libraryPath makes a short message', (t) => {
  const f = factory('host')
  for (const libraryPath of ['/x'.repeat(50_000), `/tmp/${'\u001b[31m'.repeat(200)}.so`]) {
    const err = t.throws(() => useWithOnnxRuntime(f, { name: 'Cpu' }, undefined, { libraryPath })) as Error & { code?: string }
    t.is(err.code, ERR_ORT_LOAD)
    t.true(err.message.length < 400, `${err.message.length} characters`)
    t.false(err.message.includes('\u001b'), 'control characters are escaped')
  }
})

ortSerial('a libraryPath naming the loaded ONNX Runtime registers with the same environment', async (t) => {
  const first = useWithOnnxRuntime(factory('host'), { name: 'Cpu' })
  const path = first.libraryPath
  first.unregister()
  // Through a symlink-free different spelling of the same file.
  const other = path.replace('/bin/', '/bin/./')
  const run = await runOnFactory(factory('host'), { runs: 1, ortOptions: { libraryPath: other } })
  t.true(run.afterRuns[0].numAllocs > run.created.numAllocs, 'onnxruntime-node’s sessions used it')
})

ortSerial('Cuda and CudaPinned registrations are accepted by ONNX Runtime, and CPU sessions do not use them', async (t) => {
  for (const name of ['Cuda', 'CudaPinned'] as const) {
    const run = await runOnFactory(factory('host'), { runs: 1, info: { name, deviceId: 0 } })
    t.is(run.afterRuns[0].numAllocs, 0n, `${name} serves the CUDA provider's sessions only`)
  }
})

ortSerial('options configure the registered arena, typed or raw', async (t) => {
  for (const options of [{ maxMem: 64 << 20 }, { 'arena.max_mem': String(64 << 20) }]) {
    const run = await runOnFactory(factory('host'), { runs: 1, options })
    t.is(run.created.limit, BigInt(64 << 20))
  }
})

ortSerial('an arena too small for the weights makes session creation fail with ONNX Runtime’s error, and the arena stays usable', async (t) => {
  const f = factory('host')
  await withRegistration(useWithOnnxRuntime(f, { name: 'Cpu' }, { maxMem: 1 << 20 }), async (reg) => {
    // ONNX Runtime logs the failed allocation as an error; only fatal messages here.
    await t.throwsAsync(createSession(reg, { logSeverityLevel: 4 }))
    const stats = reg.allocator.getStats()
    t.is(stats.inUse, 0n, 'what ONNX Runtime got before failing was freed')
    const p = reg.allocator.alloc(1000)
    t.truthy(p)
    reg.allocator.free(p)
  })
})

test('invalid arguments are ERR_ARENA_INVALID_ARGUMENT, invalid options ERR_ARENA_INVALID_CONFIG, before anything is loaded or registered', (t) => {
  const f = factory('host')
  const cases: [string, () => unknown, string][] = [
    ['factory', () => useWithOnnxRuntime({} as AllocatorFactory, { name: 'Cpu' }), ERR_ARENA_INVALID_ARGUMENT],
    ['info', () => useWithOnnxRuntime(f, null as never), ERR_ARENA_INVALID_ARGUMENT],
    ['info.name', () => useWithOnnxRuntime(f, { name: 'Gpu' as 'Cpu' }), ERR_ARENA_INVALID_ARGUMENT],
    ['info.deviceId', () => useWithOnnxRuntime(f, { name: 'Cpu', deviceId: -1 }), ERR_ARENA_INVALID_ARGUMENT],
    ['info.type', () => useWithOnnxRuntime(f, { name: 'Cpu', type: 'readonly' } as never), ERR_ARENA_INVALID_ARGUMENT],
    ['options', () => useWithOnnxRuntime(f, { name: 'Cpu' }, { 'arena.extend_strategy': '7' }), ERR_ARENA_INVALID_CONFIG],
    ['ortOptions', () => useWithOnnxRuntime(f, { name: 'Cpu' }, undefined, 'x' as never), ERR_ARENA_INVALID_ARGUMENT],
    ['ortOptions key', () => useWithOnnxRuntime(f, { name: 'Cpu' }, undefined, { path: 'x' } as never), ERR_ARENA_INVALID_ARGUMENT],
    ['apiVersion', () => useWithOnnxRuntime(f, { name: 'Cpu' }, undefined, { apiVersion: '30' as never }), ERR_ARENA_INVALID_ARGUMENT],
    ['apiVersion 0', () => useWithOnnxRuntime(f, { name: 'Cpu' }, undefined, { apiVersion: 0 }), ERR_ARENA_INVALID_ARGUMENT],
    ['libraryPath', () => useWithOnnxRuntime(f, { name: 'Cpu' }, undefined, { libraryPath: '' }), ERR_ARENA_INVALID_ARGUMENT],
    ['libraryPath NUL', () => useWithOnnxRuntime(f, { name: 'Cpu' }, undefined, { libraryPath: 'a\0b' }), ERR_ARENA_INVALID_ARGUMENT],
  ]
  for (const [what, fn, code] of cases) throwsCode(t, fn, code, what)
  t.is(f.deviceStats(0).rawAllocs, 0n)
})

test('the native ONNX Runtime error codes are the ones ts/errors.ts lists', (t) => {
  t.deepEqual(nativeOrtErrorCodes(), [...ORT_ERROR_CODES])
})

test('cuda-arena loads without onnxruntime-node, which it does not load until useWithOnnxRuntime', (t) => {
  const index = require.resolve('../ts/index')
  const script = `require(${JSON.stringify(index)}); console.log(Object.keys(require.cache).some((k) => k.includes('onnxruntime-node')))`
  const tsx = require.resolve('tsx/cjs')
  t.is(execFileSync(process.execPath, ['--require', tsx, '-e', script], { encoding: 'utf8' }).trim(), 'false')
})
