/// <reference lib="dom" />
/** The page's data: the blob decoded (`pack.ts` packed it), each config's tables and what the
 * charts read of them again and again. */
import type { PackedTable } from '../pack'
import type { PageRun } from '../types'
import type { PageFunction, Run, Table } from './model'

/** The numbers of a varint column (unsigned LEB128), `count` of them from byte `at`. */
export function readVarints(bytes: Uint8Array, at: number, count: number): Float64Array {
  const out = new Float64Array(count)
  let p = at
  for (let i = 0; i < count; i++) {
    let v = 0
    let scale = 1
    for (;;) {
      const b = bytes[p++]
      v += (b & 127) * scale
      if (b < 128) break
      scale *= 128
    }
    out[i] = v
  }
  return out
}

/** Undoes `pack.ts`'s transforms: the table's columns as the replay gave them; a `died` of
 * "still there at the end" becomes Infinity. */
export function unpackTable(bytes: Uint8Array, t: PackedTable): Table {
  const col: Record<string, Float64Array> = {}
  const unzig = (z: number): number => (z % 2 === 0 ? z / 2 : -(z + 1) / 2)
  const get = (name: string): Float64Array => {
    if (col[name]) return col[name]
    const c = t.columns[name]
    const raw = readVarints(bytes, c.at, t.rows)
    const unit = 2 ** c.shift
    const base = c.base ? get(c.base) : undefined
    const out = new Float64Array(t.rows)
    let prev = 0
    for (let i = 0; i < t.rows; i++) {
      const v = raw[i]
      if (c.transform === 'plain') out[i] = v * unit
      else if (c.transform === 'delta') {
        prev += unzig(v)
        out[i] = prev * unit
      } else if (c.transform === 'life') out[i] = v === 0 ? Infinity : (base as Float64Array)[i] + v - 1
      else out[i] = (unzig(v) + Math.ceil((base as Float64Array)[i] / unit)) * unit
    }
    col[name] = out
    return out
  }
  for (const name of Object.keys(t.columns)) get(name)
  return { rows: t.rows, col }
}

/** One config from the blob: its tables and what the charts read again and again. */
export function loadRun(meta: PageRun, index: number, bytes: Uint8Array, ops: number, detail: number): Run {
  const allocs = unpackTable(bytes, meta.tables.allocs)
  const a = allocs.col
  // Bytes handed out and requested after each op, from every allocation's life.
  const inUse = new Float64Array(ops + 2)
  const requested = new Float64Array(ops + 2)
  const failed: number[] = []
  for (let i = 0; i < allocs.rows; i++) {
    if (a.failed[i]) {
      failed.push(a.born[i])
      continue
    }
    inUse[a.born[i]] += a.size[i]
    requested[a.born[i]] += a.requested[i]
    if (a.died[i] !== Infinity) {
      inUse[a.died[i]] -= a.size[i]
      requested[a.died[i]] -= a.requested[i]
    }
  }
  for (let k = 1; k <= ops; k++) {
    inUse[k] += inUse[k - 1]
    requested[k] += requested[k - 1]
  }
  const withBytes: number[] = []
  for (let i = 0; i < allocs.rows; i++) if (a.size[i] > 0 && !a.failed[i]) withBytes.push(i)
  const bySize = Int32Array.from(withBytes).sort((x, y) => a.size[y] - a.size[x] || x - y)
  const run: Run = {
    meta,
    index,
    allocs,
    regions: unpackTable(bytes, meta.tables.regions),
    streamFree: unpackTable(bytes, meta.tables.streamFree),
    held: unpackTable(bytes, meta.tables.held),
    inUse: inUse.subarray(0, ops + 1),
    requested: requested.subarray(0, ops + 1),
    bySize,
    drawn: new Uint8Array(allocs.rows),
    drawnByBorn: new Int32Array(0),
    drawnByDied: new Int32Array(0),
    failedAt: Float64Array.from(failed),
  }
  chooseDrawn(run, detail, 0, ops)
  return run
}

/** Marks the `detail` largest allocations live in ops `from` … `to` to be drawn as bands
 * of their own: zooming in draws smaller ones. */
export function chooseDrawn(run: Run, detail: number, from: number, to: number): void {
  run.drawn.fill(0)
  const a = run.allocs.col
  const chosen: number[] = []
  for (let n = 0; n < run.bySize.length && chosen.length < detail; n++) {
    const i = run.bySize[n]
    if (a.born[i] <= to && a.died[i] > from) chosen.push(i)
  }
  for (const i of chosen) run.drawn[i] = 1
  run.drawnByBorn = Int32Array.from(chosen).sort((x, y) => x - y)
  run.drawnByDied = Int32Array.from(chosen).sort((x, y) => a.died[x] - a.died[y] || x - y)
}

/** Bytes held after op `k` (the last change at or before it). */
export function heldAt(run: Run, k: number): number {
  const ops = run.held.col.op
  let lo = 0
  let hi = ops.length - 1
  if (hi < 0 || ops[0] > k) return 0
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1
    if (ops[mid] <= k) lo = mid
    else hi = mid - 1
  }
  return run.held.col.bytes[lo]
}

/** The blob's bytes: base64, gunzipped by the browser. */
export async function unzip(b64: string): Promise<Uint8Array> {
  const bin = atob(b64)
  const bytes = new Uint8Array(bin.length)
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i)
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'))
  return new Uint8Array(await new Response(stream).arrayBuffer())
}

/** This module's page functions, put into the page by their source (script.ts). */
export const DATA_FUNCTIONS: PageFunction[] = [readVarints, unpackTable, loadRun, chooseDrawn, heldAt, unzip]
