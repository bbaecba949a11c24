/** `AllocatorFactory` over the native factory handle. */
import { native, type Native } from './native'
import { toPairLists } from './config'
import { arenaError, describe, ERR_ARENA_INVALID_ARGUMENT, invalidArgument } from './errors'
import { array, bool, fn, instance, int, MAX_U32, MAX_U64, obj, options as optionsArg, optInt, own, ownEntries, wrongThis } from './args'
import { AllocatorImpl } from './allocator-impl'
import { StreamImpl } from './stream-impl'
import type { AllocatorOptions, Backend, DeviceStats, FactoryOptions, Logger, MemoryInfo, OrtAllocator, Stream } from './types'

const BACKENDS: readonly string[] = ['cuda', 'host', 'virtual']
const MEMORY_NAMES: readonly string[] = ['Cuda', 'CudaPinned', 'Cpu']
const ALLOCATOR_TYPES: readonly string[] = ['device', 'readonly']
/** Simulated devices a factory may have, in either form (the native side has the same cap). */
const MAX_DEVICES = 64

const defaultLogger: Logger = (level, message) => {
  if (level === 'warning') console.warn(`cuda-arena: ${message}`)
}

function oneOf(name: string, v: unknown, allowed: readonly string[]): string {
  if (typeof v !== 'string' || !allowed.includes(v)) throw invalidArgument(name, v, `must be ${allowed.map((a) => `'${a}'`).join(', ')}`)
  return v
}

/** One simulated device's limits, own properties only. */
function deviceLimits(i: number, d: unknown): Native.JsDeviceLimits {
  const limits = ownEntries(`devices[${i}]`, obj(`devices[${i}]`, d), ['totalMemory', 'maxAllocation'])
  // No prototype: the native side reads each field by name, and would find one set on
  // Object.prototype when this object has none of its own.
  const out = Object.create(null) as Native.JsDeviceLimits
  for (const [k, v] of limits) {
    if (v === undefined) continue
    if (typeof v !== 'bigint' || v < 0n || v > MAX_U64) throw invalidArgument(`devices[${i}].${k}`, v, 'must be a bigint 0 … 2^64−1')
    out[k as keyof Native.JsDeviceLimits] = v
  }
  return out
}

/**
 * Per-device, ref-counting allocator factory (ONNX Runtime's CUDA plugin design).
 * `createAllocator` returns the shared arena of a device, counting users;
 * `releaseAllocator` counts down and destroys it at zero, handing all memory back.
 */
export class AllocatorFactory {
  readonly #native: Native.NativeFactory
  readonly #logger: Logger

  /** `self` (a method's `this`) as a factory, or a coded error. */
  static #self(self: unknown): AllocatorFactory {
    if (typeof self !== 'object' || self === null || !(#native in self)) throw wrongThis(self, 'an AllocatorFactory')
    return self
  }

  constructor(options: FactoryOptions = {}) {
    const given = optionsArg('options', options)
    ownEntries('options', given, ['name', 'backend', 'devices', 'logger'])
    const name = own(given, 'name') ?? 'default'
    const backend = own(given, 'backend') ?? 'cuda'
    const devices = own(given, 'devices') ?? 1
    const logger = own(given, 'logger') ?? defaultLogger
    if (typeof name !== 'string' || name === '') throw invalidArgument('name', name, 'must be a non-empty string')
    oneOf('backend', backend, BACKENDS)
    fn('logger', logger)
    let limits: Native.JsDeviceLimits[]
    if (typeof devices === 'number') {
      limits = Array.from({ length: int('devices', devices, 1, MAX_DEVICES) }, () => Object.create(null) as Native.JsDeviceLimits)
    } else {
      const list = array('devices', devices, MAX_DEVICES)
      if (list.length === 0) throw invalidArgument('devices', devices, 'must be a count or a non-empty array of device limits')
      limits = list.map((d, i) => deviceLimits(i, d))
    }
    this.#native = new native.NativeFactory(name, backend as string, limits)
    this.#logger = logger as Logger
  }

  /** The factory's process-wide name. */
  get name(): string {
    const self = AllocatorFactory.#self(this)
    return self.#native.name()
  }

  /** The backend. */
  get backend(): Backend {
    const self = AllocatorFactory.#self(this)
    return self.#native.backend() as Backend
  }

  /** Number of devices. */
  get deviceCount(): number {
    const self = AllocatorFactory.#self(this)
    return self.#native.deviceCount()
  }

  /** The shared allocator for `info` (created on first use), one more user. */
  createAllocator(info: MemoryInfo, options?: AllocatorOptions): OrtAllocator {
    const self = AllocatorFactory.#self(this)
    return self.#create(info, options, false)
  }

  /** With `{ replace: true }`, a new shared allocator with `options` replaces the current one. */
  createSharedAllocator(info: MemoryInfo, options: AllocatorOptions | undefined, flags: { replace: boolean }): OrtAllocator {
    const self = AllocatorFactory.#self(this)
    const f = obj('flags', flags)
    ownEntries('flags', f, ['replace'])
    return self.#create(info, options, bool('flags.replace', own(f, 'replace')))
  }

  #create(info: unknown, options: unknown, replace: boolean): OrtAllocator {
    const i = obj('info', info)
    ownEntries('info', i, ['name', 'deviceId', 'type'])
    const name = oneOf('info.name', own(i, 'name'), MEMORY_NAMES)
    const deviceId = optInt('info.deviceId', own(i, 'deviceId'), 0, MAX_U32, 0)
    const type = oneOf('info.type', own(i, 'type') ?? 'device', ALLOCATOR_TYPES)
    const pairs = toPairLists(options)
    const handle = this.#native.createAllocator(name, deviceId, type, pairs?.[0], pairs?.[1], replace)
    const allocator = new AllocatorImpl(handle)
    for (const w of this.#native.takeWarnings()) {
      try {
        this.#logger('warning', w)
      } catch (e) {
        // The call fails and changes nothing: the user it counted goes back.
        this.#native.releaseAllocator(handle)
        throw arenaError(ERR_ARENA_INVALID_ARGUMENT, `logger threw ${describe(e)} while reporting: ${w}`, { cause: e })
      }
    }
    return allocator
  }

  /** One user fewer; the last release destroys the allocator. Using `allocator` after throws `ERR_ARENA_RELEASED`. */
  releaseAllocator(allocator: OrtAllocator): void {
    const self = AllocatorFactory.#self(this)
    self.#native.releaseAllocator(instance('allocator', allocator, AllocatorImpl, 'must come from createAllocator').native)
  }

  /** Calls that reached the raw allocator of device `deviceId`. */
  deviceStats(deviceId: number): DeviceStats {
    const self = AllocatorFactory.#self(this)
    const s = self.#native.deviceStats(int('deviceId', deviceId, 0, MAX_U32))
    return { ...s, free: s.free ?? undefined, total: s.total ?? undefined }
  }

  /** A stream on device `deviceId`. */
  createStream(deviceId: number = 0): Stream {
    const self = AllocatorFactory.#self(this)
    return new StreamImpl(self.#native.createStream(int('deviceId', deviceId, 0, MAX_U32)))
  }
}
