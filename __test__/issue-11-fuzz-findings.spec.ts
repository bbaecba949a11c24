// Issue 11: what the JS API fuzzer (__test__/fuzz/, scripts/fuzz-api.ts) found, each minimized
// to the behaviour it broke. The seed and operation that found it are in each comment.
import test from 'ava'
import { AllocatorFactory, isArenaError } from '../ts/index'
import { snapshot, factory, throwsCode } from './helpers'

// Found by seed 1 (host), operation #612: a view made from a released allocator.
test('withStream on a released allocator is ERR_ARENA_RELEASED and makes no view', (t) => {
  const f = factory('virtual')
  const a = f.createAllocator({ name: 'Cuda' })
  const keep = f.createAllocator({ name: 'Cuda' })
  const s = f.createStream()
  f.releaseAllocator(a)
  const before = snapshot(keep)
  throwsCode(t, () => a.withStream(s), 'ERR_ARENA_RELEASED')
  t.deepEqual(snapshot(keep), before)
})

// Found by seed 5 (host), operation #30: the length of a range is no allocation size.
test('fill with a length of 2^64 or more is ERR_ARENA_UNKNOWN_POINTER, as any range past the end', (t) => {
  const a = factory('host').createAllocator({ name: 'Cuda' })
  const p = a.alloc(100)!
  const before = snapshot(a)
  throwsCode(t, () => a.fill(p, 1, 2n ** 64n), 'ERR_ARENA_UNKNOWN_POINTER', '2^64')
  throwsCode(t, () => a.fill(p, 1, 2n ** 64n + 1n), 'ERR_ARENA_UNKNOWN_POINTER', '2^64 + 1')
  throwsCode(t, () => a.fill(p, 1, 2n ** 63n), 'ERR_ARENA_UNKNOWN_POINTER', '2^63, for comparison')
  t.deepEqual(snapshot(a), before)
})

/** A proxy whose every trap throws: `instanceof` and property reads on it throw. */
function hostile(): object {
  const boom = (): never => {
    throw new Error('a trap of the hostile proxy')
  }
  return new Proxy({}, { get: boom, getPrototypeOf: boom, has: boom, ownKeys: boom, getOwnPropertyDescriptor: boom })
}

// Found by seed 7 (host), operation #698: isArenaError(<throwing proxy>) threw; the argument
// checks call it on whatever a caller's getter throws.
test('a getter that throws a proxy whose traps throw gives ERR_ARENA_INVALID_ARGUMENT, not the trap\'s error', (t) => {
  const f = factory('virtual')
  const options = { get maxMem(): never {
    throw hostile()
  } }
  const info = { get name(): never {
    throw hostile()
  } }
  throwsCode(t, () => f.createAllocator({ name: 'Cuda' }, options as never), 'ERR_ARENA_INVALID_ARGUMENT', 'options')
  throwsCode(t, () => f.createAllocator(info as never), 'ERR_ARENA_INVALID_ARGUMENT', 'info')
  t.is(f.deviceStats(0).rawAllocs, 0n)
})

test('isArenaError is false for a proxy whose traps throw, and does not throw', (t) => {
  t.false(isArenaError(hostile()))
})

// Found by seed 11 (host and virtual), operation #373: a factory made while
// Object.prototype.maxAllocation was set got devices whose largest allocation was 1 byte.
test.serial('device limits inherited from Object.prototype do not reach a factory\'s devices', (t) => {
  const proto = Object.prototype as Record<string, unknown>
  const name = `limits-polluted-${process.pid}`
  let f: AllocatorFactory
  try {
    proto.maxAllocation = 1n
    proto.totalMemory = 1n
    f = new AllocatorFactory({ name, backend: 'virtual', devices: [{ totalMemory: 1n << 26n }, {}] })
  } finally {
    delete proto.maxAllocation
    delete proto.totalMemory
  }
  t.is(f.deviceStats(0).total, 1n << 26n)
  t.is(f.deviceStats(1).total, 80n << 30n, 'the default, not the inherited 1')
  const a = f.createAllocator({ name: 'Cuda' })
  t.truthy(a.alloc(453), 'no 1-byte allocation limit')
})

// Found by worker seed 24002 (virtual): the same with a device count.
test.serial('device limits inherited from Object.prototype do not reach devices given as a count', (t) => {
  const proto = Object.prototype as Record<string, unknown>
  let f: AllocatorFactory
  try {
    proto.maxAllocation = 1n
    f = new AllocatorFactory({ name: `count-polluted-${process.pid}`, backend: 'virtual', devices: 2 })
  } finally {
    delete proto.maxAllocation
  }
  t.truthy(f.createAllocator({ name: 'Cuda', deviceId: 1 }).alloc(453), 'no 1-byte allocation limit')
})

// Found by the fuzzer's wrong-`this` operation: a method taken off its object (passed as a
// callback, destructured) threw an uncoded TypeError from inside the library.
test('a method called on anything but its own object throws ERR_ARENA_INVALID_ARGUMENT', (t) => {
  const f = factory('virtual')
  const a = f.createAllocator({ name: 'Cuda' })
  const s = f.createStream()
  const p = a.alloc(256)!
  const before = snapshot(a)
  const calls: [string, Function, unknown[], unknown][] = [
    ['alloc', a.alloc, [100], s],
    ['free', a.free, [p], s],
    ['getStats', a.getStats, [], s],
    ['withStream', a.withStream, [s], s],
    ['write', a.write, [p, new Uint8Array(1)], s],
    ['createAllocator', f.createAllocator, [{ name: 'Cuda' }], a],
    ['deviceStats', f.deviceStats, [0], a],
    ['releaseAllocator', f.releaseAllocator, [a], a],
    ['record', s.record, [], a],
    ['release', s.release, [], a],
  ]
  for (const [what, method, args, other] of calls) {
    for (const [on, self] of [['undefined', undefined], ['{}', {}], ['an object of another class', other]] as const) {
      throwsCode(t, () => (method as (...x: unknown[]) => unknown).apply(self, args), 'ERR_ARENA_INVALID_ARGUMENT', `${what} on ${on}`)
    }
  }
  t.deepEqual(snapshot(a), before, 'nothing was allocated or freed')
  t.truthy(s.record(), 'the stream was not released')
})
