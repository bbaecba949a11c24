/// <reference lib="dom" />
/** The page's entry, and drawing the whole page for the current view. */
import type { PageData } from '../types'
import type * as data from './data'
import type * as format from './format'
import type * as interaction from './interaction'
import type * as map from './map'
import type { Ctx, PageFunction } from './model'
import type * as timeline from './timeline'

// Other modules' page functions, called by name: in the page every module's functions share
// one scope (script.ts); a value import would compile to `module_1.fn`, which the page lacks.
declare const { loadRun, chooseDrawn, unzip }: typeof data
declare const { fmtInt }: typeof format
declare const { wireControls }: typeof interaction
declare const { renderMaps }: typeof map
declare const { yRangeInView, drawTimeline, drawOverview, showPicked }: typeof timeline

/** Draws every chart and map for the current view. */
export function render(ctx: Ctx): void {
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

/** The page's entry: reads its data, draws, and marks the document ready (with the time it
 * took since navigation started, in `data-render-ms`). */
export function cudaArenaReport(): void {
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

/** This module's page functions, put into the page by their source (script.ts). */
export const MAIN_FUNCTIONS: PageFunction[] = [render, cudaArenaReport]
