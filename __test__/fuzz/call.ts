/**
 * How an operation is written and called: operations as data, argument values resolved
 * against the run's objects, and the one wrapper every API call goes through (it checks the
 * thrown code against the model's, and runs the call with `Object.prototype` polluted when the
 * operation asks for it).
 */
import { ArenaM, EventM, FactoryRef, HandleM, StreamM, ViewM } from './model'
import { makeBuf, makeWeird, showV, type V } from './values'
import { fail, type World } from './world'

/** One operation, as data. */
export interface Op {
  op: string
  /** Which copy of the package runs it (functions and new factories). */
  c?: number
  /** The object it is called on. */
  t?: string
  args: V[]
  /** The id its result gets (an object or an allocation). */
  out?: string
  /** Keys set on `Object.prototype` while the call runs (own properties only may count). */
  p?: [string, V][]
}

/** What an operation did, for the checks that follow it. */
export interface Result {
  /** `ok`, `skip` (an object it names is gone), or the error code thrown. */
  outcome: string
  /** Allocators whose stats it may have changed. */
  touched: Set<ArenaM>
  /** The allocator an out-of-memory failure happened on. */
  oom: ArenaM | null
}

export const IA = 'ERR_ARENA_INVALID_ARGUMENT'
export const IC = 'ERR_ARENA_INVALID_CONFIG'
export const OOM = 'ERR_ARENA_OUT_OF_MEMORY'
export const UP = 'ERR_ARENA_UNKNOWN_POINTER'
export const REL = 'ERR_ARENA_RELEASED'
export const NO_CUDA = 'ERR_NO_CUDA'

export class Skip extends Error {}
export const skip = (): never => {
  throw new Skip()
}

// ---------------------------------------------------------------- values

export function resolve(w: World, v: V): unknown {
  if ('n' in v) return Number(v.n)
  if ('b' in v) return BigInt(v.b)
  if ('s' in v) return v.s
  if ('u' in v) return undefined
  if ('z' in v) return null
  if ('bool' in v) return v.bool
  if ('w' in v) return makeWeird(v.w)
  if ('ptr' in v) {
    const a = w.allocs.get(v.ptr) ?? skip()
    return a.addr + BigInt(v.off)
  }
  if ('ref' in v) {
    const m = refModel(w, v.ref) ?? skip()
    return m.obj ?? skip()
  }
  if ('arr' in v) return v.arr.map((x) => resolve(w, x))
  if ('o' in v) {
    const out: Record<string, unknown> = {}
    for (const [k, x] of Object.entries(v.o)) Object.defineProperty(out, k, { value: resolve(w, x), enumerable: true, writable: true, configurable: true })
    return out
  }
  return makeBuf(v.buf, v.len, v.seed)
}

export type AnyModel = FactoryRef | HandleM | ViewM | StreamM | EventM

export function refModel(w: World, id: string): AnyModel | undefined {
  return w.factories.get(id) ?? w.handles.get(id) ?? w.views.get(id) ?? w.streams.get(id) ?? w.events.get(id)
}

/** The model behind a value argument that is a reference (else `undefined`). */
export function modelOf(w: World, v: V): AnyModel | undefined {
  return 'ref' in v ? refModel(w, v.ref) : undefined
}

// ---------------------------------------------------------------- calls

/** `e` as text, whatever it is (a thrown proxy's traps may throw). */
export function errText(e: unknown): string {
  try {
    if (e instanceof Error) return `${e.name} ${String((e as { code?: unknown }).code)} ${e.message}`
  } catch {
    return 'a value whose traps throw'
  }
  return typeof e === 'string' ? JSON.stringify(e) : typeof e
}

/** The `code` of a thrown value that is an `Error`, without trusting it. */
export function codeOf(e: unknown): string | undefined {
  try {
    if (!(e instanceof Error)) return undefined
    const code = (e as { code?: unknown }).code
    return typeof code === 'string' ? code : undefined
  } catch {
    return undefined
  }
}

/** Calls `fn`; a thrown error must be coded and one of `codes`, a return must be allowed. */
export function call<T>(w: World, what: string, codes: readonly string[], ok: boolean, fn: () => T): { ok: true; value: T } | { ok: false; code: string } {
  w.apiCalls += 1
  let value: T
  try {
    value = polluted(w, fn)
  } catch (e) {
    if (e instanceof Skip) throw e
    const code = codeOf(e)
    const known = (w.copies[0].ERROR_CODES as readonly string[]).includes(code as string)
    if (!known) fail('coded-error', `${what} threw an error without a known code: ${errText(e)}`)
    if (!codes.includes(code as string)) {
      fail('expected-code', `${what} threw ${code as string} (${(e as Error).message}); expected ${[ok ? 'success' : '', ...codes].filter(Boolean).join(' or ')}`)
    }
    if ((e as Error).message.length > 1000) fail('short-message', `${what}: a message of ${(e as Error).message.length} characters`)
    return { ok: false, code: code as string }
  }
  if (!ok) fail('expected-error', `${what} succeeded; expected ${codes.join(' or ')}`)
  return { ok: true, value }
}

export const uniq = (codes: string[]): string[] => [...new Set(codes)]

/** Runs `fn` with the current op's keys set on `Object.prototype`, and takes them off after. */
export function polluted<T>(w: World, fn: () => T): T {
  const keys = w.pollution
  if (!keys || keys.length === 0) return fn()
  const proto = Object.prototype as Record<string, unknown>
  for (const [k, v] of keys) Object.defineProperty(proto, k, { value: v, configurable: true, writable: true, enumerable: true })
  try {
    return fn()
  } finally {
    for (const [k] of keys) delete proto[k]
  }
}

/** The own enumerable properties of `x` in an object with no prototype (reads nothing inherited). */
export function ownRecord(x: object): Record<string, unknown> {
  return Object.assign(Object.create(null) as Record<string, unknown>, Object.fromEntries(Object.entries(x)))
}

export function showRef(v: V): string {
  return showV(v)
}
