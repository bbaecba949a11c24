/** The shapes of the public API: DESIGN.md's "TypeScript API". */
import type { ArenaConfig, ArenaOptions } from './config'

/** Which memory an allocator serves. */
export interface MemoryInfo {
  /** `Cuda`: device memory; `CudaPinned`: pinned host memory; `Cpu`: host memory. */
  name: 'Cuda' | 'CudaPinned' | 'Cpu'
  /** Device ordinal. Default 0. */
  deviceId?: number
  /** `device`: the shared arena; `readonly`: a plain allocator for initializers. Default `device`. */
  type?: 'device' | 'readonly'
}

/** A GPU as `devices()` reports it. */
export interface DeviceInfo {
  ordinal: number
  name: string
  totalMemory: bigint
  freeMemory: bigint
  pciBusId: string
  uuid: string
  computeCapability: [number, number]
  memoryPoolsSupported: boolean
}

/** Allocator counters, ONNX Runtime's `GetStats` with bigint values. */
export interface AllocatorStats {
  /** `max_mem`, or -1n when unlimited (0n for a memory pool). */
  limit: bigint
  inUse: bigint
  requestedInUse: bigint
  totalAllocated: bigint
  reservedBytes: bigint
  maxInUse: bigint
  numAllocs: bigint
  numReserves: bigint
  numArenaExtensions: bigint
  numArenaShrinkages: bigint
  maxAllocSize: bigint
}

/** Calls that reached a device's raw (driver) allocator, from every allocator of the device. */
export interface DeviceStats {
  /** Driver allocations: a region, a reserve, or a mapping of pages. */
  rawAllocs: bigint
  /** Driver frees: a region or reserve given back, or an unmapping. */
  rawFrees: bigint
  /** Driver requests refused. */
  rawFailures: bigint
  /** Bytes held from the driver now. */
  rawBytesOutstanding: bigint
  /**
   * Times the allocators of this device waited for all of its queued work (a synchronization
   * before unmapping pages that work might still use, or to settle what streams freed): each
   * stalls the calling thread until the whole GPU is idle. On `host` and `virtual`, the calls
   * that would wait on a GPU.
   */
  deviceWaits: bigint
  /** Times they waited for one stream's work up to an event, so that what it freed could serve another. */
  streamWaits: bigint
  /** The device's free bytes, where known. */
  free?: bigint
  /** The device's total bytes, where known. */
  total?: bigint
}

/** One chunk of a region in a {@link MemoryLog}. */
export interface ChunkLog {
  addr: bigint
  size: bigint
  requestedSize: bigint
  inUse: boolean
  /** Id of the stream that last took the chunk. */
  stream?: bigint
  syncId: bigint
}

/** A structured snapshot of an allocator's memory. */
export interface MemoryLog {
  regions: { id: bigint; base: bigint; size: bigint; chunks: ChunkLog[] }[]
  reserves: { addr: bigint; size: bigint }[]
  bins: { binSize: bigint; chunks: bigint; inUseChunks: bigint; bytes: bigint; inUseBytes: bigint; requestedBytes: bigint }[]
  stats: AllocatorStats
}

/** A point recorded on a stream; another stream can wait for it. */
export interface StreamEvent {
  readonly syncId: bigint
}

/** A stream: a CUstream on `cuda`, a logical stream on `host` and `virtual`. */
export interface Stream {
  readonly deviceId: number
  /** Unique id (what {@link ChunkLog.stream} shows). */
  readonly id: bigint
  /** Records an event and bumps this stream's sync id. */
  record(): StreamEvent
  /** Makes this stream wait for `event` (and remember its producer's sync id). */
  wait(event: StreamEvent): void
  synchronize(): void
  /** Releases the stream; any later use throws `ERR_ARENA_RELEASED`. */
  release(): void
}

/** A size in bytes: a non-negative safe integer or a bigint. */
export type Size = number | bigint

/** ONNX Runtime's `OrtAllocator`, with bigint addresses. */
export interface OrtAllocator {
  /** 25: the OrtAllocator shape with `Shrink`. */
  readonly version: number
  alloc(size: Size): bigint | null
  free(p: bigint | null): void
  reserve(size: Size): bigint | null
  /** Present on stream-aware allocators (the device arena, the memory pool). */
  allocOnStream?(size: Size, stream: Stream): bigint | null
  info(): Required<MemoryInfo>
  getStats(): AllocatorStats
  /** ONNX Runtime's exact key names, decimal values. */
  getStatsRaw(): Record<string, string>
  shrink?(): void
  resetChunksUsingStream?(stream: Stream): void
  memoryLog(): MemoryLog
  /** A view of this allocator whose `alloc` allocates on `stream`. */
  withStream(stream: Stream): OrtAllocator
  allocatedSize(p: bigint): bigint
  requestedSize(p: bigint): bigint
  write(p: bigint, data: ArrayBufferView, stream?: Stream): void
  read(p: bigint, out: ArrayBufferView, stream?: Stream): void
  fill(p: bigint, byte: number, length: Size, stream?: Stream): void
  /**
   * Starts recording this allocator's traffic — every user's: other handles, workers, C,
   * ONNX Runtime — to a new trace file at `path` (replaced if it exists), in the format
   * `cuda-arena replay` reads. A recording already on, or a path that cannot be created, is
   * `ERR_ARENA_INVALID_ARGUMENT`. See docs/recording.md.
   */
  startRecording(path: string): void
  /** Stops the recording once everything recorded is written, and says what it did. */
  stopRecording(): RecordingSummary
}

/** What a trace recording did: {@link OrtAllocator.stopRecording}. */
export interface RecordingSummary {
  /** The trace file. */
  path: string
  /** Operations written (whole lines of the file). */
  ops: bigint
  bytes: bigint
  /** Allocations and reserves that failed (they changed nothing, and are not in the trace). */
  failedAllocs: bigint
  /** Frees of allocations made before the recording started (not in the trace). */
  untrackedFrees: bigint
  /** Allocations of the recording still live when it stopped (a replay's `liveAtEnd`). */
  liveAtStop: bigint
  /** Largest sum of requested bytes live at once: a replay of the file reports the same peak requested. */
  peakRequested: bigint
  /** Why the recording stopped early (a write error, too many streams), if it did. */
  error?: string
}

/** Where a factory's memory comes from. */
export type Backend = 'cuda' | 'host' | 'virtual'

/** Limits of one simulated device (host and virtual backends). */
export interface SimulatedDevice {
  /** Raw requests fail once outstanding bytes would pass this. */
  totalMemory?: bigint
  /** Any single larger raw request fails. */
  maxAllocation?: bigint
}

/** Receives warnings (differing options, fallbacks) and information. */
export type Logger = (level: 'warning' | 'info', message: string) => void

/** `new AllocatorFactory(options)`. */
export interface FactoryOptions {
  /** Factories are process-wide by name: workers naming the same factory share arenas. Default `'default'`. */
  name?: string
  /** Default `'cuda'`. */
  backend?: Backend
  /** Simulated devices: a count, or one limits object per device (host/virtual only). Default 1. */
  devices?: number | SimulatedDevice[]
  /** Default: `console.warn` for warnings. */
  logger?: Logger
}

/** Options for a create call: raw `arena.*` pairs or a typed config. */
export type AllocatorOptions = ArenaOptions | ArenaConfig
