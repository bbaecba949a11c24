/// <reference lib="dom" />
/** What the reader does: tooltips; hovering, clicking (picking an op) and dragging (zooming)
 * on a chart; the controls. */
import type * as data from './data'
import type * as format from './format'
import type * as geometry from './geometry'
import type * as main from './main'
import type * as map from './map'
import type { Cols, Ctx, PageFunction, Run } from './model'
import type * as timeline from './timeline'

// Other modules' page functions, called by name: in the page every module's functions share
// one scope (script.ts); a value import would compile to `module_1.fn`, which the page lacks.
declare const { heldAt }: typeof data
declare const { esc, fmtInt, fmtSize, fmtAddr, streamName }: typeof format
declare const { opAt }: typeof geometry
declare const { render }: typeof main
declare const { renderMaps }: typeof map
declare const { showPicked }: typeof timeline

/** What an allocation was: sizes, life, stream, address. */
export function allocTip(ctx: Ctx, run: Run, i: number): string {
  const a = run.allocs.col
  const freed = a.died[i] === Infinity ? 'live at the end' : `freed at op ${fmtInt(a.died[i])}`
  return `<b>${esc(run.meta.label)}</b>: ${a.reserve[i] ? 'reserve' : 'allocation'} at ${fmtAddr(a.addr[i])}<br>size ${esc(fmtSize(a.size[i]))}, requested ${esc(fmtSize(a.requested[i]))}<br>allocated at op ${fmtInt(a.born[i])}, ${freed}<br>${esc(streamName(ctx, a.stream[i]))}`
}

/** The three numbers after op `k`. */
export function opTip(run: Run, k: number): string {
  return `<b>${esc(run.meta.label)}</b> after op ${fmtInt(k)}<br>held ${esc(fmtSize(heldAt(run, k)))}<br>handed out ${esc(fmtSize(run.inUse[k]))}<br>requested ${esc(fmtSize(run.requested[k]))}`
}

/** Hover, click (pick an op) and drag (zoom into the ops dragged over) on a chart. */
export function wireChart(ctx: Ctx, host: HTMLElement, cols: Cols, tip: (target: Element, k: number) => string): void {
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

export function showTip(ctx: Ctx, html: string, e: MouseEvent): void {
  ctx.tip.innerHTML = html
  ctx.tip.hidden = false
  const x = Math.min(e.clientX + 14, window.innerWidth - ctx.tip.offsetWidth - 8)
  const y = e.clientY + 14 + ctx.tip.offsetHeight > window.innerHeight ? e.clientY - ctx.tip.offsetHeight - 10 : e.clientY + 14
  ctx.tip.style.left = `${Math.max(0, x)}px`
  ctx.tip.style.top = `${Math.max(0, y)}px`
}

export function hideTip(ctx: Ctx): void {
  ctx.tip.hidden = true
}

/** Shows the maps after op `k` (null: each config at its own peak). */
export function pick(ctx: Ctx, k: number | null): void {
  ctx.view.picked = k === null ? null : Math.max(0, Math.min(ctx.data.ops, Math.round(k)))
  renderMaps(ctx)
  showPicked(ctx)
}

export function zoom(ctx: Ctx, from: number, to: number): void {
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

/** Wires the controls: op slider and number, each config's peak, zoom, bands. */
export function wireControls(ctx: Ctx): void {
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

/** This module's page functions, put into the page by their source (script.ts). */
export const INTERACTION_FUNCTIONS: PageFunction[] = [allocTip, opTip, wireChart, showTip, hideTip, pick, zoom, wireControls]
