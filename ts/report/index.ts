/**
 * The `--html` page of `cuda-arena replay`: one self-contained file (inline CSS, script and
 * data; it fetches nothing). A summary table; every config's bytes held on one overview;
 * per config, the bytes held, handed out and requested over the ops with the live
 * allocations stacked as bands; and the regions and chunks of each config side by side, at
 * its peak held or after any op picked. docs/replay-report.md says how to read it.
 */
import { Packer } from './pack'
import { PAGE_SCRIPT } from './page/script'
import { STYLE } from './style'
import type { PageData, PageRun } from './types'

/** One config's replay, as `replayTraceFile` gave it with `picture: true`. */
export interface ReportRun {
  label: string
  /** `arena` or `memory pool`. */
  allocator: string
  ops: number
  peakRequested: number
  peakHeld: number
  failedAllocs: number
  elapsedNs: number
  stats: { numArenaExtensions: bigint | number; numArenaShrinkages: bigint | number; totalAllocated: bigint | number; maxInUse: bigint | number }
  picture: {
    allocs: Float64Array
    regions: Float64Array
    streamFree: Float64Array
    held: Float64Array
    peakHeldAt: number
    checks: number
    mismatches: number
  }
}

/** The page's heading, its line on the trace, and the configs. */
export interface ReportInput {
  title: string
  subtitle: string
  /** Operations in the trace. */
  ops: number
  /** Names of the trace's streams by number, from 1 (a PyTorch snapshot's stream handles). */
  streams?: string[]
  runs: ReportRun[]
}

/** How many allocations are drawn as bands of their own: the largest live in the ops in
 * view (the page's "bands" control changes it). */
export const DEFAULT_BANDS = 2000

const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#8c564b', '#e377c2', '#17becf', '#bcbd22']

const esc = (s: string): string => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`)
const mib = (n: number): string => `${(n / 2 ** 20).toFixed(1)} MiB`

function summaryTable(runs: PageRun[]): string {
  const head = ['config', 'allocator', 'peak held', 'peak requested', 'held/requested', 'extensions', 'shrinkages', 'failed allocs', 'ns/op', 'held at end', 'MaxInUse', 'peak held after op']
  const rows = runs.map((r) => {
    const s = r.summary
    const cells = [
      mib(s.peakHeld),
      mib(s.peakRequested),
      (s.peakHeld / Math.max(1, s.peakRequested)).toFixed(3),
      s.extensions === null ? 'n/a' : s.extensions.toLocaleString('en'),
      s.shrinkages.toLocaleString('en'),
      s.failedAllocs.toLocaleString('en'),
      s.nsPerOp.toFixed(1),
      mib(s.heldAtEnd),
      mib(s.maxInUse),
      r.peakHeldAt.toLocaleString('en'),
    ]
    return `<tr><th scope="row"><span class="swatch" style="background:${r.color}"></span>${esc(r.label)}</th><td>${esc(r.allocator)}</td>${cells.map((c) => `<td>${esc(c)}</td>`).join('')}</tr>`
  })
  return `<table class="summary"><thead><tr>${head.map((h) => `<th scope="col">${esc(h)}</th>`).join('')}</tr></thead><tbody>${rows.join('')}</tbody></table>`
}

/** The whole page. */
export function renderReport(input: ReportInput): string {
  const packer = new Packer()
  const runs: PageRun[] = input.runs.map((r, i) => ({
    label: r.label,
    color: COLORS[i % COLORS.length],
    allocator: r.allocator,
    layout: r.allocator !== 'memory pool',
    summary: {
      peakHeld: r.peakHeld,
      peakRequested: r.peakRequested,
      extensions: r.allocator === 'memory pool' ? null : Number(r.stats.numArenaExtensions),
      shrinkages: Number(r.stats.numArenaShrinkages),
      failedAllocs: r.failedAllocs,
      nsPerOp: r.elapsedNs / Math.max(1, r.ops),
      heldAtEnd: Number(r.stats.totalAllocated),
      maxInUse: Number(r.stats.maxInUse),
    },
    peakHeldAt: r.picture.peakHeldAt,
    checks: r.picture.checks,
    mismatches: r.picture.mismatches,
    tables: {
      allocs: packer.table('allocs', r.picture.allocs),
      regions: packer.table('regions', r.picture.regions),
      streamFree: packer.table('streamFree', r.picture.streamFree),
      held: packer.table('held', r.picture.held),
    },
  }))
  const data: PageData = { title: input.title, subtitle: input.subtitle, ops: input.ops, streams: ['', ...(input.streams ?? [])], runs }
  // `<` escaped so no string in the data can close the script element.
  const json = JSON.stringify(data).replace(/</g, '\\u003c')
  const mismatched = runs.filter((r) => r.mismatches > 0)
  const warning = mismatched.length
    ? `<p class="warning">The free chunks streams own differed from the allocator's memory log at ${mismatched.map((r) => `${r.mismatches} of ${r.checks} checks for ${esc(r.label)}`).join(', ')}; there they were read again from the log.</p>`
    : ''
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>${esc(input.title)}</title>
<style>${STYLE}</style></head>
<body><main id="report">
<h1>${esc(input.title)}</h1>
<p class="sub">${esc(input.subtitle)}</p>
${summaryTable(runs)}
${warning}<p id="failed" class="warning" hidden></p>
<div id="controls" class="controls">
<label>maps after op <input id="op" type="range" min="0" max="${input.ops}" value="0"> <input id="op-number" type="number" min="0" max="${input.ops}" placeholder="op"></label>
<button id="at-peaks" type="button">each at its peak held</button>
<span class="sep"></span>
<span id="range"></span> <button id="zoom-out" type="button">zoom out</button> <button id="zoom-reset" type="button">whole trace</button>
<label><input id="fit-y" type="checkbox"> bytes axis fitted to the ops in view</label>
<span class="sep"></span>
<label>bands <input id="detail" type="range" min="100" max="20000" step="100" value="${DEFAULT_BANDS}"> <output id="detail-value">${DEFAULT_BANDS.toLocaleString('en')}</output> largest</label>
</div>
<p class="help">Drag across a chart to zoom into those ops, double-click it for the whole trace, click it to see the maps after that op. Hover for numbers.</p>
<h2>Bytes held, every config</h2>
<div id="overview"></div>
${runs
  .map(
    (r, i) => `<section class="run" data-run="${i}">
<h2><span class="swatch" style="background:${r.color}"></span>${esc(r.label)} <small>${esc(r.allocator)}</small></h2>
<div class="timeline" data-run="${i}"></div>
</section>`,
  )
  .join('\n')}
<p class="legend"><span class="key held"></span>held from the device <span class="key in-use"></span>handed out (InUse) <span class="key requested"></span>requested <span class="key rest"></span>smaller allocations <span class="key failed"></span>failed allocation <span class="key peak"></span>peak held <span class="key picked"></span>op picked</p>
<h2>Regions and chunks</h2>
<p id="map-scale" class="help"></p>
<div id="maps" class="maps">${runs.map((_, i) => `<figure class="map-fig" data-run="${i}"></figure>`).join('')}</div>
</main>
<div id="tip" class="tip" role="tooltip" hidden></div>
<script type="application/json" id="report-data">${json}</script>
<script type="text/plain" id="report-blob">${packer.finish()}</script>
<script>
${PAGE_SCRIPT}
</script>
</body></html>
`
}
