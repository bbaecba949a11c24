/// <reference lib="dom" />
/** The maps: each config's regions and chunks after an op, side by side on one scale. */
import type * as data from './data'
import type * as format from './format'
import type * as interaction from './interaction'
import type { Ctx, PageFunction, Run } from './model'

// Other modules' page functions, called by name: in the page every module's functions share
// one scope (script.ts); a value import would compile to `module_1.fn`, which the page lacks.
declare const { heldAt }: typeof data
declare const { esc, fmtBytes, fmtInt, fmtSize, fmtAddr, streamName }: typeof format
declare const { allocTip, showTip, hideTip }: typeof interaction

/** One piece of the map: part of a chunk on one row. */
interface Piece {
  x: number
  row: number
  w: number
}

/** The regions and chunks of `run` after op `k`, laid out in rows of `perRow` bytes, in
 * address order: every region from a new cell, wrapping onto the next row. */
export function drawMap(ctx: Ctx, run: Run, host: HTMLElement, k: number, width: number, perRow: number, atPeak: boolean): void {
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

/** The maps side by side, at the picked op or each at its own peak. */
export function renderMaps(ctx: Ctx): void {
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

/** This module's page functions, put into the page by their source (script.ts). */
export const MAP_FUNCTIONS: PageFunction[] = [drawMap, renderMaps]
