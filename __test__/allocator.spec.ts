import test from 'ava'
import { randomBytes } from 'node:crypto'
import { factory, snapshot, throwsCode } from './helpers'

test('bytes written read back identically for many sizes', (t) => {
  const a = factory('host').createAllocator({ name: 'Cuda' })
  for (const size of [1, 7, 255, 256, 1000, 4096, 65537, 1 << 20]) {
    const p = a.alloc(size)!
    const data = randomBytes(size)
    a.write(p, data)
    const back = new Uint8Array(size)
    a.read(p, back)
    t.deepEqual(Buffer.from(back), data, `size ${size}`)
    a.free(p)
  }
})

test('fill sets exactly the given range', (t) => {
  const a = factory('host').createAllocator({ name: 'Cpu' })
  const p = a.alloc(100)!
  a.fill(p, 0, 100)
  a.fill(p + 10n, 0xab, 20n)
  const out = new Uint8Array(100)
  a.read(p, out)
  t.true(out.slice(10, 30).every((b) => b === 0xab))
  t.true(out.slice(0, 10).every((b) => b === 0) && out.slice(30).every((b) => b === 0))
})

test('memory outside a live allocation cannot be read or written from JS', (t) => {
  const a = factory('host').createAllocator({ name: 'Cuda' })
  const p = a.alloc(1000)!
  throwsCode(t, () => a.write(p + 996n, new Uint8Array(8)), 'ERR_ARENA_UNKNOWN_POINTER', 'past the requested size')
  throwsCode(t, () => a.read(p - 256n, new Uint8Array(1)), 'ERR_ARENA_UNKNOWN_POINTER', 'before it')
  throwsCode(t, () => a.fill(p, 1, 2n ** 40n), 'ERR_ARENA_UNKNOWN_POINTER', 'huge length')
  throwsCode(t, () => a.write(4096n, new Uint8Array(1)), 'ERR_ARENA_UNKNOWN_POINTER', 'a made-up address')
  a.free(p)
  throwsCode(t, () => a.read(p, new Uint8Array(1)), 'ERR_ARENA_UNKNOWN_POINTER', 'after free')
})

test('virtual memory has nothing to read', (t) => {
  const a = factory('virtual').createAllocator({ name: 'Cuda' })
  const p = a.alloc(64)!
  throwsCode(t, () => a.write(p, new Uint8Array(1)), 'ERR_ARENA_INVALID_ARGUMENT')
})

const badSizes: [string, unknown, string][] = [
  ['-1', -1, 'ERR_ARENA_INVALID_ARGUMENT'],
  ['1.5', 1.5, 'ERR_ARENA_INVALID_ARGUMENT'],
  ['NaN', Number.NaN, 'ERR_ARENA_INVALID_ARGUMENT'],
  ['Infinity', Number.POSITIVE_INFINITY, 'ERR_ARENA_INVALID_ARGUMENT'],
  ["'12'", '12', 'ERR_ARENA_INVALID_ARGUMENT'],
  ['2**53+2', 2 ** 53 + 2, 'ERR_ARENA_INVALID_ARGUMENT'],
  ['-1n', -1n, 'ERR_ARENA_INVALID_ARGUMENT'],
  ['2n**64n', 2n ** 64n, 'ERR_ARENA_OUT_OF_MEMORY'],
  ['2n**64n-1n', 2n ** 64n - 1n, 'ERR_ARENA_OUT_OF_MEMORY'],
]

for (const [name, size, code] of badSizes) {
  test(`a size of ${name} is ${code} and changes nothing`, (t) => {
    const f = factory('virtual')
    const a = f.createAllocator({ name: 'Cuda' })
    const keep = a.alloc(1000)!
    const before = snapshot(a)
    throwsCode(t, () => a.alloc(size as number), code, 'alloc')
    throwsCode(t, () => a.reserve(size as number), code, 'reserve')
    throwsCode(t, () => a.allocOnStream!(size as number, f.createStream()), code, 'allocOnStream')
    t.deepEqual(snapshot(a), before)
    t.is(a.requestedSize(keep), 1000n)
  })
}

const badPointers: [string, (p: bigint) => unknown][] = [
  ['foreign', () => 0xdead_0000n],
  ['interior', (p) => p + 256n],
  ['a number instead of a bigint', (p) => Number(p)],
  ['negative', () => -256n],
  ['past 64 bits', () => 2n ** 64n],
]

for (const [name, make] of badPointers) {
  test(`free of a ${name} pointer throws and changes nothing`, (t) => {
    const a = factory('virtual').createAllocator({ name: 'Cuda' })
    const p = a.alloc(1000)!
    const before = snapshot(a)
    const err = t.throws(() => a.free(make(p) as bigint))
    t.true(['ERR_ARENA_UNKNOWN_POINTER', 'ERR_ARENA_INVALID_ARGUMENT'].includes((err as { code?: string }).code ?? ''), String((err as { code?: string }).code))
    t.deepEqual(snapshot(a), before)
  })
}

test('a double free is ERR_ARENA_UNKNOWN_POINTER and changes nothing', (t) => {
  const a = factory('virtual').createAllocator({ name: 'Cuda' })
  const keep = a.alloc(256)!
  const p = a.alloc(256)!
  a.free(p)
  const before = snapshot(a)
  throwsCode(t, () => a.free(p), 'ERR_ARENA_UNKNOWN_POINTER')
  t.deepEqual(snapshot(a), before)
  a.free(keep)
})

test('free(null) and free(0n) do nothing', (t) => {
  const a = factory('virtual').createAllocator({ name: 'Cuda' })
  const before = snapshot(a)
  a.free(null)
  a.free(0n)
  t.deepEqual(snapshot(a), before)
})

const badConfigs: [string, Record<string, unknown>][] = [
  ['trailing text', { 'arena.initial_chunk_size_bytes': '4096abc' }],
  ['a leading space', { 'arena.max_mem': ' 1' }],
  ['an exponent', { 'arena.max_mem': '1e9' }],
  ['a negative', { 'arena.initial_chunk_size_bytes': '-100' }],
  ['an unknown arena key', { 'arena.max_memory': '5' }],
  ['an unknown strategy', { 'arena.extend_strategy': '2' }],
  ['a typed fraction', { maxMem: 1.5 }],
  ['a typed negative', { initialChunkSizeBytes: -1 }],
  ['a typed NaN', { maxDeadBytesPerChunk: Number.NaN }],
]

for (const [name, options] of badConfigs) {
  test(`a config with ${name} is ERR_ARENA_INVALID_CONFIG and creates nothing`, (t) => {
    const f = factory('virtual')
    throwsCode(t, () => f.createAllocator({ name: 'Cuda' }, options as Record<string, string>), 'ERR_ARENA_INVALID_CONFIG')
    t.is(f.deviceStats(0).rawAllocs, 0n)
  })
}

test('a typed config with an unknown strategy name is ERR_ARENA_INVALID_ARGUMENT', (t) => {
  throwsCode(t, () => factory('virtual').createAllocator({ name: 'Cuda' }, { extendStrategy: 'double' as 'sameAsRequested' }), 'ERR_ARENA_INVALID_ARGUMENT')
})

test('every use after release throws ERR_ARENA_RELEASED', (t) => {
  const f = factory('host')
  const a = f.createAllocator({ name: 'Cuda' })
  const p = a.alloc(100)!
  f.releaseAllocator(a)
  for (const [what, fn] of [
    ['alloc', () => a.alloc(1)],
    ['free', () => a.free(p)],
    ['free(null)', () => a.free(null)],
    ['getStats', () => a.getStats()],
    ['memoryLog', () => a.memoryLog()],
    ['read', () => a.read(p, new Uint8Array(1))],
    ['release again', () => f.releaseAllocator(a)],
  ] as const) {
    throwsCode(t, fn, 'ERR_ARENA_RELEASED', what)
  }
  const s = f.createStream()
  s.release()
  throwsCode(t, () => s.record(), 'ERR_ARENA_RELEASED', 'stream after release')
})

test('streams: a chunk freed on one stream is reused by another only after wait(record())', (t) => {
  const f = factory('virtual')
  const a = f.createAllocator({ name: 'Cuda' })
  const [s, u] = [f.createStream(), f.createStream()]
  const p = a.allocOnStream!(4096, s)!
  const keep = a.allocOnStream!(4096, s)!
  a.free(p)
  const q = a.allocOnStream!(4096, u)!
  t.not(q, p)
  u.wait(s.record())
  t.is(a.allocOnStream!(4096, u), p)
  t.is(a.memoryLog().regions[0].chunks.find((c) => c.addr === p)?.stream, u.id)
  a.free(keep)
})

test('withStream gives a view whose alloc is allocOnStream', (t) => {
  const f = factory('virtual')
  const a = f.createAllocator({ name: 'Cuda' })
  const s = f.createStream()
  const p = a.withStream(s).alloc(256)!
  t.is(a.memoryLog().regions[0].chunks.find((c) => c.addr === p)?.stream, s.id)
  const pinned = f.createAllocator({ name: 'CudaPinned' })
  throwsCode(t, () => pinned.withStream(s), 'ERR_ARENA_INVALID_ARGUMENT')
})

test('allocatedSize and requestedSize answer for a live pointer', (t) => {
  const a = factory('virtual').createAllocator({ name: 'Cuda' })
  const p = a.alloc(4)!
  t.is(a.requestedSize(p), 4n)
  t.is(a.allocatedSize(p), 256n)
  t.is(a.alloc(0), null)
})

test('a stream view frees and reports like its allocator', (t) => {
  const f = factory('virtual')
  const a = f.createAllocator({ name: 'Cuda' })
  const v = a.withStream(f.createStream())
  const p = v.alloc(256)!
  t.is(v.requestedSize(p), 256n)
  v.free(p)
  t.is(v.getStats().inUse, 0n)
  t.is(a.getStats().inUse, 0n)
})

test('a bigint of exactly 2^64 is no address, though it wraps to 0 in 64 bits', (t) => {
  const a = factory('virtual').createAllocator({ name: 'Cuda' })
  const before = snapshot(a)
  throwsCode(t, () => a.free(2n ** 64n), 'ERR_ARENA_UNKNOWN_POINTER')
  t.deepEqual(snapshot(a), before)
})

test('an address outside 0 … 2^64−1 is quoted as given, not as the 0x0 it is not', (t) => {
  const a = factory('virtual').createAllocator({ name: 'Cuda' })
  const cases: [bigint, string][] = [
    [-1n, 'unknown pointer -0x1:'],
    [2n ** 64n, 'unknown pointer 0x10000000000000000:'],
    [-(2n ** 200n), 'unknown pointer -2^128 or less:'],
    [2n ** 128n, 'unknown pointer 2^128 or more:'],
  ]
  for (const [addr, quoted] of cases) {
    const err = t.throws(() => a.free(addr)) as { code?: string; message: string }
    t.is(err.code, 'ERR_ARENA_UNKNOWN_POINTER')
    t.true(err.message.includes(quoted), err.message)
  }
})

test('a size past 64 bits is quoted as given, not as 2^64−1', (t) => {
  const a = factory('virtual').createAllocator({ name: 'Cuda' })
  const past = t.throws(() => a.alloc(2n ** 64n)) as { code?: string; message: string }
  t.is(past.code, 'ERR_ARENA_OUT_OF_MEMORY')
  t.true(past.message.includes('allocating 18446744073709551616 bytes'), past.message)
  const negative = t.throws(() => a.reserve(-5n)) as { code?: string; message: string }
  t.is(negative.code, 'ERR_ARENA_INVALID_ARGUMENT')
  t.true(negative.message.includes('got -5'), negative.message)
})
