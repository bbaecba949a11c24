/**
 * Arena options: ONNX Runtime's raw `arena.*` string pairs, or a typed camelCase object.
 * Both become the same Rust `ArenaConfig`; the Rust parser validates every value and names
 * the raw key when it rejects one. Only an object's own enumerable properties count, so
 * nothing set on `Object.prototype` reaches a config.
 */
import { native } from './native'
import { invalidArgument, invalidConfig } from './errors'
import { guard } from './args'

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
  /** `arena.max_power_of_two_extend_bytes`: cap on power-of-two growth, 1 … 2^63−1. Default 1 GiB. */
  maxPowerOfTwoExtendBytes?: number | bigint
  /** `arena.max_mem`: bytes the arena may hold; 0 = unlimited. Default unlimited. */
  maxMem?: number | bigint
  /** `arena.use_cuda_mempool`: the memory-pool allocator instead of the arena. Default false. */
  useCudaMempool?: boolean
  /** `arena.cuda_mempool_release_threshold`. Default unset (unlimited). */
  cudaMempoolReleaseThreshold?: number | bigint
  /** `arena.cuda_mempool_bytes_to_keep_on_shrink`. Default 0. */
  cudaMempoolBytesToKeepOnShrink?: number | bigint
  /**
   * `arena.use_virtual_memory`: the device arena lives in one reserved address range and maps
   * pages on demand, unmapping wholly free ones (docs/virtual-memory.md); pinned and CPU arenas
   * ignore it, and a device without virtual-memory management gets the region arena with a
   * warning. Default true (issue 25); `false` gives ONNX Runtime's region arena bit for bit.
   */
  useVirtualMemory?: boolean
  /** `arena.vm_page_size_bytes`: 0 for the backend's granularity (2 MiB on an H100), else a power of two up to 1 GiB that is a multiple of it. Default 0. */
  vmPageSizeBytes?: number | bigint
  /** `arena.vm_reserve_bytes`: address space reserved at a time, at most 2^24 pages; 0 for the device's memory. Default 0. */
  vmReserveBytes?: number | bigint
  /** `arena.vm_unmap_threshold_bytes`: free memory kept mapped; a free past it unmaps wholly free pages (0: all of them). Default unset (no limit). */
  vmUnmapThresholdBytes?: number | bigint
  /** `arena.vm_peak_headroom_percent`: how far mapped memory may exceed the peak in use before free pages are unmapped to map new ones, 0 … 1000. Default 2. */
  vmPeakHeadroomPercent?: number | bigint
  /** `arena.vm_churn_headroom_percent`: when a mapping wants back pages the headroom recently had unmapped, the headroom grows by them instead, up to this percentage of the peak in use, 0 … 1000 (at or below `vmPeakHeadroomPercent`: it never grows, and every chunk is cut to its request). Default 30. */
  vmChurnHeadroomPercent?: number | bigint
  /** `arena.vm_map_unit_bytes`: a run of pages is mapped in mappings (driver allocations) of at most this many bytes, whole pages, at least one; only whole mappings are unmapped, so free pages of a mapping partly in use stay mapped; a part of the arena that a second stream maps pages in maps one page each from then on. 0 … 2^62 (0: one page each). Default 64 MiB. */
  vmMapUnitBytes?: number | bigint
}

/** Raw `arena.*` pairs, exactly as ONNX Runtime takes them. */
export type ArenaOptions = Record<string, string>

/** Each typed field's raw key (the Rust crate has the same table: a test compares them). */
export const TYPED_KEYS: Readonly<Record<keyof ArenaConfig, string>> = {
  extendStrategy: 'arena.extend_strategy',
  initialChunkSizeBytes: 'arena.initial_chunk_size_bytes',
  maxDeadBytesPerChunk: 'arena.max_dead_bytes_per_chunk',
  initialGrowthChunkSizeBytes: 'arena.initial_growth_chunk_size_bytes',
  maxPowerOfTwoExtendBytes: 'arena.max_power_of_two_extend_bytes',
  maxMem: 'arena.max_mem',
  useCudaMempool: 'arena.use_cuda_mempool',
  cudaMempoolReleaseThreshold: 'arena.cuda_mempool_release_threshold',
  cudaMempoolBytesToKeepOnShrink: 'arena.cuda_mempool_bytes_to_keep_on_shrink',
  useVirtualMemory: 'arena.use_virtual_memory',
  vmPageSizeBytes: 'arena.vm_page_size_bytes',
  vmReserveBytes: 'arena.vm_reserve_bytes',
  vmUnmapThresholdBytes: 'arena.vm_unmap_threshold_bytes',
  vmPeakHeadroomPercent: 'arena.vm_peak_headroom_percent',
  vmChurnHeadroomPercent: 'arena.vm_churn_headroom_percent',
  vmMapUnitBytes: 'arena.vm_map_unit_bytes',
}

function isTypedKey(k: string): k is keyof ArenaConfig {
  return Object.prototype.hasOwnProperty.call(TYPED_KEYS, k)
}

/** One typed field's value as the raw key's string. */
function rawValue(field: keyof ArenaConfig, v: unknown): string {
  if (field === 'extendStrategy') {
    if (v === 'nextPowerOfTwo') return '0'
    if (v === 'sameAsRequested') return '1'
    throw invalidArgument('extendStrategy', v, "must be 'nextPowerOfTwo' or 'sameAsRequested'")
  }
  if (field === 'useCudaMempool' || field === 'useVirtualMemory') {
    if (typeof v !== 'boolean') throw invalidArgument(field, v, 'must be a boolean')
    return v ? '1' : '0'
  }
  if (typeof v === 'bigint') return v.toString()
  if (typeof v === 'number') {
    // Whole numbers past 2^53 are not exact as numbers: ask for a bigint rather than guess.
    if (Number.isInteger(v) && !Number.isSafeInteger(v)) {
      throw invalidConfig(`${field} (${TYPED_KEYS[field]}) ${v} is past 2^53 and not exact as a number; give a bigint`)
    }
    // Fractions, negatives and NaN pass as written; the Rust parser rejects them naming the key.
    return String(v)
  }
  throw invalidArgument(field, v, 'must be a number or a bigint')
}

/**
 * Either form → `[keys, values]` of raw pairs (`null` for none). A key with a dot is a raw key
 * (`arena.*`; others are ignored by the parser, as ORT does); a key without one is a typed
 * field, and an unknown typed field is `ERR_ARENA_INVALID_CONFIG` naming the nearest known
 * one. The two forms cannot be mixed in one object.
 */
export function toPairLists(options: unknown): [string[], string[]] | null {
  if (options === undefined || options === null) return null
  if (typeof options !== 'object' || guard('options', () => Array.isArray(options))) {
    throw invalidArgument('options', options, 'must be an object of arena.* strings or a typed ArenaConfig')
  }
  const entries = guard('options', () => Object.entries(options))
  const raw = entries.filter(([k]) => k.includes('.'))
  const typed = entries.filter(([k]) => !k.includes('.'))
  if (raw.length > 0 && typed.length > 0) {
    throw invalidConfig(`options mix raw keys (${raw[0][0]}) and typed fields (${typed[0][0]}); use one form`)
  }
  const keys: string[] = []
  const values: string[] = []
  for (const [k, v] of raw) {
    if (typeof v !== 'string') throw invalidArgument(`options[${JSON.stringify(k)}]`, v, 'must be a string')
    keys.push(k)
    values.push(v)
  }
  for (const [k, v] of typed) {
    if (!isTypedKey(k)) {
      throw invalidConfig(`unknown option ${JSON.stringify(k.slice(0, 80))}; did you mean ${native.nearestConfigKey(k, true)}?`)
    }
    if (v === undefined) continue
    keys.push(TYPED_KEYS[k])
    values.push(rawValue(k, v))
  }
  return [keys, values]
}

/** Either form → raw pairs (`null` for none), with {@link toPairLists}'s rules. */
export function toArenaPairs(options: ArenaOptions | ArenaConfig | undefined | null): ArenaOptions | null {
  const lists = toPairLists(options)
  if (lists === null) return null
  const out: ArenaOptions = {}
  lists[0].forEach((k, i) => {
    Object.defineProperty(out, k, { value: lists[1][i], enumerable: true, writable: true, configurable: true })
  })
  return out
}
