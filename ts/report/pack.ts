/**
 * The replay's picture, packed for the page: each column of numbers the replay gave
 * (`JsPicture`) as unsigned LEB128 varints after a reversible transform that makes its
 * numbers small (deltas, lifetimes, a common power-of-two unit), all columns gzipped into
 * one blob that the page decodes with the browser's own `DecompressionStream`. Nothing is
 * computed here but the packing: the page gets back the replay's numbers exactly.
 */
import { gzipSync } from 'node:zlib'

/**
 * How a column's numbers were made small; the page undoes it (`page/data.ts`, `unpackTable`).
 * - `plain`: as they are (whole numbers ≥ 0).
 * - `delta`: each minus the one before (zigzag, so it may go down).
 * - `life`: `died - born + 1`, 0 for -1 (still there at the end); needs the `born` column.
 * - `over`: each in units of 2^shift minus the same row of another column rounded up to
 *   that unit (zigzag), e.g. a chunk's size over its requested size.
 */
export type Transform = 'plain' | 'delta' | 'life' | 'over'

/** Where one column lies in the blob and how to read it back. */
export interface PackedColumn {
  /** Byte offset and length of its varints in the (unzipped) blob. */
  at: number
  bytes: number
  transform: Transform
  /** For `life`: the `born` column's name; for `over`: the column it is relative to. */
  base?: string
  /** Every number was a multiple of 2^shift: they are packed divided by it. */
  shift: number
}

/** A table (allocations, regions, …): its row count and its columns by name. */
export interface PackedTable {
  rows: number
  columns: Record<string, PackedColumn>
}

/** How each table's columns are packed: name → transform (and base). */
type Layout = Record<string, [Transform, string?]>

/** The tables of a `JsPicture`, their stride (numbers per row) and columns in row order. */
export const TABLES = {
  allocs: {
    stride: 8,
    columns: {
      born: ['delta'],
      died: ['life', 'born'],
      addr: ['delta'],
      requested: ['plain'],
      size: ['over', 'requested'],
      stream: ['plain'],
      reserve: ['plain'],
      failed: ['plain'],
    } as Layout,
    order: ['born', 'died', 'addr', 'size', 'requested', 'stream', 'reserve', 'failed'],
  },
  regions: {
    stride: 5,
    columns: { born: ['delta'], died: ['life', 'born'], id: ['delta'], base: ['delta'], size: ['plain'] } as Layout,
    order: ['born', 'died', 'id', 'base', 'size'],
  },
  streamFree: {
    stride: 5,
    columns: { born: ['plain'], died: ['life', 'born'], addr: ['delta'], size: ['plain'], stream: ['plain'] } as Layout,
    order: ['born', 'died', 'addr', 'size', 'stream'],
  },
  held: {
    stride: 2,
    columns: { op: ['delta'], bytes: ['delta'] } as Layout,
    order: ['op', 'bytes'],
  },
} as const

export type TableName = keyof typeof TABLES

/** Zigzag: 0, -1, 1, -2 … as 0, 1, 2, 3 …, for numbers that may be negative. */
const zigzag = (n: number): number => (n >= 0 ? 2 * n : -2 * n - 1)

/** Bytes written one varint at a time. */
class Bytes {
  /** A varint of a number below 2^56 takes at most 8 bytes. */
  readonly buf: Uint8Array
  length = 0
  constructor(values: number) {
    this.buf = new Uint8Array(values * 8)
  }

  /** Appends `n` (a whole number 0 … 2^55) as an unsigned LEB128 varint. */
  varint(n: number): void {
    // Division, not bit operations: these go past 2^32.
    while (n >= 128) {
      this.buf[this.length++] = (n % 128) + 128
      n = Math.floor(n / 128)
    }
    this.buf[this.length++] = n
  }
}

/** The largest `s ≤ 16` such that every number of `values` is a multiple of 2^s. */
function commonShift(values: ArrayLike<number>): number {
  let shift = 16
  for (let i = 0; i < values.length && shift > 0; i++) {
    while (shift > 0 && values[i] % 2 ** shift !== 0) shift--
  }
  return shift
}

/** One column of a strided table: every `stride`-th number from `offset`. */
function column(data: Float64Array, stride: number, offset: number): Float64Array {
  const out = new Float64Array(data.length / stride)
  for (let i = 0; i < out.length; i++) out[i] = data[i * stride + offset]
  return out
}

/** Packs a column's numbers, divided by 2^shift, as varints after `transform`. */
function transformed(values: Float64Array, shift: number, transform: Transform, base: Float64Array | undefined): Uint8Array {
  const out = new Bytes(values.length)
  const unit = 2 ** shift
  let prev = 0
  for (let i = 0; i < values.length; i++) {
    const v = values[i] / unit
    switch (transform) {
      case 'plain':
        out.varint(v)
        break
      case 'delta':
        out.varint(zigzag(v - prev))
        prev = v
        break
      case 'life':
        out.varint(v < 0 ? 0 : v - (base as Float64Array)[i] + 1)
        break
      case 'over':
        out.varint(zigzag(v - Math.ceil((base as Float64Array)[i] / unit)))
        break
    }
  }
  return out.buf.slice(0, out.length)
}

/** Collects columns into one blob. */
export class Packer {
  private readonly parts: Uint8Array[] = []
  private size = 0
  /** Columns packed so far by a hash of their bytes: configs share the trace's columns. */
  private readonly seen = new Map<string, { at: number; bytes: Uint8Array }[]>()

  /** Where `bytes` lie in the blob: where an equal column already lies, else appended. */
  private place(bytes: Uint8Array): number {
    let h = 0x811c9dc5
    for (let i = 0; i < bytes.length; i += 97) h = Math.imul(h ^ bytes[i], 0x01000193)
    const key = `${bytes.length}:${h >>> 0}`
    const same = this.seen.get(key) ?? []
    const found = same.find((s) => s.bytes.length === bytes.length && s.bytes.every((b, i) => b === bytes[i]))
    if (found) return found.at
    const at = this.size
    same.push({ at, bytes })
    this.seen.set(key, same)
    this.parts.push(bytes)
    this.size += bytes.length
    return at
  }

  /** Packs the strided `data` of table `name`. */
  table(name: TableName, data: Float64Array): PackedTable {
    const spec = TABLES[name]
    const rows = data.length / spec.stride
    const raw: Record<string, Float64Array> = {}
    spec.order.forEach((col, i) => {
      raw[col] = column(data, spec.stride, i)
    })
    const columns: Record<string, PackedColumn> = {}
    for (const col of spec.order) {
      const [transform, baseName] = spec.columns[col]
      // `life` counts ops: no unit.
      const shift = transform === 'life' ? 0 : commonShift(raw[col])
      const bytes = transformed(raw[col], shift, transform, baseName ? raw[baseName] : undefined)
      columns[col] = { at: this.place(bytes), bytes: bytes.length, transform, base: baseName, shift }
    }
    return { rows, columns }
  }

  /** The blob, gzipped and in base64. */
  finish(): string {
    const all = new Uint8Array(this.size)
    let at = 0
    for (const p of this.parts) {
      all.set(p, at)
      at += p.length
    }
    return gzipSync(all, { level: 9 }).toString('base64')
  }
}
