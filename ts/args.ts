/**
 * Argument checks: every exported function validates its arguments here, so each bad value
 * becomes the same `ERR_ARENA_INVALID_ARGUMENT` naming the argument, and no value reaches the
 * native layer in a form it would wrap, truncate or reject with an uncoded napi error.
 * Objects are read through their own enumerable properties only (`Object.keys`), so nothing
 * set on `Object.prototype` can reach a config or an option. Internal.
 */
import { invalidArgument } from './errors'

/** Largest value the native layer takes as a 32-bit unsigned integer. */
export const MAX_U32 = 0xffff_ffff
/** Largest bigint an address or size can be. */
export const MAX_U64 = 0xffff_ffff_ffff_ffffn

/** A safe integer in `min … max`. */
export function int(name: string, v: unknown, min: number, max: number): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min || v > max) {
    throw invalidArgument(name, v, `must be an integer ${min} … ${max}`)
  }
  return v
}

/** An integer in `min … max`, `fallback` when `undefined`. */
export function optInt(name: string, v: unknown, min: number, max: number, fallback: number): number {
  return v === undefined ? fallback : int(name, v, min, max)
}

/** A string. */
export function str(name: string, v: unknown): string {
  if (typeof v !== 'string') throw invalidArgument(name, v, 'must be a string')
  return v
}

/** A boolean. */
export function bool(name: string, v: unknown): boolean {
  if (typeof v !== 'boolean') throw invalidArgument(name, v, 'must be a boolean')
  return v
}

/** A non-null, non-array object (not a function). */
export function obj(name: string, v: unknown): object {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw invalidArgument(name, v, 'must be an object')
  return v
}

/** An optional options object: `{}` when `undefined`. */
export function options(name: string, v: unknown): object {
  return v === undefined ? {} : obj(name, v)
}

/**
 * The own enumerable properties of an options object, as `[key, value]`; `allowed` names
 * every key it may have (another is an invalid argument naming it).
 */
export function ownEntries(name: string, v: object, allowed: readonly string[]): [string, unknown][] {
  const entries = Object.entries(v)
  for (const [k, value] of entries) {
    if (!allowed.includes(k)) throw invalidArgument(`${name}.${k}`, value, `is not an option (known: ${allowed.join(', ')})`)
  }
  return entries
}

/** An own enumerable property of an options object (inherited ones do not count). */
export function own(v: object, key: string): unknown {
  return Object.prototype.hasOwnProperty.call(v, key) ? (v as Record<string, unknown>)[key] : undefined
}

/** Raw string pairs: an object whose own enumerable properties are all strings. */
export function stringPairs(name: string, v: unknown): [string, string][] {
  const entries = Object.entries(obj(name, v))
  for (const [k, value] of entries) {
    if (typeof value !== 'string') throw invalidArgument(`${name}[${JSON.stringify(k)}]`, value, 'must be a string')
  }
  return entries as [string, string][]
}

/** An array of at most `maxLength` elements. */
export function array(name: string, v: unknown, maxLength: number): unknown[] {
  if (!Array.isArray(v)) throw invalidArgument(name, v, 'must be an array')
  if (v.length > maxLength) throw invalidArgument(name, v, `must have at most ${maxLength} elements`)
  return v
}

/** A function. */
export function fn(name: string, v: unknown): (...args: never[]) => unknown {
  if (typeof v !== 'function') throw invalidArgument(name, v, 'must be a function')
  return v as (...args: never[]) => unknown
}

/** The bytes of an `ArrayBufferView` (a detached one is an invalid argument, not a TypeError). */
export function bytes(name: string, v: unknown): Uint8Array {
  if (!ArrayBuffer.isView(v)) throw invalidArgument(name, v, 'must be an ArrayBufferView')
  try {
    return new Uint8Array(v.buffer, v.byteOffset, v.byteLength)
  } catch {
    throw invalidArgument(name, v, 'must not be detached')
  }
}
