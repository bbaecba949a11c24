/** `AllocatorFactory` over the native factory handle. */
import { native, type Native } from './native'
import { toArenaPairs } from './config'
import { invalidArgument } from './errors'
import { AllocatorImpl } from './allocator-impl'
import { StreamImpl } from './stream-impl'
import type { AllocatorOptions, Backend, DeviceStats, FactoryOptions, Logger, MemoryInfo, OrtAllocator, Stream } from './types'

const BACKENDS: readonly Backend[] = ['cuda', 'host', 'virtual']

const defaultLogger: Logger = (level, message) => {
  if (level === 'warning') console.warn(`cuda-arena: ${message}`)
}

/**
 * Per-device, ref-counting allocator factory (ONNX Runtime's CUDA plugin design).
 * `createAllocator` returns the shared arena of a device, counting users;
 * `releaseAllocator` counts down and destroys it at zero, handing all memory back.
 */
export class AllocatorFactory {
  readonly #native: Native.NativeFactory
  readonly #logger: Logger

  constructor(options: FactoryOptions = {}) {
    const { name = 'default', backend = 'cuda', devices = 1, logger = defaultLogger } = options
    if (typeof name !== 'string' || name === '') throw invalidArgument('name', name, 'must be a non-empty string')
    if (!BACKENDS.includes(backend)) throw invalidArgument('backend', backend, "must be 'cuda', 'host' or 'virtual'")
    if (typeof logger !== 'function') throw invalidArgument('logger', logger, 'must be a function')
    let limits: Native.JsDeviceLimits[]
    if (typeof devices === 'number') {
      if (!Number.isInteger(devices) || devices < 1 || devices > 64) throw invalidArgument('devices', devices, 'must be an integer 1 … 64')
      limits = Array.from({ length: devices }, () => ({}))
    } else if (Array.isArray(devices) && devices.length > 0) {
      limits = devices.map((d, i) => {
        for (const [k, v] of Object.entries(d ?? {})) {
          if (k !== 'totalMemory' && k !== 'maxAllocation') throw invalidArgument(`devices[${i}].${k}`, v, 'is not a device limit')
          if (typeof v !== 'bigint' || v < 0n) throw invalidArgument(`devices[${i}].${k}`, v, 'must be a non-negative bigint')
        }
        return { totalMemory: d.totalMemory, maxAllocation: d.maxAllocation }
      })
    } else {
      throw invalidArgument('devices', devices, 'must be a count or a non-empty array of device limits')
    }
    this.#native = new native.NativeFactory(name, backend, limits)
    this.#logger = logger
  }

  /** The factory's process-wide name. */
  get name(): string {
    return this.#native.name()
  }

  /** The backend. */
  get backend(): Backend {
    return this.#native.backend() as Backend
  }

  /** Number of devices. */
  get deviceCount(): number {
    return this.#native.deviceCount()
  }

  /** The shared allocator for `info` (created on first use), one more user. */
  createAllocator(info: MemoryInfo, options?: AllocatorOptions): OrtAllocator {
    return this.#create(info, options, false)
  }

  /** With `{ replace: true }`, a new shared allocator with `options` replaces the current one. */
  createSharedAllocator(info: MemoryInfo, options: AllocatorOptions | undefined, flags: { replace: boolean }): OrtAllocator {
    if (typeof flags?.replace !== 'boolean') throw invalidArgument('flags.replace', flags?.replace, 'must be a boolean')
    return this.#create(info, options, flags.replace)
  }

  #create(info: MemoryInfo, options: AllocatorOptions | undefined, replace: boolean): OrtAllocator {
    if (typeof info !== 'object' || info === null) throw invalidArgument('info', info, 'must be a MemoryInfo object')
    const deviceId = info.deviceId ?? 0
    if (!Number.isInteger(deviceId) || deviceId < 0) throw invalidArgument('info.deviceId', deviceId, 'must be a non-negative integer')
    const handle = this.#native.createAllocator(String(info.name), deviceId, String(info.type ?? 'device'), toArenaPairs(options), replace)
    for (const w of this.#native.takeWarnings()) this.#logger('warning', w)
    return new AllocatorImpl(handle)
  }

  /** One user fewer; the last release destroys the allocator. Using `allocator` after throws `ERR_ARENA_RELEASED`. */
  releaseAllocator(allocator: OrtAllocator): void {
    if (!(allocator instanceof AllocatorImpl)) throw invalidArgument('allocator', allocator, 'must come from createAllocator')
    this.#native.releaseAllocator(allocator.native)
  }

  /** Calls that reached the raw allocator of device `deviceId`. */
  deviceStats(deviceId: number): DeviceStats {
    const s = this.#native.deviceStats(deviceId)
    return { ...s, free: s.free ?? undefined, total: s.total ?? undefined }
  }

  /** A stream on device `deviceId`. */
  createStream(deviceId = 0): Stream {
    return new StreamImpl(this.#native.createStream(deviceId))
  }
}
