import test from 'ava'
import { AllocatorFactory, envArenaOptions, sessionArenaOptions, parseArenaConfig, ERROR_CODES, nativeErrorCodes, devices } from '../ts/index'
import { factory, throwsCode } from './helpers'

test('the device arena is shared and counted, and the last release hands every byte back', (t) => {
  const f = factory('host')
  const a = f.createAllocator({ name: 'Cuda', deviceId: 0 })
  const b = f.createAllocator({ name: 'Cuda' })
  const p = a.alloc(5000)
  t.truthy(p)
  t.is(b.requestedSize(p!), 5000n, 'both handles see the same arena')
  t.true(f.deviceStats(0).rawBytesOutstanding > 0n)
  f.releaseAllocator(a)
  t.is(b.requestedSize(p!), 5000n, 'the arena lives while a user remains')
  f.releaseAllocator(b)
  const s = f.deviceStats(0)
  t.is(s.rawBytesOutstanding, 0n)
  t.is(s.rawAllocs, s.rawFrees)
})

test('two simulated devices are isolated', (t) => {
  const f = factory('virtual', 2)
  const a0 = f.createAllocator({ name: 'Cuda', deviceId: 0 })
  const a1 = f.createAllocator({ name: 'Cuda', deviceId: 1 })
  const p = a0.alloc(4096)!
  throwsCode(t, () => a1.free(p), 'ERR_ARENA_UNKNOWN_POINTER')
  t.is(f.deviceStats(1).rawBytesOutstanding, 0n)
  t.true(f.deviceStats(0).rawBytesOutstanding > 0n)
  throwsCode(t, () => f.createAllocator({ name: 'Cuda', deviceId: 2 }), 'ERR_ARENA_INVALID_ARGUMENT')
})

test('readonly allocators bypass the arena', (t) => {
  const f = factory('host')
  const r = f.createAllocator({ name: 'Cuda', type: 'readonly' })
  const p = r.alloc(1000)!
  t.is(r.allocatedSize(p), 1000n, 'no 256-byte rounding')
  t.is(f.deviceStats(0).rawBytesOutstanding, 1000n)
  t.is(r.info().type, 'readonly')
  f.releaseAllocator(r)
})

test('differing options keep the arena and warn naming the keys', (t) => {
  const warnings: string[] = []
  const f = factory('virtual', 1, warnings)
  f.createAllocator({ name: 'Cuda' }, { 'arena.max_mem': '1073741824' })
  const b = f.createAllocator({ name: 'Cuda' }, { maxMem: 2n ** 31n, extendStrategy: 'sameAsRequested' })
  t.is(warnings.length, 1)
  t.regex(warnings[0], /arena\.max_mem/)
  t.regex(warnings[0], /arena\.extend_strategy/)
  t.is(b.getStats().limit, 1073741824n)
})

test('replace makes a new arena with the new options', (t) => {
  const f = factory('virtual')
  const old = f.createAllocator({ name: 'Cuda' }, { maxMem: 1 << 20 })
  const fresh = f.createSharedAllocator({ name: 'Cuda' }, { maxMem: 2 << 20 }, { replace: true })
  t.is(fresh.getStats().limit, 2n << 20n)
  t.is(old.getStats().limit, 1n << 20n, 'the old handle keeps the old arena')
})

test('pinned memory has no allocOnStream, device memory has', (t) => {
  const f = factory('host')
  const pinned = f.createAllocator({ name: 'CudaPinned' })
  const device = f.createAllocator({ name: 'Cuda' })
  t.is(pinned.allocOnStream, undefined)
  t.is(typeof device.allocOnStream, 'function')
  t.is(pinned.info().name, 'CudaPinned')
})

test('the memory pool is selected by arena.use_cuda_mempool=1', (t) => {
  const f = factory('virtual')
  const pool = f.createAllocator({ name: 'Cuda' }, { 'arena.use_cuda_mempool': '1' })
  const p = pool.reserve(3000)!
  const s = pool.getStats()
  t.is(s.numReserves, 0n, 'a pool serves reserve as an allocation')
  t.is(s.numAllocs, 1n)
  pool.free(p)
  pool.shrink!()
  t.is(pool.getStats().numArenaShrinkages, 1n)
})

test('option namespaces strip their prefixes', (t) => {
  const o = { 'ep_factory.MyEP.arena.max_mem': '1', 'ep_factory.myep.arena.max_mem': '2', 'ep.cudaexecutionprovider.arena.extend_strategy': '1' }
  t.deepEqual(envArenaOptions(o, 'MyEP'), { 'arena.max_mem': '1' })
  t.deepEqual(sessionArenaOptions(o, 'CUDAExecutionProvider'), { 'arena.extend_strategy': '1' })
})

test('every stats key is present with ORT names', (t) => {
  const a = factory('virtual').createAllocator({ name: 'Cuda' })
  t.deepEqual(Object.keys(a.getStatsRaw()), [
    'Limit', 'InUse', 'RequestedInUse', 'TotalAllocated', 'ReservedBytes', 'MaxInUse',
    'NumAllocs', 'NumReserves', 'NumArenaExtensions', 'NumArenaShrinkages', 'MaxAllocSize',
  ])
  t.is(a.getStatsRaw().Limit, '-1')
  t.is(a.version, 25)
})

test('the TS and Rust error code lists match', (t) => {
  t.deepEqual(nativeErrorCodes(), [...ERROR_CODES])
})

test('typed and raw configs map to the same Rust config', (t) => {
  const raw = parseArenaConfig({ 'arena.extend_strategy': '1', 'arena.max_mem': '4096' })
  const f = factory('virtual')
  const a = f.createAllocator({ name: 'Cuda' }, { extendStrategy: 'sameAsRequested', maxMem: 4096 })
  t.is(a.getStats().limit, 4096n)
  t.is(raw['arena.extend_strategy'], '1')
})

test('devices() is empty without a CUDA driver and never throws', (t) => {
  t.deepEqual(devices(), [])
})

test('the cuda backend without a driver throws ERR_NO_CUDA', (t) => {
  throwsCode(t, () => factory('cuda' as 'host'), 'ERR_NO_CUDA')
})

test('a factory name with a lone surrogate is refused, so two such names never share a factory', (t) => {
  // UTF-8 conversion would make both '\uFFFD', one process-wide factory.
  for (const name of ['\uD800', '\uD801', 'a\uDC00', '\uDBFF\uDBFF\uDFFF']) {
    throwsCode(t, () => new AllocatorFactory({ name, backend: 'host' }), 'ERR_ARENA_INVALID_ARGUMENT', JSON.stringify(name))
  }
  const emoji = new AllocatorFactory({ name: 'lone-\uD83D\uDE00', backend: 'host' })
  t.is(emoji.name, 'lone-😀')
  const replaced = new AllocatorFactory({ name: 'lone-\uFFFD', backend: 'host' })
  t.is(replaced.name, 'lone-\uFFFD')
  t.not(emoji.createAllocator({ name: 'Cuda' }).alloc(256), null)
  t.is(replaced.createAllocator({ name: 'Cuda' }).getStats().inUse, 0n, 'its own arenas')
})
