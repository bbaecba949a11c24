/// <reference lib="dom" />
/** The charts over the ops: per config, the bytes held, handed out and requested, with the
 * live allocations stacked as bands; the overview of every config's bytes held. */
import type * as data from './data'
import type * as format from './format'
import type * as geometry from './geometry'
import type * as interaction from './interaction'
import type { Cols, Ctx, PageFunction, Run, View } from './model'

// Other modules' page functions, called by name: in the page every module's functions share
// one scope (script.ts); a value import would compile to `module_1.fn`, which the page lacks.
declare const { chooseDrawn, heldAt }: typeof data
declare const { esc, fmtBytes, fmtInt, fmtSize }: typeof format
declare const { columns, colOf, xOf, stepPolygon, stepPath, axes }: typeof geometry
declare const { allocTip, opTip, wireChart }: typeof interaction

/** A colour of its own for allocation `i`. */
export function bandColor(i: number): string {
  const palette = ['#4e79a7', '#f28e2c', '#e15759', '#76b7b2', '#59a14f', '#edc949', '#af7aa1', '#ff9da7', '#9c755f', '#bab0ab']
  return palette[(i * 2654435761) % 2 ** 32 % palette.length]
}

/** Per column: the op with the most bytes handed out (the stack is drawn there), and the
 * most bytes held, handed out and requested in it. */
export function columnPeaks(run: Run, cols: Cols): { rep: Float64Array; held: Float64Array; inUse: Float64Array; requested: Float64Array } {
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
export function stackBands(run: Run, rep: Float64Array): { bands: Map<number, { j0: number; offs: number[] }>; drawnSum: Float64Array } {
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

/** The timelines' common bytes axis: 0 (or, fitted, a little under the least requested
 * in view) to a little over the most held in view, over every config. */
export function yRangeInView(ctx: Ctx): [number, number] {
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

/** One config's timeline: bands, lines, its peak, failed allocations, the picked op. */
export function drawTimeline(ctx: Ctx, run: Run, host: HTMLElement, width: number, [yMin, yMax]: [number, number]): void {
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

/** Every config's bytes held over the whole trace on one chart, the view shaded: drag on it
 * to zoom. */
export function drawOverview(ctx: Ctx, host: HTMLElement, width: number): void {
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

/** Moves every timeline's line to the picked op (hidden when none is picked or it is out of view). */
export function showPicked(ctx: Ctx): void {
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

/** This module's page functions, put into the page by their source (script.ts). */
export const TIMELINE_FUNCTIONS: PageFunction[] = [bandColor, columnPeaks, stackBands, yRangeInView, drawTimeline, drawOverview, showPicked]
