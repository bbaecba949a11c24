/** Allocation traces: generate one, and replay it natively through an allocator. */
import { native } from './native'
import { invalidArgument } from './errors'
import { AllocatorImpl } from './allocator-impl'
import { array, bool, guard, instance, int, MAX_U32, MAX_U64, obj, options, optInt, own, ownEntries } from './args'
import type { OrtAllocator } from './types'

/**
 * One trace operation, as in the JSON-lines trace format and as {@link mixedTrace} makes
 * them; `stream` is a trace stream number, 0 for none.
 */
export type TraceOp = { op: 'alloc'; id: number; size: number; stream?: number } | { op: 'reserve'; id: number; size: number } | { op: 'free'; id: number }

/**
 * What {@link replayTrace} takes: a {@link TraceOp}, whose ids and sizes may also be bigints
 * (every id and size is a whole number 0 … 2^64−1; as a number, a safe integer).
 */
export type TraceInput =
  | { op: 'alloc'; id: number | bigint; size: number | bigint; stream?: number }
  | { op: 'reserve'; id: number | bigint; size: number | bigint }
  | { op: 'free'; id: number | bigint }

/** What a replay measured. */
export interface ReplayReport {
  ops: number
  /** Largest sum of requested bytes live at once. */
  peakRequested: number
  /** Largest `TotalAllocated` after an allocation (only with `trackPeaks`). */
  peakHeld: number
  failedAllocs: number
  /** Allocations the trace left live after its last operation (the replay frees them). */
  liveAtEnd: number
  elapsedNs: number
}

/**
 * The most operations {@link mixedTrace} makes and {@link replayTrace} takes: a generated
 * operation takes about 150 bytes of JS heap, so this many fit in Node's default heap.
 */
export const MAX_TRACE_OPS = 10_000_000
/** The most streams {@link replayTrace} creates. */
export const MAX_TRACE_STREAMS = 1024

/** A generated operation, from the native layer. */
type NativeOp = { op: string; id: number; size?: number; stream?: number }

/**
 * The mixed benchmark trace: exactly `ops` operations (0 … {@link MAX_TRACE_OPS}), sizes
 * log-uniform in `[minSize, maxSize]` (default 256 B … 64 MiB), random lifetimes, at most
 * `maxLive` live (default 2000), reproducible from `seed` (default 42). Everything is freed
 * by the end when `ops` is even.
 */
export function mixedTrace(ops: number, opts: { minSize?: number; maxSize?: number; maxLive?: number; seed?: number } = {}): TraceOp[] {
  const count = int('ops', ops, 0, MAX_TRACE_OPS)
  const o = options('options', opts)
  ownEntries('options', o, ['minSize', 'maxSize', 'maxLive', 'seed'])
  const minSize = optInt('options.minSize', own(o, 'minSize'), 1, Number.MAX_SAFE_INTEGER, 256)
  const maxSize = optInt('options.maxSize', own(o, 'maxSize'), minSize, Number.MAX_SAFE_INTEGER, Math.max(minSize, 64 * 2 ** 20))
  const maxLive = optInt('options.maxLive', own(o, 'maxLive'), 1, MAX_U32, 2000)
  const seed = optInt('options.seed', own(o, 'seed'), 0, Number.MAX_SAFE_INTEGER, 42)
  return native.mixedTraceOps(count, minSize, maxSize, maxLive, seed).map((x: NativeOp) =>
    x.op === 'alloc' ? { op: 'alloc', id: x.id, size: x.size ?? 0, stream: x.stream ?? 0 } : { op: 'free', id: x.id },
  )
}

/** A whole number 0 … 2^64−1 given as a safe integer or a bigint, as a bigint. */
function u64(name: string, v: unknown): bigint {
  if (typeof v === 'bigint') {
    if (v < 0n || v > MAX_U64) throw invalidArgument(name, v, 'must be an integer 0 … 2^64-1')
    return v
  }
  return BigInt(int(name, v, 0, Number.MAX_SAFE_INTEGER))
}

/**
 * Replays `trace` through `allocator` in a native loop. Trace stream `k` (1 … `streams`)
 * allocates on the k-th of `streams` new streams (default 0, at most
 * {@link MAX_TRACE_STREAMS}); 0 allocates without a stream. With `trackPeaks` the stats are
 * read after every allocation for `peakHeld`. Every operation is checked before anything is
 * replayed: a bad one is `ERR_ARENA_INVALID_ARGUMENT` naming it (`trace[i].id`, …).
 */
export function replayTrace(allocator: OrtAllocator, trace: readonly TraceInput[], opts: { streams?: number; trackPeaks?: boolean } = {}): ReplayReport {
  const a = instance('allocator', allocator, AllocatorImpl, 'must come from createAllocator')
  const list = array('trace', trace, MAX_TRACE_OPS)
  const o = options('options', opts)
  ownEntries('options', o, ['streams', 'trackPeaks'])
  const streams = optInt('options.streams', own(o, 'streams'), 0, MAX_TRACE_STREAMS, 0)
  const trackPeaks = own(o, 'trackPeaks') === undefined ? false : bool('options.trackPeaks', own(o, 'trackPeaks'))
  // Four numbers per op, [op (0 alloc, 1 free), id, size, stream]: one typed array crosses
  // into the native layer instead of an object per op.
  const packed = guard('trace', () => new BigUint64Array(list.length * 4))
  list.forEach((element, i) => {
    const name = `trace[${i}]`
    const op = obj(name, element)
    ownEntries(name, op, ['op', 'id', 'size', 'stream'])
    const kind = own(op, 'op')
    if (kind !== 'alloc' && kind !== 'free' && kind !== 'reserve') throw invalidArgument(`${name}.op`, kind, "must be 'alloc', 'reserve' or 'free'")
    packed[4 * i] = kind === 'alloc' ? 0n : kind === 'free' ? 1n : 2n
    packed[4 * i + 1] = u64(`${name}.id`, own(op, 'id'))
    const size = own(op, 'size')
    if (kind !== 'free' && size === undefined) throw invalidArgument(`${name}.size`, size, `is needed for ${kind === 'alloc' ? 'an alloc' : 'a reserve'}`)
    packed[4 * i + 2] = size === undefined ? 0n : u64(`${name}.size`, size)
    const stream = own(op, 'stream')
    if (kind === 'reserve' && stream !== undefined) throw invalidArgument(`${name}.stream`, stream, 'is not taken by a reserve (it has no stream)')
    if (stream !== undefined && int(`${name}.stream`, stream, 0, MAX_U32) > streams) {
      throw invalidArgument(`${name}.stream`, stream, `was not given (options.streams is ${streams})`)
    }
    packed[4 * i + 3] = BigInt((stream as number | undefined) ?? 0)
  })
  return native.replayTrace(a.native, packed, streams, trackPeaks)
}

/** Nanoseconds per alloc+free pair of `size` bytes over `iterations`, in a native loop. */
export function nativePairNs(allocator: OrtAllocator, size: number, iterations: number): number {
  const a = instance('allocator', allocator, AllocatorImpl, 'must come from createAllocator')
  return native.nativePairNs(a.native, int('size', size, 0, Number.MAX_SAFE_INTEGER), int('iterations', iterations, 0, MAX_U32))
}
