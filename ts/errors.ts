/**
 * The error registry: every error cuda-arena's API throws is an `Error` with one of these
 * stable `code`s. Messages may change; codes do not. Errors from the native layer already
 * carry their code; this module makes the ones raised in TypeScript the same way. One more
 * code, `ERR_NO_NATIVE_BINDING` (platform.ts), comes from loading the package itself, before
 * any native code runs, so the Rust and C lists do not have it. The ONNX Runtime
 * integration's codes, {@link ORT_ERROR_CODES}, are the Node binding's own (raised by
 * `useWithOnnxRuntime` and `bindings/node/src/exports/ort.rs`, never by the arena), so they are a list
 * of their own, which the binding's `ortErrorCodes()` must match.
 */

/** Every error code, in the order DESIGN.md lists them. */
export const ERROR_CODES = [
  'ERR_ARENA_OUT_OF_MEMORY',
  'ERR_ARENA_INVALID_CONFIG',
  'ERR_ARENA_INVALID_ARGUMENT',
  'ERR_ARENA_UNKNOWN_POINTER',
  'ERR_ARENA_RELEASED',
  'ERR_NO_CUDA',
  'ERR_CUDA',
] as const

/** One of {@link ERROR_CODES}. */
export type ArenaErrorCode = (typeof ERROR_CODES)[number]

/** `ERR_ARENA_OUT_OF_MEMORY`: the device or `arena.max_mem` cannot hold the request. */
export const ERR_ARENA_OUT_OF_MEMORY = 'ERR_ARENA_OUT_OF_MEMORY'
/** `ERR_ARENA_INVALID_CONFIG`: a config key or value is rejected. */
export const ERR_ARENA_INVALID_CONFIG = 'ERR_ARENA_INVALID_CONFIG'
/** `ERR_ARENA_INVALID_ARGUMENT`: a malformed argument. */
export const ERR_ARENA_INVALID_ARGUMENT = 'ERR_ARENA_INVALID_ARGUMENT'
/** `ERR_ARENA_UNKNOWN_POINTER`: an address or range this allocator does not hold. */
export const ERR_ARENA_UNKNOWN_POINTER = 'ERR_ARENA_UNKNOWN_POINTER'
/** `ERR_ARENA_RELEASED`: use after release. */
export const ERR_ARENA_RELEASED = 'ERR_ARENA_RELEASED'
/** `ERR_NO_CUDA`: no usable CUDA driver or device. */
export const ERR_NO_CUDA = 'ERR_NO_CUDA'
/** `ERR_CUDA`: a CUDA driver error; the message has the `CUresult` name. */
export const ERR_CUDA = 'ERR_CUDA'

/** The codes of the ONNX Runtime integration (`useWithOnnxRuntime`), in the order docs/stats-and-errors.md lists them. */
export const ORT_ERROR_CODES = ['ERR_ORT_NOT_FOUND', 'ERR_ORT_LOAD', 'ERR_ORT_VERSION', 'ERR_ORT_REFUSED'] as const

/** One of {@link ORT_ERROR_CODES}. */
export type OrtErrorCode = (typeof ORT_ERROR_CODES)[number]

/**
 * `ERR_ORT_NOT_FOUND`: onnxruntime-node cannot be resolved from cuda-arena's location (not
 * installed), or its ONNX Runtime library is not loaded in this process.
 */
export const ERR_ORT_NOT_FOUND = 'ERR_ORT_NOT_FOUND'
/** `ERR_ORT_LOAD`: the ONNX Runtime library cannot be loaded or is not one (no `OrtGetApiBase`). */
export const ERR_ORT_LOAD = 'ERR_ORT_LOAD'
/** `ERR_ORT_VERSION`: no ONNX Runtime API version that both the library and cuda-arena support (or the one asked for is not). */
export const ERR_ORT_VERSION = 'ERR_ORT_VERSION'
/** `ERR_ORT_REFUSED`: ONNX Runtime refused the registration (its own message is included), e.g. another allocator is registered for the memory info. */
export const ERR_ORT_REFUSED = 'ERR_ORT_REFUSED'

/** An error of the ONNX Runtime integration, with a stable {@link OrtErrorCode}. */
export interface OrtError extends Error {
  readonly code: OrtErrorCode
}

/** Makes an `Error` with an ONNX Runtime integration `code`. */
export function ortError(code: OrtErrorCode, message: string, options?: { cause?: unknown }): OrtError {
  const err = new Error(message, { cause: options?.cause })
  Object.defineProperty(err, 'code', { value: code, enumerable: true })
  return err as OrtError
}

/** An error with a stable {@link ArenaErrorCode}. */
export interface ArenaError extends Error {
  readonly code: ArenaErrorCode
}

/** Makes an `Error` (a `RangeError` for out-of-range values) with `code`. */
export function arenaError(code: ArenaErrorCode, message: string, options?: { cause?: unknown; range?: boolean }): ArenaError {
  const err = options?.range ? new RangeError(message, { cause: options.cause }) : new Error(message, { cause: options?.cause })
  Object.defineProperty(err, 'code', { value: code, enumerable: true })
  return err as ArenaError
}

/** Whether `e` is an error from cuda-arena (it has one of the codes). Never throws. */
export function isArenaError(e: unknown): e is ArenaError {
  try {
    return e instanceof Error && (ERROR_CODES as readonly string[]).includes((e as { code?: unknown }).code as string)
  } catch {
    // A proxy whose traps throw (which a caller's getter may throw at us) is no error of ours.
    return false
  }
}

/** An invalid argument, naming it and the value. */
export function invalidArgument(name: string, value: unknown, why: string): ArenaError {
  return arenaError(ERR_ARENA_INVALID_ARGUMENT, `${name} ${why}, got ${describe(value)}`, { range: true })
}

/** An invalid config key or value (the Rust parser raises the same code for raw pairs). */
export function invalidConfig(message: string): ArenaError {
  return arenaError(ERR_ARENA_INVALID_CONFIG, message)
}

/** Longest description a message quotes; longer ones are cut with an ellipsis. */
const MAX_DESCRIBED = 80

/**
 * A short description of any value, for messages. It never throws and never runs user code
 * that could (no `String(value)` on objects: an `Object.create(null)` has no `toString`, a
 * revoked proxy throws on every touch), and it is at most {@link MAX_DESCRIBED} characters.
 */
export function describe(value: unknown): string {
  let s: string
  try {
    s = describeUnbounded(value)
  } catch {
    s = 'a value that cannot be inspected'
  }
  return s.length > MAX_DESCRIBED ? `${s.slice(0, MAX_DESCRIBED - 1)}…` : s
}

function describeUnbounded(value: unknown): string {
  switch (typeof value) {
    case 'bigint':
      return `${value}n`
    case 'string':
      return JSON.stringify(value.length > MAX_DESCRIBED ? value.slice(0, MAX_DESCRIBED) : value)
    case 'number':
    case 'boolean':
    case 'undefined':
      return String(value)
    case 'symbol':
      return value.description === undefined ? 'a symbol' : `Symbol(${value.description})`
    case 'function':
      return 'a function'
    default:
      break
  }
  if (value === null) return 'null'
  if (Array.isArray(value)) return `an array of ${value.length}`
  if (ArrayBuffer.isView(value)) return `a ${Object.prototype.toString.call(value).slice(8, -1)}`
  if (value instanceof ArrayBuffer) return 'an ArrayBuffer'
  const proto: unknown = Object.getPrototypeOf(value)
  if (proto === null) return 'an object with no prototype'
  if (proto === Object.prototype) return 'an object'
  return `an instance of ${Object.prototype.toString.call(value).slice(8, -1)}`
}
