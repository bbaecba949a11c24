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

const U64_END = 2n ** 64n

function isSafeSize(size: unknown): size is number {
  return typeof size === 'number' && Number.isSafeInteger(size) && size >= 0
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
        if (!isSafeSize(size)) return native.allocOnStream(toSize(size), s)
        scratchF64[0] = this.#handle
        scratchF64[1] = size
        scratchF64[3] = s.handle()
        fastAllocOnStream()
        const p = scratchU64[2]
        return p === 0n ? null : p
      }
      this.resetChunksUsingStream = (stream) => native.resetChunksUsingStream(nativeStream(stream))
    }
    if (native.canShrink()) this.shrink = () => native.shrink()
  }

  alloc(size: Size): bigint | null {
    // Numbers take the fast path; bigints (and anything malformed) the checked one.
    if (!isSafeSize(size)) return this.native.allocBig(toSize(size))
    scratchF64[0] = this.#handle
    scratchF64[1] = size
    fastAlloc()
    const p = scratchU64[2]
    return p === 0n ? null : p
  }
  free(p: bigint | null): void {
    // free(null) and free(0n) are no-ops, but still throw on a released handle.
    const addr = p === null ? 0n : toAddr(p)
    if (addr < 0n || addr >= U64_END) return this.native.free(addr)
    scratchF64[0] = this.#handle
    scratchU64[1] = addr
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
    const view = Object.create(this) as AllocatorImpl
    view.alloc = (size: Size): bigint | null => this.allocOnStream!(size, stream)
    return view
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
