/**
 * What an options argument must give, from docs/config.md's key table and ts/config.ts's
 * documented rules, written independently of the parser (all but the names of the typed fields,
 * which are the package's own table): the raw pairs it stands for, or the error code it must
 * throw.
 */

import { TYPED_KEYS } from '../../ts/config'

const INT32_MAX = 2n ** 31n - 1n
const U64_MAX = 2n ** 64n - 1n

/** Each raw key's accepted range. */
export const RAW_RANGES: Readonly<Record<string, readonly [bigint, bigint]>> = {
  'arena.extend_strategy': [0n, 1n],
  'arena.initial_chunk_size_bytes': [1n, INT32_MAX],
  'arena.max_dead_bytes_per_chunk': [1n, INT32_MAX],
  'arena.initial_growth_chunk_size_bytes': [1n, INT32_MAX],
  'arena.max_power_of_two_extend_bytes': [1n, 2n ** 63n - 1n],
  'arena.max_mem': [0n, U64_MAX],
  'arena.use_cuda_mempool': [0n, 1n],
  'arena.cuda_mempool_release_threshold': [0n, U64_MAX],
  'arena.cuda_mempool_bytes_to_keep_on_shrink': [0n, U64_MAX],
  'arena.use_virtual_memory': [0n, 1n],
  // 0, or a power of two in this range (POWER_OF_TWO_KEYS).
  'arena.vm_page_size_bytes': [256n, 2n ** 30n],
  'arena.vm_reserve_bytes': [0n, 2n ** 62n],
  'arena.vm_unmap_threshold_bytes': [0n, U64_MAX],
  'arena.vm_peak_headroom_percent': [0n, 1000n],
  'arena.vm_churn_headroom_percent': [0n, 1000n],
  'arena.vm_map_unit_bytes': [0n, 2n ** 62n],
}

/** Keys whose value is 0 or a power of two within RAW_RANGES. */
export const POWER_OF_TWO_KEYS: ReadonlySet<string> = new Set(['arena.vm_page_size_bytes'])

/** Typed field → raw key: the package's own table (the Rust crate's is compared with it). */
export const TYPED: Readonly<Record<string, string>> = TYPED_KEYS

export type ConfigExpect =
  /** No options (`undefined` or `null`). */
  | { none: true }
  /** These raw pairs (in order); `valid`: whether the parser must accept them. */
  | { pairs: [string, string][]; valid: boolean }
  | { code: string }

const own = (o: object, k: string): boolean => Object.prototype.hasOwnProperty.call(o, k)

/** Whether a raw value is accepted for `key` (an `arena.*` key); keys outside `arena.` are ignored. */
export function rawValueValid(key: string, value: string): boolean {
  if (!key.startsWith('arena.')) return true
  if (!own(RAW_RANGES, key)) return false
  if (!/^[0-9]+$/.test(value)) return false
  const v = BigInt(value)
  const [lo, hi] = RAW_RANGES[key]
  if (POWER_OF_TWO_KEYS.has(key)) return v === 0n || (v >= lo && v <= hi && (v & (v - 1n)) === 0n)
  return v >= lo && v <= hi
}

/**
 * What `options` stands for. Raw entries (keys with a dot) are read first, then typed ones;
 * the first bad entry decides the code; the two forms cannot be mixed.
 */
export function expectConfig(options: unknown): ConfigExpect {
  if (options === undefined || options === null) return { none: true }
  let entries: [string, unknown][]
  try {
    if (typeof options !== 'object' || Array.isArray(options)) return { code: 'ERR_ARENA_INVALID_ARGUMENT' }
    entries = Object.entries(options)
  } catch {
    return { code: 'ERR_ARENA_INVALID_ARGUMENT' }
  }
  const raw = entries.filter(([k]) => k.includes('.'))
  const typed = entries.filter(([k]) => !k.includes('.'))
  if (raw.length > 0 && typed.length > 0) return { code: 'ERR_ARENA_INVALID_CONFIG' }
  const pairs: [string, string][] = []
  for (const [k, v] of raw) {
    if (typeof v !== 'string') return { code: 'ERR_ARENA_INVALID_ARGUMENT' }
    pairs.push([k, v])
  }
  for (const [k, v] of typed) {
    if (!own(TYPED, k)) return { code: 'ERR_ARENA_INVALID_CONFIG' }
    if (v === undefined) continue
    const key = TYPED[k]
    if (k === 'extendStrategy') {
      if (v === 'nextPowerOfTwo') pairs.push([key, '0'])
      else if (v === 'sameAsRequested') pairs.push([key, '1'])
      else return { code: 'ERR_ARENA_INVALID_ARGUMENT' }
    } else if (k === 'useCudaMempool' || k === 'useVirtualMemory') {
      if (typeof v !== 'boolean') return { code: 'ERR_ARENA_INVALID_ARGUMENT' }
      pairs.push([key, v ? '1' : '0'])
    } else if (typeof v === 'bigint') {
      pairs.push([key, v.toString()])
    } else if (typeof v === 'number') {
      if (Number.isInteger(v) && !Number.isSafeInteger(v)) return { code: 'ERR_ARENA_INVALID_CONFIG' }
      pairs.push([key, String(v)])
    } else {
      return { code: 'ERR_ARENA_INVALID_ARGUMENT' }
    }
  }
  return { pairs, valid: pairs.every(([k, v]) => rawValueValid(k, v)) }
}

/**
 * The full config `pairs` parse to, on top of `defaults`: `max_power_of_two_extend_bytes`
 * rounded up to a multiple of 256 (and given back at most as 2^63−1, the largest value the
 * key accepts); a `max_mem` of 2^64−1 is unlimited, which reads back as 0.
 */
export function expectParsed(pairs: [string, string][], defaults: Record<string, string>): Record<string, string> {
  const out = { ...defaults }
  for (const [k, v] of pairs) {
    if (!k.startsWith('arena.')) continue
    let n = BigInt(v)
    if (k === 'arena.max_power_of_two_extend_bytes') {
      n = (n + 255n) & ~255n
      if (n > 2n ** 63n - 1n) n = 2n ** 63n - 1n
    }
    if (k === 'arena.max_mem' && n === U64_MAX) n = 0n
    out[k] = n.toString()
  }
  return out
}
