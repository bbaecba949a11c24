/** Where things go on a chart: columns of ops over pixels, ticks and axes, step lines and
 * the polygons between them. */
import type * as format from './format'
import type { Cols, PageFunction, View } from './model'

// Other modules' page functions, called by name: in the page every module's functions share
// one scope (script.ts); a value import would compile to `module_1.fn`, which the page lacks.
declare const { esc, fmtBytes, fmtInt }: typeof format

/** Round tick values for 0 … max: about `count` of them. */
export function ticks(max: number, count: number): number[] {
  if (max <= 0) return [0]
  const raw = max / count
  const mag = 10 ** Math.floor(Math.log10(raw))
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) ?? raw
  const out: number[] = []
  for (let v = 0; v <= max + 1e-9; v += step) out.push(v)
  return out
}

/** Tick values for bytes: powers of two times 1, 2 or 5 … of a binary unit. */
export function byteTicks(max: number, count: number): number[] {
  if (max <= 0) return [0]
  const raw = max / count
  const unit = 1024 ** Math.max(0, Math.floor(Math.log(raw) / Math.log(1024)))
  const t = ticks(max / unit, count).map((v) => v * unit)
  return t
}

/** The columns of a chart `width` pixels wide over the ops in view. */
export function columns(view: View, left: number, width: number): Cols {
  const count = view.to - view.from + 1
  const n = Math.max(1, Math.min(Math.floor(width), count))
  const b = new Float64Array(n + 1)
  const x = new Float64Array(n + 1)
  for (let j = 0; j <= n; j++) {
    b[j] = view.from + Math.floor((j * count) / n)
    x[j] = left + (j * width) / n
  }
  return { n, b, x }
}

/** The op under pixel `px` of a chart with columns `cols`. */
export function opAt(cols: Cols, px: number): number {
  const j = Math.min(cols.n - 1, Math.max(0, Math.floor(((px - cols.x[0]) / (cols.x[cols.n] - cols.x[0])) * cols.n)))
  const span = cols.b[j + 1] - cols.b[j]
  const within = (px - cols.x[j]) / (cols.x[j + 1] - cols.x[j])
  return cols.b[j] + Math.min(span - 1, Math.max(0, Math.floor(within * span)))
}

/** The column holding op `k` (clamped to the chart). */
export function colOf(cols: Cols, k: number): number {
  let lo = 0
  let hi = cols.n - 1
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1
    if (cols.b[mid] <= k) lo = mid
    else hi = mid - 1
  }
  return lo
}

/** The middle pixel of op `k` in a chart with columns `cols`, or null when out of view. */
export function xOf(cols: Cols, k: number): number | null {
  if (k < cols.b[0] || k >= cols.b[cols.n]) return null
  const count = cols.b[cols.n] - cols.b[0]
  return cols.x[0] + ((k - cols.b[0] + 0.5) / count) * (cols.x[cols.n] - cols.x[0])
}

/** Points of a polygon between a lower and an upper step line over columns j0 … */
export function stepPolygon(cols: Cols, j0: number, lower: (t: number) => number, upper: (t: number) => number, len: number, y: (v: number) => number): string {
  const pts: string[] = []
  const p = (x: number, v: number): void => {
    pts.push(`${x.toFixed(1)},${y(v).toFixed(1)}`)
  }
  for (let t = 0; t < len; t++) {
    if (t === 0 || lower(t) !== lower(t - 1)) {
      if (t > 0) p(cols.x[j0 + t], lower(t - 1))
      p(cols.x[j0 + t], lower(t))
    }
  }
  p(cols.x[j0 + len], lower(len - 1))
  p(cols.x[j0 + len], upper(len - 1))
  for (let t = len - 1; t >= 0; t--) {
    if (t === 0 || upper(t) !== upper(t - 1)) {
      p(cols.x[j0 + t], upper(t))
      if (t > 0) p(cols.x[j0 + t], upper(t - 1))
    }
  }
  return pts.join(' ')
}

/** A step line through `values` per column. */
export function stepPath(cols: Cols, values: Float64Array, y: (v: number) => number): string {
  let d = `M${cols.x[0].toFixed(1)},${y(values[0]).toFixed(1)}`
  for (let j = 0; j < cols.n; j++) {
    if (j > 0 && values[j] !== values[j - 1]) d += `V${y(values[j]).toFixed(1)}`
    d += `H${cols.x[j + 1].toFixed(1)}`
  }
  return d
}

/** The axes of a chart: bytes on the left (from `yMin` to `yMax`), ops below. */
export function axes(cols: Cols, top: number, height: number, yMin: number, yMax: number, y: (v: number) => number, withOps: boolean): string {
  const left = cols.x[0]
  const right = cols.x[cols.n]
  let s = ''
  const span = byteTicks(yMax - yMin, 4)
  const step = span.length > 1 ? span[1] : yMax
  for (let v = Math.ceil(yMin / step) * step; v <= yMax; v += step) {
    const yy = y(v).toFixed(1)
    s += `<line class="grid" x1="${left}" x2="${right}" y1="${yy}" y2="${yy}"/><text x="${left - 6}" y="${(y(v) + 4).toFixed(1)}" text-anchor="end">${esc(fmtBytes(v))}</text>`
  }
  s += `<line class="axis" x1="${left}" x2="${left}" y1="${top}" y2="${top + height}"/><line class="axis" x1="${left}" x2="${right}" y1="${top + height}" y2="${top + height}"/>`
  if (withOps) {
    const from = cols.b[0]
    const to = cols.b[cols.n] - 1
    for (const t of ticks(to - from, 8)) {
      const k = Math.round(from + t)
      const x = xOf(cols, k)
      if (x === null) continue
      s += `<line class="axis" x1="${x.toFixed(1)}" x2="${x.toFixed(1)}" y1="${top + height}" y2="${top + height + 4}"/><text x="${x.toFixed(1)}" y="${top + height + 16}" text-anchor="middle">${esc(fmtInt(k))}</text>`
    }
  }
  return s
}

/** This module's page functions, put into the page by their source (script.ts). */
export const GEOMETRY_FUNCTIONS: PageFunction[] = [ticks, byteTicks, columns, opAt, colOf, xOf, stepPolygon, stepPath, axes]
