/**
 * Arena options: ONNX Runtime's raw `arena.*` string pairs, or a typed camelCase object.
 * Both become the same Rust `ArenaConfig`; the Rust parser validates every value and names
 * the raw key when it rejects one.
 */
import { invalidArgument } from './errors'

/** How the arena grows. */
export type ExtendStrategy = 'nextPowerOfTwo' | 'sameAsRequested'

/** Typed arena options. Every field is optional; sizes are bytes. */
export interface ArenaConfig {
  /** `arena.extend_strategy`. Default `'nextPowerOfTwo'`. */
  extendStrategy?: ExtendStrategy
  /** `arena.initial_chunk_size_bytes`: first region size, 1 … 2^31−1. Default 1 MiB. */
  initialChunkSizeBytes?: number | bigint
  /** `arena.max_dead_bytes_per_chunk`: split a chunk when the leftover reaches this. Default 128 MiB. */
  maxDeadBytesPerChunk?: number | bigint
  /** `arena.initial_growth_chunk_size_bytes`: next region size after a shrink. Default 2 MiB. */
  initialGrowthChunkSizeBytes?: number | bigint
  /** `arena.max_power_of_two_extend_bytes`: cap on power-of-two growth. Default 1 GiB. */
  maxPowerOfTwoExtendBytes?: number | bigint
  /** `arena.max_mem`: bytes the arena may hold; 0 = unlimited. Default unlimited. */
  maxMem?: number | bigint
  /** `arena.use_cuda_mempool`: the memory-pool allocator instead of the arena. Default false. */
  useCudaMempool?: boolean
  /** `arena.cuda_mempool_release_threshold`. Default unset (unlimited). */
  cudaMempoolReleaseThreshold?: number | bigint
  /** `arena.cuda_mempool_bytes_to_keep_on_shrink`. Default 0. */
  cudaMempoolBytesToKeepOnShrink?: number | bigint
}

/** Raw `arena.*` pairs, exactly as ONNX Runtime takes them. */
export type ArenaOptions = Record<string, string>

const KEYS: Record<keyof ArenaConfig, string> = {
  extendStrategy: 'arena.extend_strategy',
  initialChunkSizeBytes: 'arena.initial_chunk_size_bytes',
  maxDeadBytesPerChunk: 'arena.max_dead_bytes_per_chunk',
  initialGrowthChunkSizeBytes: 'arena.initial_growth_chunk_size_bytes',
  maxPowerOfTwoExtendBytes: 'arena.max_power_of_two_extend_bytes',
  maxMem: 'arena.max_mem',
  useCudaMempool: 'arena.use_cuda_mempool',
  cudaMempoolReleaseThreshold: 'arena.cuda_mempool_release_threshold',
  cudaMempoolBytesToKeepOnShrink: 'arena.cuda_mempool_bytes_to_keep_on_shrink',
}

function isTyped(o: object): o is ArenaConfig {
  return Object.keys(o).every((k) => k in KEYS)
}

/** Either form → raw pairs (`null` for none). Unknown typed keys are an invalid argument. */
export function toArenaPairs(options: ArenaOptions | ArenaConfig | undefined | null): ArenaOptions | null {
  if (options === undefined || options === null) return null
  if (typeof options !== 'object' || Array.isArray(options)) {
    throw invalidArgument('options', options, 'must be an object of arena.* strings or a typed ArenaConfig')
  }
  const keys = Object.keys(options)
  if (keys.length > 0 && !isTyped(options)) {
    const out: ArenaOptions = {}
    for (const [k, v] of Object.entries(options)) {
      if (typeof v !== 'string') throw invalidArgument(`options[${JSON.stringify(k)}]`, v, 'must be a string')
      out[k] = v
    }
    return out
  }
  const typed = options as ArenaConfig
  const out: ArenaOptions = {}
  for (const [field, key] of Object.entries(KEYS) as [keyof ArenaConfig, string][]) {
    const v = typed[field]
    if (v === undefined) continue
    if (field === 'extendStrategy') {
      if (v === 'nextPowerOfTwo') out[key] = '0'
      else if (v === 'sameAsRequested') out[key] = '1'
      else throw invalidArgument('extendStrategy', v, "must be 'nextPowerOfTwo' or 'sameAsRequested'")
    } else if (field === 'useCudaMempool') {
      if (typeof v !== 'boolean') throw invalidArgument('useCudaMempool', v, 'must be a boolean')
      out[key] = v ? '1' : '0'
    } else if (typeof v === 'bigint' || typeof v === 'number') {
      // Passed as written; the Rust parser rejects fractions, negatives and out-of-range values.
      out[key] = typeof v === 'number' && !Number.isInteger(v) ? String(v) : BigInt(v).toString()
    } else {
      throw invalidArgument(field, v, 'must be a number or a bigint')
    }
  }
  return out
}
