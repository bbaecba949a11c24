/** `OrtAllocator` over the native allocator handle: argument checks and conversions only. */
import type { Native } from './native'
import type { AllocatorStats, MemoryInfo, MemoryLog, OrtAllocator, RecordingSummary, Size, Stream } from './types'
import { arenaError, ERR_ARENA_RELEASED, invalidArgument } from './errors'
import { bytes, int, MAX_U64, str, wrongThis } from './args'
import { native as binding } from './native'
import { liveStream, nativeStream, streamImpl } from './stream-impl'
import { fast, scratchF64, scratchU32, scratchU64 } from './fast'

/** A size argument → bigint: non-negative safe integers and bigints only. */
export function toSize(size: unknown, name = 'size'): bigint {
  if (typeof size === 'bigint') return size
  if (typeof size === 'number' && Number.isSafeInteger(size) && size >= 0) return BigInt(size)
  throw invalidArgument(name, size, 'must be a non-negative safe integer or a bigint')
}

function toAddr(p: unknown): bigint {
  if (typeof p !== 'bigint') throw invalidArgument('pointer', p, 'must be a bigint')
  return p
}

/** The result word of a fast call: `null` for 0, else the address (a bigint is made only then). */
function result(): bigint | null {
  return scratchU32[4] === 0 && scratchU32[5] === 0 ? null : scratchU64[2]
}

/** Internal: the concrete allocator. */
export class AllocatorImpl implements OrtAllocator {
  readonly version = 25
  allocOnStream?: (size: Size, stream: Stream) => bigint | null
  shrink?: () => void
  resetChunksUsingStream?: (stream: Stream) => void

  /** The native handle's number: it names this user only, and nothing once released. */
  readonly #handle: number

  /** Whether `v` is an allocator of this copy of the package (a proxy or a look-alike is not). */
  static #is(v: unknown): v is AllocatorImpl {
    return typeof v === 'object' && v !== null && #handle in v
  }

  /** `self` (a method's `this`) as an allocator, or a coded error. */
  static #self(self: unknown): AllocatorImpl {
    if (!AllocatorImpl.#is(self)) throw wrongThis(self, 'an allocator from createAllocator')
    return self
  }

  constructor(readonly native: Native.NativeAllocator) {
    this.#handle = native.handle()
    if (native.isStreamAware()) {
      this.allocOnStream = (size, stream) => {
        const s = streamImpl(stream)
        if (typeof size !== 'number' || fast === undefined) return native.allocOnStream(toSize(size), s.native)
        // The native side refuses any number that is not a non-negative safe integer.
        scratchF64[0] = this.#handle
        scratchF64[1] = size
        scratchF64[3] = s.handle
        fast.allocOnStream()
        return result()
      }
      this.resetChunksUsingStream = (stream) => native.resetChunksUsingStream(nativeStream(stream))
    }
    if (native.canShrink()) this.shrink = () => native.shrink()
  }

  alloc(size: Size): bigint | null {
    const self = AllocatorImpl.#self(this)
    // Numbers take the fast path, which refuses any that is not a non-negative safe integer;
    // bigints (and anything else) the checked one.
    if (typeof size !== 'number' || fast === undefined) return self.native.allocBig(toSize(size))
    scratchF64[0] = self.#handle
    scratchF64[1] = size
    fast.alloc()
    return result()
  }
  free(p: bigint | null): void {
    const self = AllocatorImpl.#self(this)
    // free(null) and free(0n) are no-ops, but still throw on a released handle.
    const addr = p === null ? 0n : toAddr(p)
    // Only 0 … 2^64−1 goes through the 64-bit word (a wider bigint would wrap onto a live
    // address); the checked path refuses the rest.
    if (addr < 0n || addr > MAX_U64 || fast === undefined) return self.native.free(addr)
    scratchF64[0] = self.#handle
    scratchU64[1] = addr
    fast.free()
  }
  reserve(size: Size): bigint | null {
    const self = AllocatorImpl.#self(this)
    return self.native.reserve(toSize(size))
  }
  info(): Required<MemoryInfo> {
    const self = AllocatorImpl.#self(this)
    const [name, deviceId, type] = self.native.info()
    return { name: name as MemoryInfo['name'], deviceId: Number(deviceId), type: type as 'device' | 'readonly' }
  }
  getStats(): AllocatorStats {
    const self = AllocatorImpl.#self(this)
    return self.native.stats()
  }
  getStatsRaw(): Record<string, string> {
    const self = AllocatorImpl.#self(this)
    return Object.fromEntries(self.native.statsRaw().map(([k, v]) => [k, v]))
  }
  memoryLog(): MemoryLog {
    const self = AllocatorImpl.#self(this)
    const log = self.native.memoryLog()
    return {
      ...log,
      regions: log.regions.map((r) => ({ ...r, chunks: r.chunks.map((c) => ({ ...c, stream: c.stream ?? undefined })) })),
    }
  }
  withStream(stream: Stream): OrtAllocator {
    const self = AllocatorImpl.#self(this)
    // A view of a released allocator would be a use of it: refuse it here, like every method.
    if (self.native.isReleased()) throw arenaError(ERR_ARENA_RELEASED, 'the allocator was used after it was released')
    liveStream(stream)
    if (!self.allocOnStream) throw invalidArgument('stream', stream, 'cannot be used: this allocator is not stream-aware')
    const allocOnStream = self.allocOnStream
    // A proxy rather than a copy, so every other method runs on this allocator itself.
    return new Proxy(self, {
      get(target, prop) {
        if (prop === 'alloc') return (size: Size): bigint | null => allocOnStream(size, stream)
        const v: unknown = Reflect.get(target, prop, target)
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v
      },
    })
  }
  allocatedSize(p: bigint): bigint {
    const self = AllocatorImpl.#self(this)
    return self.native.allocatedSize(toAddr(p))
  }
  requestedSize(p: bigint): bigint {
    const self = AllocatorImpl.#self(this)
    return self.native.requestedSize(toAddr(p))
  }
  write(p: bigint, data: ArrayBufferView, stream?: Stream): void {
    const self = AllocatorImpl.#self(this)
    if (stream !== undefined) liveStream(stream)
    self.native.write(toAddr(p), bytes('data', data))
  }
  read(p: bigint, out: ArrayBufferView, stream?: Stream): void {
    const self = AllocatorImpl.#self(this)
    if (stream !== undefined) liveStream(stream)
    const target = bytes('out', out)
    // The native side writes into the caller's memory: nothing else may touch it meanwhile.
    if (typeof SharedArrayBuffer !== 'undefined' && target.buffer instanceof SharedArrayBuffer) {
      throw invalidArgument('out', out, 'must not be a view of a SharedArrayBuffer')
    }
    self.native.read(toAddr(p), target)
  }
  fill(p: bigint, byte: number, length: Size, stream?: Stream): void {
    const self = AllocatorImpl.#self(this)
    if (stream !== undefined) liveStream(stream)
    self.native.fill(toAddr(p), int('byte', byte, 0, 255), toSize(length, 'length'))
  }
  startRecording(path: string): void {
    const self = AllocatorImpl.#self(this)
    binding.startRecording(self.native, str('path', path))
  }
  stopRecording(): RecordingSummary {
    const self = AllocatorImpl.#self(this)
    const { error, ...summary } = binding.stopRecording(self.native)
    return error === undefined || error === null ? summary : { ...summary, error }
  }
}
