/**
 * Argument values, written as data (`V`) so a run's operations can be logged, saved as JSON,
 * replayed and minimized: numbers of every range and width, bigints, strings, objects that
 * fight back (proxies whose traps throw, revoked proxies, objects with no prototype), and
 * references to the run's own objects and allocations, resolved when the operation runs.
 */

/** A value as data. */
export type V =
  /** A number, as `String(n)` (NaN, -0 and the infinities survive JSON). */
  | { n: string }
  | { b: string }
  | { s: string }
  | { u: 1 }
  | { z: 1 }
  | { bool: boolean }
  /** A weird object, made fresh each time it is resolved. */
  | { w: WeirdName }
  /** One of the run's objects (factory, allocator, view, stream, event) by id. */
  | { ref: string }
  /** The address allocation `ptr` got, plus `off` (a bigint, as a string). */
  | { ptr: string; off: string }
  /** A plain object with these own properties. */
  | { o: Record<string, V> }
  /** An array of these values. */
  | { arr: V[] }
  /** A view for write/read: `len` bytes made from `seed`. */
  | { buf: BufKind; len: number; seed: number }

export type BufKind = 'u8' | 'u8-offset' | 'f64' | 'dv' | 'buffer' | 'sab' | 'detached' | 'array'

export const num = (n: number): V => ({ n: Object.is(n, -0) ? '-0' : String(n) })
export const big = (b: bigint): V => ({ b: b.toString() })
export const str = (s: string): V => ({ s })
export const UNDEF: V = { u: 1 }
export const NULL: V = { z: 1 }

const weirdMakers = {
  nullProto: () => Object.create(null) as object,
  emptyObject: () => ({}),
  emptyArray: () => [] as unknown[],
  valueOf12: () => ({ valueOf: () => 12, toString: () => '12' }),
  throwingProxy: () =>
    new Proxy(
      {},
      {
        get() {
          throw new Error('fuzz: get trap')
        },
        ownKeys() {
          throw new Error('fuzz: ownKeys trap')
        },
        getPrototypeOf() {
          throw new Error('fuzz: getPrototypeOf trap')
        },
        getOwnPropertyDescriptor() {
          throw new Error('fuzz: getOwnPropertyDescriptor trap')
        },
        has() {
          throw new Error('fuzz: has trap')
        },
      },
    ),
  revokedProxy: () => {
    const r = Proxy.revocable({}, {})
    r.revoke()
    return r.proxy
  },
  symbol: () => Symbol('fuzz'),
  fn: () => () => 12,
  boxedNumber: () => new Number(12),
  boxedBigint: () => Object(12n) as object,
  date: () => new Date(0),
  uint8: () => new Uint8Array(4),
  /** A proxy whose every trap throws. */
  hostileProxy: () => hostile(),
  /** An object whose option-like properties throw a hostile proxy when read. */
  getterThrowsHostile: () =>
    new Proxy(
      {},
      {
        ownKeys: () => ['name', 'maxMem', 'arena.max_mem', 'replace', 'totalMemory'],
        getOwnPropertyDescriptor: () => ({ value: 1, enumerable: true, configurable: true, writable: true }),
        get() {
          throw hostile()
        },
      },
    ),
  /** An object whose properties throw a string when read. */
  getterThrowsString: () => ({
    get name(): never {
      throw 'fuzz: a string'
    },
  }),
} as const

function hostile(): object {
  const boom = (): never => {
    throw new Error('fuzz: hostile trap')
  }
  return new Proxy({}, { get: boom, getPrototypeOf: boom, has: boom, ownKeys: boom, getOwnPropertyDescriptor: boom })
}

export type WeirdName = keyof typeof weirdMakers
export const WEIRD_NAMES = Object.keys(weirdMakers) as WeirdName[]

export function makeWeird(name: WeirdName): unknown {
  return weirdMakers[name]()
}

/** Sizes and lengths that are not plain small ones: every range and integer width. */
export const EDGE_NUMBERS: readonly number[] = [
  -1, -0, 0.5, 1.5, Number.NaN, Infinity, -Infinity, 2 ** 31, 2 ** 32 - 1, 2 ** 32, 2 ** 32 + 1,
  2 ** 53 - 1, 2 ** 53, 2 ** 53 + 2, 1e300, Number.MIN_VALUE, Number.EPSILON, -(2 ** 53),
]
export const EDGE_BIGINTS: readonly bigint[] = [
  -1n, -(2n ** 64n), 2n ** 32n - 1n, 2n ** 32n + 1n, 2n ** 53n - 1n, 2n ** 53n + 1n, 2n ** 63n,
  2n ** 64n - 256n, 2n ** 64n - 255n, 2n ** 64n - 1n, 2n ** 64n, 2n ** 64n + 1n, 2n ** 128n,
]
/** Pointer offsets that wrap a 64-bit word or leave it. */
export const WIDE_OFFSETS: readonly bigint[] = [2n ** 64n, -(2n ** 64n), 2n ** 128n, 2n ** 63n, -(2n ** 63n)]

export const MAX_U64 = 2n ** 64n - 1n

/** What a size argument is, as the API's rules read it. */
export type SizeClass = { kind: 'ok'; v: bigint } | { kind: 'invalid' } | { kind: 'tooLarge' }

/** README: sizes are non-negative safe integers or bigints; a bigint of 2^64 or more is out of memory. */
export function classifySize(x: unknown): SizeClass {
  if (typeof x === 'number') return Number.isSafeInteger(x) && x >= 0 ? { kind: 'ok', v: BigInt(x) } : { kind: 'invalid' }
  if (typeof x === 'bigint') {
    if (x < 0n) return { kind: 'invalid' }
    if (x > MAX_U64) return { kind: 'tooLarge' }
    return { kind: 'ok', v: x }
  }
  return { kind: 'invalid' }
}

/** What a pointer argument is. */
export type PtrClass = { kind: 'null' } | { kind: 'addr'; v: bigint } | { kind: 'wide' } | { kind: 'invalid' }

export function classifyPtr(x: unknown): PtrClass {
  if (x === null) return { kind: 'null' }
  if (typeof x === 'bigint') return x < 0n || x > MAX_U64 ? { kind: 'wide' } : { kind: 'addr', v: x }
  return { kind: 'invalid' }
}

/** `len` bytes from `seed` (what a `buf` value holds, and what a write must leave). */
export function patternBytes(len: number, seed: number): Uint8Array {
  const out = new Uint8Array(len)
  let x = (seed * 2654435761 + 1) >>> 0
  for (let i = 0; i < len; i++) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0
    out[i] = x >>> 24
  }
  return out
}

/** A `buf` value as the view it stands for. */
export function makeBuf(kind: BufKind, len: number, seed: number): unknown {
  const bytes = patternBytes(len, seed)
  switch (kind) {
    case 'u8':
      return bytes
    case 'u8-offset': {
      const backing = new Uint8Array(len + 16)
      backing.set(bytes, 8)
      return new Uint8Array(backing.buffer, 8, len)
    }
    case 'f64': {
      // A multiple of 8 bytes; the length was chosen so.
      const buf = new ArrayBuffer(len)
      new Uint8Array(buf).set(bytes)
      return new Float64Array(buf)
    }
    case 'dv': {
      const buf = new ArrayBuffer(len)
      new Uint8Array(buf).set(bytes)
      return new DataView(buf)
    }
    case 'buffer':
      return Buffer.from(bytes)
    case 'sab': {
      const sab = new SharedArrayBuffer(len)
      new Uint8Array(sab).set(bytes)
      return new Uint8Array(sab)
    }
    case 'detached': {
      const view = new Uint8Array(len)
      structuredClone(view.buffer, { transfer: [view.buffer] })
      return view
    }
    case 'array':
      return Array.from(bytes)
  }
}

/** The bytes a view covers (for reading back what `read` wrote into it). */
export function viewBytes(v: unknown): Uint8Array {
  const view = v as ArrayBufferView
  return new Uint8Array(view.buffer, view.byteOffset, view.byteLength)
}

/** A short, stable text for a value spec, for logs. */
export function showV(v: V): string {
  if ('n' in v) return v.n
  if ('b' in v) return `${v.b}n`
  if ('s' in v) return JSON.stringify(v.s.length > 24 ? `${v.s.slice(0, 24)}…` : v.s)
  if ('u' in v) return 'undefined'
  if ('z' in v) return 'null'
  if ('bool' in v) return String(v.bool)
  if ('w' in v) return `<${v.w}>`
  if ('ref' in v) return v.ref
  if ('ptr' in v) return v.off === '0' ? v.ptr : `${v.ptr}${v.off.startsWith('-') ? '' : '+'}${v.off}`
  if ('o' in v) return `{${Object.entries(v.o).map(([k, x]) => `${k}: ${showV(x)}`).join(', ')}}`
  if ('arr' in v) return `[${v.arr.map(showV).join(', ')}]`
  return `${v.buf}[${v.len}]`
}
