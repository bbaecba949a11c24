/**
 * Argument checks: every exported function validates its arguments here, so each bad value
 * becomes the same `ERR_ARENA_INVALID_ARGUMENT` naming the argument, and no value reaches the
 * native layer in a form it would wrap, truncate or reject with an uncoded napi error.
 * Objects are read through their own enumerable properties only (`Object.keys`), so nothing
 * set on `Object.prototype` can reach a config or an option. Internal.
 */
import { arenaError, ERR_ARENA_INVALID_ARGUMENT, invalidArgument, isArenaError } from './errors'

/** Largest value the native layer takes as a 32-bit unsigned integer. */
export const MAX_U32 = 0xffff_ffff
/** Largest bigint an address or size can be. */
export const MAX_U64 = 0xffff_ffff_ffff_ffffn

/**
 * Runs `read` on a caller's value: a proxy whose traps throw, a revoked one, or a getter that
 * throws makes the argument invalid (with the original error as `cause`), never an uncoded
 * error from inside the library.
 */
export function guard<T>(name: string, read: () => T): T {
  try {
    return read()
  } catch (e) {
    if (isArenaError(e)) throw e
    throw arenaError(ERR_ARENA_INVALID_ARGUMENT, `${name} could not be read`, { cause: e, range: true })
  }
}

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
  if (typeof v !== 'object' || v === null || guard(name, () => Array.isArray(v))) throw invalidArgument(name, v, 'must be an object')
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
  const entries = guard(name, () => Object.entries(v))
  for (const [k, value] of entries) {
    if (!allowed.includes(k)) throw invalidArgument(`${name}.${k}`, value, `is not an option (known: ${allowed.join(', ')})`)
  }
  return entries
}

/** An own enumerable property of an options object (inherited ones do not count). */
export function own(v: object, key: string): unknown {
  return guard(key, () => (Object.prototype.hasOwnProperty.call(v, key) ? (v as Record<string, unknown>)[key] : undefined))
}

/** Raw string pairs: an object whose own enumerable properties are all strings. */
export function stringPairs(name: string, v: unknown): [string, string][] {
  const o = obj(name, v)
  const entries = guard(name, () => Object.entries(o))
  for (const [k, value] of entries) {
    if (typeof value !== 'string') throw invalidArgument(`${name}[${JSON.stringify(k)}]`, value, 'must be a string')
  }
  return entries as [string, string][]
}

/** An array of at most `maxLength` elements. */
export function array(name: string, v: unknown, maxLength: number): unknown[] {
  if (!guard(name, () => Array.isArray(v))) throw invalidArgument(name, v, 'must be an array')
  const list = v as unknown[]
  if (guard(name, () => list.length) > maxLength) throw invalidArgument(name, v, `must have at most ${maxLength} elements`)
  // A plain copy: a proxy's traps run here, once, and not again inside the library.
  return guard(name, () => Array.from(list))
}

/** A function. */
export function fn(name: string, v: unknown): (...args: never[]) => unknown {
  if (typeof v !== 'function') throw invalidArgument(name, v, 'must be a function')
  return v as (...args: never[]) => unknown
}

/** The bytes of an `ArrayBufferView` (a detached one is an invalid argument, not a TypeError). */
export function bytes(name: string, v: unknown): Uint8Array {
  if (!guard(name, () => ArrayBuffer.isView(v))) throw invalidArgument(name, v, 'must be an ArrayBufferView')
  const view = v as ArrayBufferView
  try {
    return new Uint8Array(view.buffer, view.byteOffset, view.byteLength)
  } catch {
    throw invalidArgument(name, v, 'must not be detached')
  }
}

/** `v` as an instance of `type` (an `instanceof` check that a revoked proxy cannot break). */
export function instance<T>(name: string, v: unknown, type: abstract new (...args: never[]) => T, why: string): T {
  if (!guard(name, () => v instanceof type)) throw invalidArgument(name, v, why)
  return v as T
}

/**
 * The error for a method called on something that is not its object (taken off it, passed
 * as a callback): JavaScript would throw an uncoded TypeError from inside the method.
 */
export function wrongThis(self: unknown, what: string): Error {
  return invalidArgument('this', self, `must be ${what} (was a method called off its object?)`)
}
