/** `OrtAllocator` over the native allocator handle: argument checks and conversions only. */
import type { Native } from './native'
import type { AllocatorStats, MemoryInfo, MemoryLog, OrtAllocator, Size, Stream } from './types'
import { invalidArgument } from './errors'
import { nativeStream } from './stream-impl'
import { fastAlloc, fastAllocOnStream, fastFree, scratchF64, scratchU64 } from './fast'

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

function bytes(view: unknown, name: string): Uint8Array {
  if (!ArrayBuffer.isView(view)) throw invalidArgument(name, view, 'must be an ArrayBufferView')
  return new Uint8Array(view.buffer, view.byteOffset, view.byteLength)
}

/** Internal: the concrete allocator. */
export class AllocatorImpl implements OrtAllocator {
  readonly version = 25
  allocOnStream?: (size: Size, stream: Stream) => bigint | null
  shrink?: () => void
  resetChunksUsingStream?: (stream: Stream) => void

  readonly #handle: number

  constructor(readonly native: Native.NativeAllocator) {
    this.#handle = native.handle()
    if (native.isStreamAware()) {
      this.allocOnStream = (size, stream) => {
        const s = nativeStream(stream)
        if (typeof size !== 'number') return native.allocOnStream(toSize(size), s)
        scratchF64[0] = this.#handle
        scratchF64[1] = size
        scratchF64[3] = s.handle()
        fastAllocOnStream()
        return scratchF64[2] === 0 ? null : scratchU64[2]
      }
      this.resetChunksUsingStream = (stream) => native.resetChunksUsingStream(nativeStream(stream))
    }
    if (native.canShrink()) this.shrink = () => native.shrink()
  }

  alloc(size: Size): bigint | null {
    // Numbers take the fast path, which refuses any that is not a non-negative safe integer;
    // bigints (and anything else) the checked one.
    if (typeof size !== 'number') return this.native.allocBig(toSize(size))
    scratchF64[0] = this.#handle
    scratchF64[1] = size
    fastAlloc()
    // Read the word as a double first: 0 means null, and no bigint is made for it.
    return scratchF64[2] === 0 ? null : scratchU64[2]
  }
  free(p: bigint | null): void {
    // free(null) and free(0n) are no-ops, but still throw on a released handle.
    const addr = p === null ? 0n : toAddr(p)
    scratchF64[0] = this.#handle
    // A bigint outside 0 … 2^64−1 wraps when stored: a negative one or one past 2^64 then
    // names no live allocation and the native side refuses it, except a multiple of 2^64,
    // which would wrap to 0 (free of nothing): that one goes the checked way. Reading the
    // word as a double makes no bigint.
    scratchU64[1] = addr
    if (scratchF64[1] === 0 && addr !== 0n) return this.native.free(addr)
    fastFree()
  }
  reserve(size: Size): bigint | null {
    return this.native.reserve(toSize(size))
  }
  info(): Required<MemoryInfo> {
    const [name, deviceId, type] = this.native.info()
    return { name: name as MemoryInfo['name'], deviceId: Number(deviceId), type: type as 'device' | 'readonly' }
  }
  getStats(): AllocatorStats {
    return this.native.stats()
  }
  getStatsRaw(): Record<string, string> {
    return Object.fromEntries(this.native.statsRaw().map(([k, v]) => [k, v]))
  }
  memoryLog(): MemoryLog {
    const log = this.native.memoryLog()
    return {
      ...log,
      regions: log.regions.map((r) => ({ ...r, chunks: r.chunks.map((c) => ({ ...c, stream: c.stream ?? undefined })) })),
    }
  }
  withStream(stream: Stream): OrtAllocator {
    nativeStream(stream)
    if (!this.allocOnStream) throw invalidArgument('stream', stream, 'cannot be used: this allocator is not stream-aware')
    const allocOnStream = this.allocOnStream
    // A proxy rather than a copy, so every other method runs on this allocator itself.
    return new Proxy(this, {
      get(target, prop) {
        if (prop === 'alloc') return (size: Size): bigint | null => allocOnStream(size, stream)
        const v: unknown = Reflect.get(target, prop, target)
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v
      },
    })
  }
  allocatedSize(p: bigint): bigint {
    return this.native.allocatedSize(toAddr(p))
  }
  requestedSize(p: bigint): bigint {
    return this.native.requestedSize(toAddr(p))
  }
  write(p: bigint, data: ArrayBufferView, stream?: Stream): void {
    if (stream !== undefined) nativeStream(stream)
    this.native.write(toAddr(p), bytes(data, 'data'))
  }
  read(p: bigint, out: ArrayBufferView, stream?: Stream): void {
    if (stream !== undefined) nativeStream(stream)
    const target = bytes(out, 'out')
    target.set(this.native.read(toAddr(p), BigInt(target.byteLength)))
  }
  fill(p: bigint, byte: number, length: Size, stream?: Stream): void {
    if (stream !== undefined) nativeStream(stream)
    if (!Number.isInteger(byte) || byte < 0 || byte > 255) throw invalidArgument('byte', byte, 'must be an integer 0 … 255')
    this.native.fill(toAddr(p), byte, toSize(length, 'length'))
  }
}
