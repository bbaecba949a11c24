// Issue 11: the promises under attack, in process (the GC and process-level cases are in
// issue-11-lifetimes.spec.ts, in child processes). Each test names the item it covers.
import test from 'ava'
import { Worker } from 'node:worker_threads'
import { join } from 'node:path'
import {
  AllocatorFactory,
  ERROR_CODES,
  envArenaOptions,
  parseArenaConfig,
  sessionArenaOptions,
  toArenaPairs,
  type OrtAllocator,
} from '../ts/index'
import { factory, snapshot, throwsCode } from './helpers'

const MIB = 1n << 20n

/** Every thrown error must carry one of the codes. */
function coded(t: import('ava').ExecutionContext, fn: () => unknown, what: string): string {
  const err = t.throws(fn, undefined, what) as { code?: string } | undefined
  t.true((ERROR_CODES as readonly string[]).includes(err?.code ?? ''), `${what}: ${String(err?.code)} ${String((err as Error | undefined)?.message)}`)
  return err?.code ?? ''
}

// Item 2.
test('a released allocator throws on the fast path even after its handle slot is reused', (t) => {
  const f = factory('virtual')
  const a = f.createAllocator({ name: 'Cuda' })
  const p = a.alloc(256)!
  f.releaseAllocator(a)
  const b = f.createAllocator({ name: 'Cuda' })
  const q = b.alloc(256)!
  const before = snapshot(b)
  throwsCode(t, () => a.alloc(1000), 'ERR_ARENA_RELEASED', 'alloc(number)')
  throwsCode(t, () => a.alloc(1000n), 'ERR_ARENA_RELEASED', 'alloc(bigint)')
  throwsCode(t, () => a.free(q), 'ERR_ARENA_RELEASED', 'free of the new allocator\'s pointer')
  throwsCode(t, () => a.free(p), 'ERR_ARENA_RELEASED', 'free of its own old pointer')
  throwsCode(t, () => a.allocOnStream!(256, f.createStream()), 'ERR_ARENA_RELEASED', 'allocOnStream')
  t.deepEqual(snapshot(b), before, 'the new allocator is untouched')
})

// Item 2.
test('a released stream throws on the fast path even after its handle slot is reused', (t) => {
  const f = factory('virtual')
  const a = f.createAllocator({ name: 'Cuda' })
  const s = f.createStream()
  s.release()
  const u = f.createStream()
  const before = snapshot(a)
  throwsCode(t, () => a.allocOnStream!(256, s), 'ERR_ARENA_RELEASED', 'number size')
  throwsCode(t, () => a.allocOnStream!(256n, s), 'ERR_ARENA_RELEASED', 'bigint size')
  throwsCode(t, () => a.resetChunksUsingStream!(s), 'ERR_ARENA_RELEASED', 'reset')
  throwsCode(t, () => a.withStream(s), 'ERR_ARENA_RELEASED', 'withStream')
  throwsCode(t, () => a.write(0n, new Uint8Array(1), s), 'ERR_ARENA_RELEASED', 'write with a stream')
  throwsCode(t, () => s.release(), 'ERR_ARENA_RELEASED', 'release twice')
  t.deepEqual(snapshot(a), before)
  t.truthy(a.allocOnStream!(256, u), 'the new stream works')
})

// Item 4.
test('a pointer plus or minus 2^64 frees nothing and names no allocation', (t) => {
  const a = factory('host').createAllocator({ name: 'Cuda' })
  const p = a.alloc(100)!
  const q = a.alloc(100)!
  const before = snapshot(a)
  for (const [what, bad] of [
    ['p + 2^64', p + 2n ** 64n],
    ['q - 2^64', q - 2n ** 64n],
    ['p + 2^128', p + 2n ** 128n],
    ['-p', -p],
  ] as const) {
    const code = coded(t, () => a.free(bad), `free(${what})`)
    t.true(code === 'ERR_ARENA_UNKNOWN_POINTER' || code === 'ERR_ARENA_INVALID_ARGUMENT', what)
    coded(t, () => a.allocatedSize(bad), `allocatedSize(${what})`)
    coded(t, () => a.write(bad, new Uint8Array(1)), `write(${what})`)
  }
  t.deepEqual(snapshot(a), before, 'p and q are still live')
  a.free(p)
  a.free(q)
})

// Item 6.
test('a logger that throws fails the create call, which then changes nothing', (t) => {
  const f = new AllocatorFactory({
    name: `logger-throws-${process.pid}`,
    backend: 'virtual',
    logger: () => {
      throw new Error('no warnings here')
    },
  })
  const a = f.createAllocator({ name: 'Cuda' }, { maxMem: 1n << 30n })
  const p = a.alloc(4096)!
  const err = t.throws(() => f.createAllocator({ name: 'Cuda' }, { maxMem: 1n << 31n })) as Error & { code?: string; cause?: unknown }
  t.is(err.code, 'ERR_ARENA_INVALID_ARGUMENT')
  t.is((err.cause as Error).message, 'no warnings here')
  a.free(p)
  f.releaseAllocator(a)
  t.is(f.deviceStats(0).rawBytesOutstanding, 0n, 'releasing every handle the caller got returns all memory')
  t.is(f.createAllocator({ name: 'Cuda' }).getStats().limit, -1n, 'the arena was destroyed: a new one has new options')
})

// Item 7, from JS.
test('one stream per request, released after, holds what one request needs', (t) => {
  const f = factory('virtual')
  const a = f.createAllocator({ name: 'Cuda' })
  for (let i = 0; i < 40; i++) {
    const s = f.createStream()
    a.free(a.allocOnStream!(64 * 2 ** 20, s))
    s.release()
  }
  t.true(a.getStats().totalAllocated <= 128n * MIB, `held ${a.getStats().totalAllocated}`)
  t.is(a.memoryLog().regions.flatMap((r) => r.chunks).length, 1, 'the free chunks merged')
})

// Item 8.
test('a worker terminated while it allocates gives its user back, so memory comes back', async (t) => {
  const name = `busy-worker-${process.pid}`
  const f = new AllocatorFactory({ name, backend: 'virtual' })
  const a = f.createAllocator({ name: 'Cuda' })
  const boot = `require('tsx/cjs'); require(${JSON.stringify(join(__dirname, 'fixtures', 'worker-busy.ts'))})`
  const w = new Worker(boot, { eval: true, workerData: { name, backend: 'virtual' } })
  await new Promise((resolve, reject) => {
    w.once('message', resolve)
    w.once('error', reject)
  })
  await w.terminate()
  t.true(f.deviceStats(0).rawBytesOutstanding > 0n, 'the worker had allocated')
  f.releaseAllocator(a)
  t.is(f.deviceStats(0).rawBytesOutstanding, 0n)
})

// Item 9.
test.serial('options inherited from Object.prototype do not reach a config', (t) => {
  const proto = Object.prototype as Record<string, unknown>
  try {
    proto['arena.max_mem'] = '4096'
    proto.maxMem = 4096
    proto['ep_factory.F.arena.max_mem'] = '4096'
    const f = factory('virtual')
    t.is(f.createAllocator({ name: 'Cuda' }, { extendStrategy: 'sameAsRequested' }).getStats().limit, -1n, 'typed options')
    const g = factory('virtual')
    t.is(g.createAllocator({ name: 'Cuda' }, { 'arena.extend_strategy': '1' }).getStats().limit, -1n, 'raw options')
    t.deepEqual(Object.keys(envArenaOptions({ 'ep_factory.F.arena.extend_strategy': '1' }, 'F')), ['arena.extend_strategy'])
    t.is(parseArenaConfig({})['arena.max_mem'], '0')
    t.deepEqual(toArenaPairs({ maxDeadBytesPerChunk: 512 }), { 'arena.max_dead_bytes_per_chunk': '512' })
  } finally {
    delete proto['arena.max_mem']
    delete proto.maxMem
    delete proto['ep_factory.F.arena.max_mem']
  }
})

// Item 9.
test.serial('a polluted factory option is ignored, not an uncoded error', (t) => {
  const proto = Object.prototype as Record<string, unknown>
  try {
    proto.backend = 42
    proto.devices = 'many'
    const f = new AllocatorFactory({ name: `polluted-${process.pid}`, backend: 'virtual' })
    t.is(f.backend, 'virtual')
    t.is(f.deviceCount, 1)
  } finally {
    delete proto.backend
    delete proto.devices
  }
})

// Item 10.
for (const [what, options] of [
  ['a misspelt typed key', { extendStratgy: 'sameAsRequested' }],
  ['toString as a key', { toString: 5 }],
  ['constructor as a key', { constructor: 1 }],
  ['a typed key beside a raw one', { maxMem: 5, 'arena.max_mem': '5' }],
] as const) {
  test(`${what} is ERR_ARENA_INVALID_CONFIG and creates nothing`, (t) => {
    const f = factory('virtual')
    const err = t.throws(() => f.createAllocator({ name: 'Cuda' }, options as Record<string, string>)) as Error & { code?: string }
    t.is(err.code, 'ERR_ARENA_INVALID_CONFIG')
    t.is(f.deviceStats(0).rawAllocs, 0n)
  })
}

test('an unknown typed key names the nearest known one', (t) => {
  const err = t.throws(() => factory('virtual').createAllocator({ name: 'Cuda' }, { extendStratgy: 'sameAsRequested' } as never)) as Error
  t.regex(err.message, /extendStratgy/)
  t.regex(err.message, /extendStrategy/)
})

// Item 11.
test('what parseArenaConfig returns is accepted back, the documented maximum included', (t) => {
  const parsed = parseArenaConfig({ 'arena.max_power_of_two_extend_bytes': String(2n ** 63n - 1n) })
  t.deepEqual(parseArenaConfig(parsed), parsed)
  const f = factory('virtual')
  t.notThrows(() => f.createAllocator({ name: 'Cuda' }, parsed))
  t.notThrows(() => factory('virtual').createAllocator({ name: 'Cuda' }, { maxPowerOfTwoExtendBytes: 2n ** 63n - 1n }))
})

// Item 12.
for (const [what, call] of [
  ['deviceId 2**32+1', (f: AllocatorFactory) => f.createAllocator({ name: 'Cuda', deviceId: 2 ** 32 + 1 })],
  ['deviceId -1', (f: AllocatorFactory) => f.createAllocator({ name: 'Cuda', deviceId: -1 })],
  ['deviceId 0.5', (f: AllocatorFactory) => f.createAllocator({ name: 'Cuda', deviceId: 0.5 })],
  ['createStream(NaN)', (f: AllocatorFactory) => f.createStream(Number.NaN)],
  ['createStream(1.9)', (f: AllocatorFactory) => f.createStream(1.9)],
  ['createStream(-1)', (f: AllocatorFactory) => f.createStream(-1)],
  ['createStream(2**32)', (f: AllocatorFactory) => f.createStream(2 ** 32)],
  ['deviceStats(2**32+1)', (f: AllocatorFactory) => f.deviceStats(2 ** 32 + 1)],
  ['deviceStats(-1)', (f: AllocatorFactory) => f.deviceStats(-1)],
  ['fill with byte 256', (f: AllocatorFactory) => f.createAllocator({ name: 'Cuda' }).fill(0n, 256, 1)],
] as const) {
  test(`${what} is ERR_ARENA_INVALID_ARGUMENT, not wrapped or truncated`, (t) => {
    const f = factory('host', 2)
    throwsCode(t, () => call(f), 'ERR_ARENA_INVALID_ARGUMENT', what)
  })
}

// Item 13.
const weird: [string, () => unknown][] = [
  ['an object with no prototype', () => Object.create(null)],
  ['a revoked proxy', () => {
    const r = Proxy.revocable({}, {})
    r.revoke()
    return r.proxy
  }],
  ['a symbol', () => Symbol('s')],
  ['a function', () => () => 1],
  ['a huge string', () => 'x'.repeat(10_000_000)],
  ['null', () => null],
  ['a number', () => 7],
]
for (const [what, make] of weird) {
  test(`${what} as any argument gives a coded error with a short message`, (t) => {
    const f = factory('host')
    const a = f.createAllocator({ name: 'Cuda' })
    const calls: [string, (v: unknown) => unknown][] = [
      ['new AllocatorFactory', (v) => new AllocatorFactory(v as never)],
      ['devices: [v]', (v) => new AllocatorFactory({ backend: 'virtual', devices: [v] as never })],
      ['createAllocator', (v) => f.createAllocator(v as never)],
      ['createAllocator options', (v) => f.createAllocator({ name: 'Cuda' }, v as never)],
      ['createSharedAllocator flags', (v) => f.createSharedAllocator({ name: 'Cuda' }, undefined, v as never)],
      ['releaseAllocator', (v) => f.releaseAllocator(v as never)],
      ['deviceStats', (v) => f.deviceStats(v as never)],
      ['createStream', (v) => f.createStream(v as never)],
      ['alloc', (v) => a.alloc(v as never)],
      ['free', (v) => a.free(v as never)],
      ['reserve', (v) => a.reserve(v as never)],
      ['allocOnStream', (v) => a.allocOnStream!(1, v as never)],
      ['withStream', (v) => a.withStream(v as never)],
      ['write', (v) => a.write(0n, v as never)],
      ['read', (v) => a.read(0n, v as never)],
      ['fill', (v) => a.fill(0n, v as never, 1)],
      ['parseArenaConfig', (v) => parseArenaConfig(v as never)],
      ['envArenaOptions', (v) => envArenaOptions(v as never, 'F')],
      ['envArenaOptions name', (v) => envArenaOptions({}, v as never)],
      ['sessionArenaOptions', (v) => sessionArenaOptions(v as never, 'E')],
    ]
    for (const [name, call] of calls) {
      const value = make()
      let thrown: unknown
      try {
        call(value)
      } catch (e) {
        thrown = e
      }
      if (thrown === undefined) continue // some values are valid for some calls (null options)
      t.true(thrown instanceof Error && (ERROR_CODES as readonly string[]).includes((thrown as { code?: string }).code ?? ''), `${name}: ${String(thrown)}`)
      t.true((thrown as Error).message.length < 400, `${name}: message of ${(thrown as Error).message.length} characters`)
    }
  })
}

// Item 13.
test('a detached typed array is ERR_ARENA_INVALID_ARGUMENT', (t) => {
  const a = factory('host').createAllocator({ name: 'Cuda' })
  const p = a.alloc(16)!
  const view = new Uint8Array(16)
  structuredClone(view.buffer, { transfer: [view.buffer] })
  throwsCode(t, () => a.write(p, view), 'ERR_ARENA_INVALID_ARGUMENT', 'write')
  throwsCode(t, () => a.read(p, view), 'ERR_ARENA_INVALID_ARGUMENT', 'read')
})

// Item 17.
test('allocOnStream with a stream of another device or backend is ERR_ARENA_INVALID_ARGUMENT', (t) => {
  const f = factory('virtual', 2)
  const a0 = f.createAllocator({ name: 'Cuda', deviceId: 0 })
  const other = f.createStream(1)
  const before = snapshot(a0)
  throwsCode(t, () => a0.allocOnStream!(256, other), 'ERR_ARENA_INVALID_ARGUMENT', 'another device, number size')
  throwsCode(t, () => a0.allocOnStream!(256n, other), 'ERR_ARENA_INVALID_ARGUMENT', 'another device, bigint size')
  const host = factory('host').createStream(0)
  throwsCode(t, () => a0.allocOnStream!(256, host), 'ERR_ARENA_INVALID_ARGUMENT', 'another backend')
  t.deepEqual(snapshot(a0), before)
  const sameBackendOtherFactory = factory('virtual', 2).createStream(0)
  t.truthy(a0.allocOnStream!(256, sameBackendOtherFactory), 'a stream of the same backend and device works')
})

// Item 17.
test('devices as a list is capped like the count form', (t) => {
  const name = `capped-${process.pid}`
  throwsCode(t, () => new AllocatorFactory({ name, backend: 'virtual', devices: Array.from({ length: 65 }, () => ({})) }), 'ERR_ARENA_INVALID_ARGUMENT')
  throwsCode(t, () => new AllocatorFactory({ name, backend: 'virtual', devices: new Array(1_000_000).fill({}) }), 'ERR_ARENA_INVALID_ARGUMENT')
  t.is(new AllocatorFactory({ name, backend: 'virtual', devices: Array.from({ length: 64 }, () => ({})) }).deviceCount, 64)
})

// Item 17.
test('a factory name taken by another backend is refused in plain words', (t) => {
  const name = `taken-${process.pid}`
  const keep = new AllocatorFactory({ name, backend: 'host', devices: [{ totalMemory: 1n << 30n }] })
  const err = t.throws(() => new AllocatorFactory({ name, backend: 'virtual' })) as Error & { code?: string }
  t.is(err.code, 'ERR_ARENA_INVALID_ARGUMENT')
  t.notRegex(err.message, /DeviceLimits|\{|\}/)
  t.regex(err.message, /host backend/)
  t.is(keep.backend, 'host')
})

test('unknown factory and info options are refused naming them', (t) => {
  throwsCode(t, () => new AllocatorFactory({ backnd: 'host' } as never), 'ERR_ARENA_INVALID_ARGUMENT')
  throwsCode(t, () => factory('virtual').createAllocator({ name: 'Cuda', device: 1 } as never), 'ERR_ARENA_INVALID_ARGUMENT')
})

test('a stream view of a released allocator throws like the allocator', (t) => {
  const f = factory('virtual')
  const a: OrtAllocator = f.createAllocator({ name: 'Cuda' })
  const v = a.withStream(f.createStream())
  f.releaseAllocator(v)
  throwsCode(t, () => v.alloc(256), 'ERR_ARENA_RELEASED')
  throwsCode(t, () => a.alloc(256), 'ERR_ARENA_RELEASED')
})
