/** Allocation traces: generate one, and replay it natively through an allocator. */
import { native } from './native'
import { invalidArgument } from './errors'
import { AllocatorImpl } from './allocator-impl'
import type { OrtAllocator } from './types'

/** One trace operation, as in the JSON-lines trace format. */
export type TraceOp = { op: 'alloc'; id: number; size: number; stream?: number } | { op: 'free'; id: number }

/** What a replay measured. */
export interface ReplayReport {
  ops: number
  /** Largest sum of requested bytes live at once. */
  peakRequested: number
  /** Largest `TotalAllocated` after an allocation (only with `trackPeaks`). */
  peakHeld: number
  failedAllocs: number
  elapsedNs: number
}

/** The mixed benchmark trace: sizes log-uniform in `[minSize, maxSize]`, random lifetimes. */
export function mixedTrace(ops: number, options: { minSize?: number; maxSize?: number; maxLive?: number; seed?: number } = {}): TraceOp[] {
  const { minSize = 256, maxSize = 64 * 2 ** 20, maxLive = 2000, seed = 42 } = options
  return native.mixedTraceOps(ops, minSize, maxSize, maxLive, seed).map((o) =>
    o.op === 'alloc' ? { op: 'alloc', id: o.id, size: o.size!, stream: o.stream ?? 0 } : { op: 'free', id: o.id },
  )
}

/** Replays `trace` through `allocator` in a native loop. */
export function replayTrace(allocator: OrtAllocator, trace: TraceOp[], options: { streams?: number; trackPeaks?: boolean } = {}): ReplayReport {
  if (!(allocator instanceof AllocatorImpl)) throw invalidArgument('allocator', allocator, 'must come from createAllocator')
  return native.replayTrace(allocator.native, trace, options.streams ?? 0, options.trackPeaks ?? false)
}

/** Nanoseconds per alloc+free pair of `size` bytes over `iterations`, in a native loop. */
export function nativePairNs(allocator: OrtAllocator, size: number, iterations: number): number {
  if (!(allocator instanceof AllocatorImpl)) throw invalidArgument('allocator', allocator, 'must come from createAllocator')
  return native.nativePairNs(allocator.native, size, iterations)
}
