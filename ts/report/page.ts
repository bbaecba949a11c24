/// <reference lib="dom" />
/**
 * The script of the `--html` page, run in the browser. Its functions are inlined into the
 * page by their source (`PAGE_SCRIPT`), so each stands alone: no imports but types, no
 * module-level values; shared state travels in a `Ctx`. They stay in this one file because a
 * call through an import compiles to a module property the page does not have.
 *
 * It only draws what the replay gave (`pack.ts` has the numbers exactly): per config, the
 * bytes held, handed out and requested over the ops, the live allocations stacked as bands
 * in the order they were made (the largest individually, the rest as one band on top), and
 * the regions and chunks after any op: the allocations live then are the chunks in use, the
 * free chunks a stream owns are the replay's, every other byte of a region is free.
 */
import type { PackedTable } from './pack'
import type { PageData, PageRun } from './types'

/** A table unpacked: its columns by name. */
interface Table {
  rows: number
  col: Record<string, Float64Array>
}

/** One config, ready to draw. */
interface Run {
  meta: PageRun
  index: number
  allocs: Table
  regions: Table
  streamFree: Table
  held: Table
  /** Bytes handed out and requested after each op, 0 … ops. */
  inUse: Float64Array
  requested: Float64Array
  /** Allocations holding bytes, largest first. */
  bySize: Int32Array
  /** The allocations drawn as bands of their own (the `detail` largest): flags, and the
   * same in trace order and by the op that freed them. */
  drawn: Uint8Array
  drawnByBorn: Int32Array
  drawnByDied: Int32Array
  /** Ops at which an allocation failed, ascending. */
  failedAt: Float64Array
}

/** What is shown: the ops in view, the op picked for the maps (null: each at its peak). */
interface View {
  from: number
  to: number
  picked: number | null
  detail: number
  /** Whether the bytes axis starts below the least requested in view rather than at 0. */
  fitY: boolean
}

/** The page's state. */
interface Ctx {
  data: PageData
  runs: Run[]
  view: View
  tip: HTMLElement
  /** Each timeline's columns, to move its picked-op line without drawing it again. */
  charts: { svg: SVGSVGElement; cols: Cols }[]
}

/** Column boundaries of a chart: column j covers ops [b[j], b[j+1]) and pixels [x[j], x[j+1]). */
interface Cols {
  n: number
  b: Float64Array
  x: Float64Array
}

/** The numbers of a varint column (unsigned LEB128), `count` of them from byte `at`. */
function readVarints(bytes: Uint8Array, at: number, count: number): Float64Array {
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
function unpackTable(bytes: Uint8Array, t: PackedTable): Table {
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
function loadRun(meta: PageRun, index: number, bytes: Uint8Array, ops: number, detail: number): Run {
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
function chooseDrawn(run: Run, detail: number, from: number, to: number): void {
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
function heldAt(run: Run, k: number): number {
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

function esc(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`)
}

/** Bytes as KiB/MiB/GiB with one decimal. */
function fmtBytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB']
  let u = 0
  while (Math.abs(n) >= 1024 && u < units.length - 1) {
    n /= 1024
    u++
  }
  return u === 0 ? `${n} B` : `${n.toFixed(1)} ${units[u]}`
}

/** A whole number with thousands separators. */
function fmtInt(n: number): string {
  return n.toLocaleString('en')
}

/** A size as "1.0 MiB (1,048,576 bytes)". */
function fmtSize(n: number): string {
  return n < 1024 ? `${fmtInt(n)} bytes` : `${fmtBytes(n)} (${fmtInt(n)} bytes)`
}

function fmtAddr(n: number): string {
  return `0x${n.toString(16)}`
}

function streamName(ctx: Ctx, s: number): string {
  if (s === 0) return 'no stream'
  const name = ctx.data.streams[s]
  return name ? `stream ${s} (${name})` : `stream ${s}`
}

/** A colour of its own for allocation `i`. */
function bandColor(i: number): string {
  const palette = ['#4e79a7', '#f28e2c', '#e15759', '#76b7b2', '#59a14f', '#edc949', '#af7aa1', '#ff9da7', '#9c755f', '#bab0ab']
  return palette[(i * 2654435761) % 2 ** 32 % palette.length]
}

/** Round tick values for 0 … max: about `count` of them. */
function ticks(max: number, count: number): number[] {
  if (max <= 0) return [0]
  const raw = max / count
  const mag = 10 ** Math.floor(Math.log10(raw))
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) ?? raw
  const out: number[] = []
  for (let v = 0; v <= max + 1e-9; v += step) out.push(v)
  return out
}

/** Tick values for bytes: powers of two times 1, 2 or 5 … of a binary unit. */
function byteTicks(max: number, count: number): number[] {
  if (max <= 0) return [0]
  const raw = max / count
  const unit = 1024 ** Math.max(0, Math.floor(Math.log(raw) / Math.log(1024)))
  const t = ticks(max / unit, count).map((v) => v * unit)
  return t
}

/** The columns of a chart `width` pixels wide over the ops in view. */
function columns(view: View, left: number, width: number): Cols {
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
function opAt(cols: Cols, px: number): number {
  const j = Math.min(cols.n - 1, Math.max(0, Math.floor(((px - cols.x[0]) / (cols.x[cols.n] - cols.x[0])) * cols.n)))
  const span = cols.b[j + 1] - cols.b[j]
  const within = (px - cols.x[j]) / (cols.x[j + 1] - cols.x[j])
  return cols.b[j] + Math.min(span - 1, Math.max(0, Math.floor(within * span)))
}

/** The column holding op `k` (clamped to the chart). */
function colOf(cols: Cols, k: number): number {
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
function xOf(cols: Cols, k: number): number | null {
  if (k < cols.b[0] || k >= cols.b[cols.n]) return null
  const count = cols.b[cols.n] - cols.b[0]
  return cols.x[0] + ((k - cols.b[0] + 0.5) / count) * (cols.x[cols.n] - cols.x[0])
}

/** Per column: the op with the most bytes handed out (the stack is drawn there), and the
 * most bytes held, handed out and requested in it. */
function columnPeaks(run: Run, cols: Cols): { rep: Float64Array; held: Float64Array; inUse: Float64Array; requested: Float64Array } {
  const rep = new Float64Array(cols.n)
  const held = new Float64Array(cols.n)
  const inUse = new Float64Array(cols.n)
  const requested = new Float64Array(cols.n)
  const hOps = run.held.col.op
  const hBytes = run.held.col.bytes
  let h = 0
  while (h + 1 < hOps.length && hOps[h + 1] <= cols.b[0]) h++
  for (let j = 0; j < cols.n; j++) {
    let best = cols.b[j]
    let req = 0
    for (let k = cols.b[j]; k < cols.b[j + 1]; k++) {
      if (run.inUse[k] > run.inUse[best]) best = k
      if (run.requested[k] > req) req = run.requested[k]
    }
    rep[j] = best
    inUse[j] = run.inUse[best]
    requested[j] = req
    let most = hOps.length && hOps[h] <= cols.b[j] ? hBytes[h] : 0
    while (h + 1 < hOps.length && hOps[h + 1] < cols.b[j + 1]) {
      h++
      most = Math.max(most, hBytes[h])
    }
    held[j] = most
  }
  return { rep, held, inUse, requested }
}

/** The bands: for each drawn allocation live at a column's op, its offset in the stack
 * there (allocations stack in the order they were made, as in PyTorch's memory_viz). */
function stackBands(run: Run, rep: Float64Array): { bands: Map<number, { j0: number; offs: number[] }>; drawnSum: Float64Array } {
  const a = run.allocs.col
  const bands = new Map<number, { j0: number; offs: number[] }>()
  const drawnSum = new Float64Array(rep.length)
  let live: number[] = []
  let pb = 0
  let pd = 0
  for (let j = 0; j < rep.length; j++) {
    const k = rep[j]
    while (pb < run.drawnByBorn.length && a.born[run.drawnByBorn[pb]] <= k) {
      const i = run.drawnByBorn[pb++]
      if (a.died[i] > k) live.push(i)
    }
    let gone = false
    while (pd < run.drawnByDied.length && a.died[run.drawnByDied[pd]] <= k) {
      pd++
      gone = true
    }
    if (gone) live = live.filter((i) => a.died[i] > k)
    let off = 0
    for (const i of live) {
      let band = bands.get(i)
      if (!band) {
        band = { j0: j, offs: [] }
        bands.set(i, band)
      }
      band.offs.push(off)
      off += a.size[i]
    }
    drawnSum[j] = off
  }
  return { bands, drawnSum }
}

/** Points of a polygon between a lower and an upper step line over columns j0 … */
function stepPolygon(cols: Cols, j0: number, lower: (t: number) => number, upper: (t: number) => number, len: number, y: (v: number) => number): string {
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
function stepPath(cols: Cols, values: Float64Array, y: (v: number) => number): string {
  let d = `M${cols.x[0].toFixed(1)},${y(values[0]).toFixed(1)}`
  for (let j = 0; j < cols.n; j++) {
    if (j > 0 && values[j] !== values[j - 1]) d += `V${y(values[j]).toFixed(1)}`
    d += `H${cols.x[j + 1].toFixed(1)}`
  }
  return d
}

/** The timelines' common bytes axis: 0 (or, fitted, a little under the least requested
 * in view) to a little over the most held in view, over every config. */
function yRangeInView(ctx: Ctx): [number, number] {
  let max = 1
  let min = Infinity
  for (const run of ctx.runs) {
    const ops = run.held.col.op
    const bytes = run.held.col.bytes
    max = Math.max(max, heldAt(run, ctx.view.from))
    for (let i = 0; i < ops.length; i++) if (ops[i] > ctx.view.from && ops[i] <= ctx.view.to) max = Math.max(max, bytes[i])
    for (let k = ctx.view.from; k <= ctx.view.to; k++) {
      if (run.requested[k] > max) max = run.requested[k]
      if (run.requested[k] < min) min = run.requested[k]
    }
  }
  if (!ctx.view.fitY || !(min < max)) return [0, max * 1.08]
  const lo = Math.max(0, min - (max - min) * 0.1)
  // Room above the highest line for the peak's label.
  return [lo, max + (max - lo) * 0.08]
}

/** The axes of a chart: bytes on the left (from `yMin` to `yMax`), ops below. */
function axes(cols: Cols, top: number, height: number, yMin: number, yMax: number, y: (v: number) => number, withOps: boolean): string {
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

/** One config's timeline: bands, lines, its peak, failed allocations, the picked op. */
function drawTimeline(ctx: Ctx, run: Run, host: HTMLElement, width: number, [yMin, yMax]: [number, number]): void {
  const [left, top, height] = [76, 8, 200]
  const plotW = Math.max(50, width - left - 36)
  const cols = columns(ctx.view, left, plotW)
  const y = (v: number): number => top + height * (1 - (v - yMin) / (yMax - yMin))
  const peaks = columnPeaks(run, cols)
  // Bands whose offsets change often cost many points: past a budget, fewer allocations are
  // drawn one by one (the rest join the grey band), so any trace draws quickly.
  let detail = ctx.view.detail
  let stacked = stackBands(run, peaks.rep)
  for (;;) {
    let points = 0
    stacked.bands.forEach((b) => {
      for (let t = 1; t < b.offs.length; t++) if (b.offs[t] !== b.offs[t - 1]) points++
      points += 2
    })
    if (points <= 200_000 || detail <= 20) break
    detail = Math.max(20, Math.floor((detail * 200_000) / points))
    chooseDrawn(run, detail, ctx.view.from, ctx.view.to)
    stacked = stackBands(run, peaks.rep)
  }
  const { bands, drawnSum } = stacked
  const a = run.allocs.col
  let polys = ''
  bands.forEach((band, i) => {
    const size = a.size[i]
    const pts = stepPolygon(cols, band.j0, (t) => band.offs[t], (t) => band.offs[t] + size, band.offs.length, y)
    polys += `<polygon class="band" data-alloc="${i}" fill="${bandColor(i)}" points="${pts}"/>`
  })
  const rest = stepPolygon(cols, 0, (t) => drawnSum[t], (t) => Math.max(drawnSum[t], peaks.inUse[t]), cols.n, y)
  polys += `<polygon class="band rest" points="${rest}"/>`
  let marks = ''
  // One mark per column with a failure: a million failures stay a few shapes.
  let marked = -1
  for (const k of run.failedAt) {
    if (k < cols.b[0] || k >= cols.b[cols.n]) continue
    const c = colOf(cols, k)
    if (c === marked) continue
    marked = c
    const x = xOf(cols, k) as number
    marks += `<path class="failed" d="M${x.toFixed(1)},${top + height}l-4,7h8z"/>`
  }
  const px = xOf(cols, run.meta.peakHeldAt)
  if (px !== null) {
    // The label on the side of the line with room for it.
    const right = px > left + plotW - 280
    marks += `<line class="peak" x1="${px.toFixed(1)}" x2="${px.toFixed(1)}" y1="${top}" y2="${top + height}"/><text class="peak-label" x="${(right ? px - 4 : px + 4).toFixed(1)}" y="${top + 12}"${right ? ' text-anchor="end"' : ''}>peak held ${esc(fmtBytes(run.meta.summary.peakHeld))} after op ${esc(fmtInt(run.meta.peakHeldAt))}</text>`
  }
  marks += `<line class="picked" x1="0" x2="0" y1="${top}" y2="${top + height}" visibility="hidden"/>`
  const h = top + height + 22
  host.innerHTML = `<svg class="chart" width="${width}" height="${h}" viewBox="0 0 ${width} ${h}" role="img" aria-label="memory of ${esc(run.meta.label)} over the ops">
<clipPath id="plot-${run.index}"><rect x="${left}" y="${top}" width="${plotW}" height="${height}"/></clipPath>
<rect class="plot" x="${left}" y="${top}" width="${plotW}" height="${height}"/>${axes(cols, top, height, yMin, yMax, y, true)}
<g class="bands" clip-path="url(#plot-${run.index})">${polys}</g>
<g clip-path="url(#plot-${run.index})"><path class="series held" d="${stepPath(cols, peaks.held, y)}"/><path class="series in-use" d="${stepPath(cols, peaks.inUse, y)}"/><path class="series requested" d="${stepPath(cols, peaks.requested, y)}"/></g>
${marks}<rect class="brush" x="0" y="${top}" width="0" height="${height}"/></svg>`
  ctx.charts.push({ svg: host.querySelector('svg') as SVGSVGElement, cols })
  wireChart(ctx, host, cols, (target, k) => {
    const i = target.getAttribute('data-alloc')
    if (i !== null) return allocTip(ctx, run, Number(i))
    if (target.classList.contains('rest')) {
      const c = colOf(cols, k)
      const rk = peaks.rep[c]
      return `<b>${esc(run.meta.label)}</b>: after op ${fmtInt(rk)}, allocations smaller than the ${fmtInt(run.drawnByBorn.length)} largest hold ${esc(fmtSize(run.inUse[rk] - drawnSum[c]))} (one band; raise "bands" to draw more of them one by one)`
    }
    return opTip(run, k)
  })
}

/** What an allocation was: sizes, life, stream, address. */
function allocTip(ctx: Ctx, run: Run, i: number): string {
  const a = run.allocs.col
  const freed = a.died[i] === Infinity ? 'live at the end' : `freed at op ${fmtInt(a.died[i])}`
  return `<b>${esc(run.meta.label)}</b>: ${a.reserve[i] ? 'reserve' : 'allocation'} at ${fmtAddr(a.addr[i])}<br>size ${esc(fmtSize(a.size[i]))}, requested ${esc(fmtSize(a.requested[i]))}<br>allocated at op ${fmtInt(a.born[i])}, ${freed}<br>${esc(streamName(ctx, a.stream[i]))}`
}

/** The three numbers after op `k`. */
function opTip(run: Run, k: number): string {
  return `<b>${esc(run.meta.label)}</b> after op ${fmtInt(k)}<br>held ${esc(fmtSize(heldAt(run, k)))}<br>handed out ${esc(fmtSize(run.inUse[k]))}<br>requested ${esc(fmtSize(run.requested[k]))}`
}

/** Hover, click (pick an op) and drag (zoom into the ops dragged over) on a chart. */
function wireChart(ctx: Ctx, host: HTMLElement, cols: Cols, tip: (target: Element, k: number) => string): void {
  const svg = host.querySelector('svg') as SVGSVGElement
  const brush = svg.querySelector('.brush') as SVGRectElement
  const left = cols.x[0]
  const right = cols.x[cols.n]
  const px = (e: MouseEvent): number => e.clientX - svg.getBoundingClientRect().left
  let down: number | null = null
  svg.addEventListener('mousemove', (e) => {
    const x = px(e)
    if (down !== null) {
      const [a, b] = [Math.max(left, Math.min(down, x)), Math.min(right, Math.max(down, x))]
      brush.setAttribute('x', String(a))
      brush.setAttribute('width', String(b - a))
    }
    if (x < left || x > right) return hideTip(ctx)
    showTip(ctx, tip(e.target as Element, opAt(cols, x)), e)
  })
  svg.addEventListener('mouseleave', () => hideTip(ctx))
  svg.addEventListener('mousedown', (e) => {
    const x = px(e)
    if (x >= left && x <= right) down = x
    e.preventDefault()
  })
  svg.addEventListener('mouseup', (e) => {
    if (down === null) return
    const x = Math.max(left, Math.min(right, px(e)))
    const start = down
    down = null
    brush.setAttribute('width', '0')
    if (Math.abs(x - start) < 4) return pick(ctx, opAt(cols, x))
    const [a, b] = [opAt(cols, Math.min(start, x)), opAt(cols, Math.max(start, x))]
    zoom(ctx, a, b)
  })
  svg.addEventListener('dblclick', () => zoom(ctx, 0, ctx.data.ops))
}

function showTip(ctx: Ctx, html: string, e: MouseEvent): void {
  ctx.tip.innerHTML = html
  ctx.tip.hidden = false
  const x = Math.min(e.clientX + 14, window.innerWidth - ctx.tip.offsetWidth - 8)
  const y = e.clientY + 14 + ctx.tip.offsetHeight > window.innerHeight ? e.clientY - ctx.tip.offsetHeight - 10 : e.clientY + 14
  ctx.tip.style.left = `${Math.max(0, x)}px`
  ctx.tip.style.top = `${Math.max(0, y)}px`
}

function hideTip(ctx: Ctx): void {
  ctx.tip.hidden = true
}

/** Every config's bytes held over the whole trace on one chart, the view shaded: drag on it
 * to zoom. */
function drawOverview(ctx: Ctx, host: HTMLElement, width: number): void {
  const [left, top, height] = [76, 8, 90]
  const plotW = Math.max(50, width - left - 36)
  const whole: View = { from: 0, to: ctx.data.ops, picked: null, detail: 0, fitY: false }
  const cols = columns(whole, left, plotW)
  let yMax = 1
  const lines = ctx.runs.map((run) => {
    const p = columnPeaks(run, cols)
    yMax = Math.max(yMax, ...p.held, ...p.requested)
    return p
  })
  yMax *= 1.08
  const y = (v: number): number => top + height * (1 - v / yMax)
  let paths = ''
  lines.forEach((p, r) => {
    paths += `<path class="series overview-held" data-run="${r}" stroke="${ctx.runs[r].meta.color}" d="${stepPath(cols, p.held, y)}"/>`
  })
  if (lines.length) paths += `<path class="series requested" d="${stepPath(cols, lines[0].requested, y)}"/>`
  const x0 = xOf(cols, ctx.view.from) ?? left
  const x1 = xOf(cols, ctx.view.to) ?? left + plotW
  const h = top + height + 22
  host.innerHTML = `<svg class="overview" width="${width}" height="${h}" viewBox="0 0 ${width} ${h}" role="img" aria-label="bytes held by every config over the whole trace">
<rect class="plot" x="${left}" y="${top}" width="${plotW}" height="${height}"/>${axes(cols, top, height, 0, yMax, y, true)}${paths}
<rect class="window" x="${x0.toFixed(1)}" y="${top}" width="${Math.max(1, x1 - x0).toFixed(1)}" height="${height}"/><rect class="brush" x="0" y="${top}" width="0" height="${height}"/></svg>`
  wireChart(ctx, host, cols, (_t, k) => ctx.runs.map((run) => `<span style="color:${run.meta.color}">■</span> ${esc(run.meta.label)}: held ${esc(fmtBytes(heldAt(run, k)))}`).join('<br>') + `<br>after op ${fmtInt(k)}`)
}

/** One piece of the map: part of a chunk on one row. */
interface Piece {
  x: number
  row: number
  w: number
}

/** The regions and chunks of `run` after op `k`, laid out in rows of `perRow` bytes, in
 * address order: every region from a new cell, wrapping onto the next row. */
function drawMap(ctx: Ctx, run: Run, host: HTMLElement, k: number, width: number, perRow: number, atPeak: boolean): void {
  const title = `${esc(run.meta.label)}: ${atPeak ? `at peak held, after op ${fmtInt(k)}` : `after op ${fmtInt(k)}`}`
  if (!run.meta.layout) {
    host.innerHTML = `<figcaption>${title}</figcaption><p class="no-map">A memory pool has no regions or chunks: it holds each block from the device as it was asked for, and keeps freed blocks for reuse. Held, above, is what it keeps (live blocks and its cache).</p>`
    return
  }
  const live = (born: number, died: number): boolean => born <= k && k < died
  const a = run.allocs.col
  const used: number[] = []
  const reserves: number[] = []
  for (let i = 0; i < run.allocs.rows; i++) {
    if (a.size[i] > 0 && live(a.born[i], a.died[i])) (a.reserve[i] ? reserves : used).push(i)
  }
  used.sort((x, y) => a.addr[x] - a.addr[y])
  reserves.sort((x, y) => a.addr[x] - a.addr[y])
  const sf = run.streamFree.col
  const owned: number[] = []
  for (let i = 0; i < run.streamFree.rows; i++) if (live(sf.born[i], sf.died[i])) owned.push(i)
  owned.sort((x, y) => sf.addr[x] - sf.addr[y])
  const rg = run.regions.col
  const regions: number[] = []
  for (let i = 0; i < run.regions.rows; i++) if (live(rg.born[i], rg.died[i])) regions.push(i)
  regions.sort((x, y) => rg.base[x] - rg.base[y])

  const pad = 4
  const rowW = width - 2 * pad
  const rowH = 14
  const gapPx = 3
  const gap = (gapPx / rowW) * perRow
  let cursor = 0
  let shapes = ''
  let maxRow = 0
  /** Pieces of `bytes` bytes from `cursor`, split at row ends. */
  const pieces = (at: number, bytes: number): Piece[] => {
    const out: Piece[] = []
    let start = at
    const end = at + bytes
    while (start < end) {
      const row = Math.floor(start / perRow)
      const rowEnd = (row + 1) * perRow
      const stop = Math.min(end, rowEnd)
      out.push({ x: pad + ((start - row * perRow) / perRow) * rowW, row, w: ((stop - start) / perRow) * rowW })
      maxRow = Math.max(maxRow, row)
      start = stop
    }
    return out
  }
  const rect = (p: Piece, cls: string, attrs: string, part: number): string =>
    `<rect class="${cls}" x="${p.x.toFixed(2)}" y="${p.row * (rowH + 4) + 2}" width="${Math.max(0.4, p.w).toFixed(2)}" height="${rowH - 4}"${attrs}${part ? ` data-part="${part}"` : ''}/>`
  // Past this many chunks, runs of chunks under a pixel wide are drawn as one shape each (the
  // page stays quick with a million allocations live); their tooltip counts them.
  const dense = 2 * (used.length + owned.length) > 20_000
  let many: { p: Piece; count: number; used: number; free: number } | null = null
  const flush = (): void => {
    if (many) shapes += rect(many.p, 'chunk many', ` data-count="${many.count}" data-used="${many.used}" data-free="${many.free}"`, 0)
    many = null
  }
  const chunk = (region: number, addr: number, size: number, cls: string, attrs: string): void => {
    pieces(cursor + (addr - rg.base[region]), size).forEach((p, n) => {
      if (dense && p.w < 1) {
        if (!many || many.p.row !== p.row || p.x - (many.p.x + many.p.w) > 0.01) {
          flush()
          many = { p: { ...p }, count: 0, used: 0, free: 0 }
        }
        many.p.w = p.x + p.w - many.p.x
        if (n === 0) many.count++
        const bytes = (p.w / rowW) * perRow
        if (cls.startsWith('chunk used')) many.used += bytes
        else many.free += bytes
        return
      }
      flush()
      shapes += rect(p, cls, ` data-addr="${addr}" data-size="${size}"${attrs}`, n)
    })
  }
  let u = 0
  let o = 0
  let usedBytes = 0
  let freeBytes = 0
  let ownedBytes = 0
  let chunkCount = 0
  for (const r of regions) {
    const base = rg.base[r]
    const end = base + rg.size[r]
    pieces(cursor, rg.size[r]).forEach((p) => {
      shapes += `<rect class="region" x="${p.x.toFixed(2)}" y="${p.row * (rowH + 4)}" width="${Math.max(0.5, p.w).toFixed(2)}" height="${rowH}" data-region="${rg.id[r]}"/>`
    })
    let at = base
    const free = (upTo: number): void => {
      if (upTo > at) {
        chunk(r, at, upTo - at, 'chunk free', ' data-state="free" data-stream="0"')
        freeBytes += upTo - at
        chunkCount++
      }
    }
    while (u < used.length || o < owned.length) {
      const nextUsed = u < used.length ? a.addr[used[u]] : Infinity
      const nextOwned = o < owned.length ? sf.addr[owned[o]] : Infinity
      const addr = Math.min(nextUsed, nextOwned)
      if (addr >= end) break
      free(addr)
      if (nextUsed <= nextOwned) {
        const i = used[u++]
        const s = a.stream[i]
        chunk(r, addr, a.size[i], s ? 'chunk used on-stream' : 'chunk used', ` data-state="in-use" data-stream="${s}" data-requested="${a.requested[i]}" data-alloc="${i}"`)
        usedBytes += a.size[i]
        at = addr + a.size[i]
      } else {
        const i = owned[o++]
        chunk(r, addr, sf.size[i], 'chunk free owned', ` data-state="free" data-stream="${sf.stream[i]}"`)
        freeBytes += sf.size[i]
        ownedBytes += sf.size[i]
        at = addr + sf.size[i]
      }
      chunkCount++
    }
    free(end)
    flush()
    // A gap of a few pixels between regions.
    cursor += rg.size[r] + gap
  }
  if (reserves.length) {
    cursor = Math.ceil(cursor / perRow) * perRow
    for (const i of reserves) {
      pieces(cursor, a.size[i]).forEach((p, n) => {
        shapes += rect(p, 'chunk reserve', ` data-addr="${a.addr[i]}" data-size="${a.size[i]}" data-state="reserve" data-alloc="${i}"`, n)
      })
      cursor += a.size[i] + gap
    }
  }
  const h = (maxRow + 1) * (rowH + 4) + 4
  const held = heldAt(run, k)
  host.innerHTML = `<figcaption>${title}</figcaption>
<p class="map-note">held ${esc(fmtBytes(held))} in ${fmtInt(regions.length)} region${regions.length === 1 ? '' : 's'}${reserves.length ? ` and ${fmtInt(reserves.length)} reserve${reserves.length === 1 ? '' : 's'}` : ''} · in use ${esc(fmtBytes(usedBytes))} · free ${esc(fmtBytes(freeBytes))}${ownedBytes ? ` (${esc(fmtBytes(ownedBytes))} owned by streams)` : ''} · ${fmtInt(chunkCount)} chunks</p>
<svg class="map" data-op="${k}" width="${width}" height="${h}" viewBox="0 0 ${width} ${h}" role="img" aria-label="regions and chunks of ${esc(run.meta.label)} after op ${k}">${shapes}</svg>`
  const svg = host.querySelector('svg') as SVGSVGElement
  svg.addEventListener('mousemove', (e) => {
    const t = e.target as Element
    if (!t.classList.contains('chunk')) return hideTip(ctx)
    if (t.classList.contains('many')) {
      const count = Number(t.getAttribute('data-count'))
      return showTip(ctx, `<b>${esc(run.meta.label)}</b>: ${fmtInt(count)} chunks under a pixel wide each, drawn as one: about ${esc(fmtBytes(Number(t.getAttribute('data-used'))))} in use, ${esc(fmtBytes(Number(t.getAttribute('data-free'))))} free<br>after op ${fmtInt(k)}`, e)
    }
    const i = t.getAttribute('data-alloc')
    if (i !== null) return showTip(ctx, `${allocTip(ctx, run, Number(i))}<br>(chunk ${t.getAttribute('data-part') ? 'continued' : 'shown'} after op ${fmtInt(k)})`, e)
    const stream = Number(t.getAttribute('data-stream'))
    const size = Number(t.getAttribute('data-size'))
    const owner = stream ? `owned by ${esc(streamName(ctx, stream))}: another stream takes it only once that stream's work up to its free is done` : 'owned by no stream'
    showTip(ctx, `<b>${esc(run.meta.label)}</b>: free chunk at ${fmtAddr(Number(t.getAttribute('data-addr')))}<br>size ${esc(fmtSize(size))}<br>${owner}<br>after op ${fmtInt(k)}`, e)
  })
  svg.addEventListener('mouseleave', () => hideTip(ctx))
}

/** Moves every timeline's line to the picked op (hidden when none is picked or it is out of view). */
function showPicked(ctx: Ctx): void {
  for (const { svg, cols } of ctx.charts) {
    const line = svg.querySelector('line.picked') as SVGLineElement
    const x = ctx.view.picked === null ? null : xOf(cols, ctx.view.picked)
    line.setAttribute('visibility', x === null ? 'hidden' : 'visible')
    if (x !== null) {
      line.setAttribute('x1', x.toFixed(1))
      line.setAttribute('x2', x.toFixed(1))
    }
  }
}

/** Draws every chart and map for the current view. */
function render(ctx: Ctx): void {
  const started = performance.now()
  const main = document.getElementById('report') as HTMLElement
  const width = Math.max(480, main.clientWidth)
  ctx.charts = []
  drawOverview(ctx, document.getElementById('overview') as HTMLElement, width)
  const yRange = yRangeInView(ctx)
  ctx.runs.forEach((run) => {
    chooseDrawn(run, ctx.view.detail, ctx.view.from, ctx.view.to)
    drawTimeline(ctx, run, document.querySelector(`.timeline[data-run="${run.index}"]`) as HTMLElement, width, yRange)
  })
  renderMaps(ctx)
  showPicked(ctx)
  const range = document.getElementById('range') as HTMLElement
  range.textContent = `ops ${fmtInt(ctx.view.from)} … ${fmtInt(ctx.view.to)} of ${fmtInt(ctx.data.ops)}`
  document.documentElement.dataset.lastRenderMs = (performance.now() - started).toFixed(0)
}

/** The maps side by side, at the picked op or each at its own peak. */
function renderMaps(ctx: Ctx): void {
  const host = document.getElementById('maps') as HTMLElement
  const figs = Array.from(host.querySelectorAll<HTMLElement>('figure.map-fig'))
  const width = Math.max(300, Math.floor((host.clientWidth - 16 * (figs.length - 1)) / Math.max(1, figs.length)))
  // One scale for every map, so their heights compare: the most held fills 24 rows.
  const most = Math.max(1, ...ctx.runs.filter((r) => r.meta.layout).map((r) => r.meta.summary.peakHeld))
  const perRow = 2 ** Math.ceil(Math.log2(most / 24))
  const note = document.getElementById('map-scale') as HTMLElement
  note.textContent = `Each row is ${fmtBytes(perRow)}; a region starts a new cell. In use: red (on a stream: purple); free: green (owned by a stream: amber); reserves: grey; runs of chunks under a pixel wide each, drawn as one: salmon.`
  ctx.runs.forEach((run, r) => {
    const k = ctx.view.picked ?? run.meta.peakHeldAt
    drawMap(ctx, run, figs[r], k, width, perRow, ctx.view.picked === null)
  })
  const slider = document.getElementById('op') as HTMLInputElement
  const number = document.getElementById('op-number') as HTMLInputElement
  if (ctx.view.picked !== null) {
    slider.value = String(ctx.view.picked)
    number.value = String(ctx.view.picked)
  }
}

/** Shows the maps after op `k` (null: each config at its own peak). */
function pick(ctx: Ctx, k: number | null): void {
  ctx.view.picked = k === null ? null : Math.max(0, Math.min(ctx.data.ops, Math.round(k)))
  renderMaps(ctx)
  showPicked(ctx)
}

function zoom(ctx: Ctx, from: number, to: number): void {
  from = Math.max(0, Math.min(ctx.data.ops, Math.round(from)))
  to = Math.max(0, Math.min(ctx.data.ops, Math.round(to)))
  if (to - from < 2) {
    const mid = Math.round((from + to) / 2)
    from = Math.max(0, mid - 1)
    to = Math.min(ctx.data.ops, from + 2)
  }
  ctx.view.from = from
  ctx.view.to = to
  render(ctx)
}

/** The blob's bytes: base64, gunzipped by the browser. */
async function unzip(b64: string): Promise<Uint8Array> {
  const bin = atob(b64)
  const bytes = new Uint8Array(bin.length)
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i)
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'))
  return new Uint8Array(await new Response(stream).arrayBuffer())
}

/** Wires the controls: op slider and number, each config's peak, zoom, bands. */
function wireControls(ctx: Ctx): void {
  const slider = document.getElementById('op') as HTMLInputElement
  const number = document.getElementById('op-number') as HTMLInputElement
  // A slider dragged fires faster than a big map draws: draw once per frame.
  let frame = 0
  slider.addEventListener('input', () => {
    cancelAnimationFrame(frame)
    frame = requestAnimationFrame(() => pick(ctx, Number(slider.value)))
  })
  number.addEventListener('change', () => {
    if (number.value !== '' && Number.isFinite(Number(number.value))) pick(ctx, Number(number.value))
  })
  ;(document.getElementById('at-peaks') as HTMLButtonElement).addEventListener('click', () => pick(ctx, null))
  ;(document.getElementById('zoom-reset') as HTMLButtonElement).addEventListener('click', () => zoom(ctx, 0, ctx.data.ops))
  ;(document.getElementById('zoom-out') as HTMLButtonElement).addEventListener('click', () => {
    const span = ctx.view.to - ctx.view.from
    zoom(ctx, ctx.view.from - span / 2, ctx.view.to + span / 2)
  })
  const fitY = document.getElementById('fit-y') as HTMLInputElement
  fitY.addEventListener('change', () => {
    ctx.view.fitY = fitY.checked
    render(ctx)
  })
  const detail = document.getElementById('detail') as HTMLInputElement
  const detailOut = document.getElementById('detail-value') as HTMLElement
  detail.addEventListener('change', () => {
    ctx.view.detail = Number(detail.value)
    detailOut.textContent = fmtInt(ctx.view.detail)
    render(ctx)
  })
  let timer = 0
  window.addEventListener('resize', () => {
    clearTimeout(timer)
    timer = window.setTimeout(() => render(ctx), 150)
  })
}

/** The page's entry: reads its data, draws, and marks the document ready (with the time it
 * took since navigation started, in `data-render-ms`). */
function cudaArenaReport(): void {
  const data = JSON.parse((document.getElementById('report-data') as HTMLElement).textContent ?? '{}') as PageData
  const b64 = (document.getElementById('report-blob') as HTMLElement).textContent ?? ''
  const detail = Number((document.getElementById('detail') as HTMLInputElement).value)
  unzip(b64.trim())
    .then((bytes) => {
      const runs = data.runs.map((meta, i) => loadRun(meta, i, bytes, data.ops, detail))
      const ctx: Ctx = { data, runs, view: { from: 0, to: data.ops, picked: null, detail, fitY: false }, tip: document.getElementById('tip') as HTMLElement, charts: [] }
      wireControls(ctx)
      render(ctx)
      document.documentElement.dataset.renderMs = performance.now().toFixed(0)
      document.documentElement.dataset.ready = '1'
    })
    .catch((e: unknown) => {
      const p = document.getElementById('failed') as HTMLElement
      p.hidden = false
      p.textContent = `This page could not draw its picture: ${e instanceof Error ? e.message : String(e)}`
      document.documentElement.dataset.ready = 'failed'
    })
}

/** The page's script: every function above by its source, then the call of the entry. Run
 * through tsx (the tests), esbuild keeps function names with a `__name` helper the page
 * does not have; it is defined as doing nothing. */
export const PAGE_SCRIPT = [
  'var __name = function (f) { return f; };',
  ...[
    readVarints,
    unpackTable,
    loadRun,
    chooseDrawn,
    heldAt,
    esc,
    fmtBytes,
    fmtInt,
    fmtSize,
    fmtAddr,
    streamName,
    bandColor,
    ticks,
    byteTicks,
    columns,
    opAt,
    colOf,
    xOf,
    columnPeaks,
    stackBands,
    stepPolygon,
    stepPath,
    yRangeInView,
    axes,
    drawTimeline,
    allocTip,
    opTip,
    wireChart,
    showTip,
    hideTip,
    drawOverview,
    drawMap,
    showPicked,
    render,
    renderMaps,
    pick,
    zoom,
    unzip,
    wireControls,
    cudaArenaReport,
  ].map((f) => f.toString()),
  'cudaArenaReport();',
].join('\n')
