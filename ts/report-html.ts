/**
 * The `--html` page of `cuda-arena replay`: one self-contained file (inline SVG and CSS, no
 * scripts, nothing fetched) drawing, per config, memory held, handed out and requested over
 * the replay, and the final map of regions and chunks.
 */

/** What the page needs of one config's replay (a subset of `replay --json`). */
export interface ReportRun {
  label: string
  /** What the config selected: `arena` (the default) or `memory pool`. */
  allocator?: string
  ops: number
  peakRequested: number
  peakHeld: number
  /** `[op, held, inUse, requested]`. */
  samples: number[][]
  memoryLog: { regions: { id: number | bigint; base: number | bigint; size: number | bigint; chunks: { addr: number | bigint; size: number | bigint; inUse: boolean }[] }[] }
}

const esc = (s: string): string => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`)
const mib = (n: number): string => `${(n / 2 ** 20).toFixed(1)} MiB`
const SERIES = [
  { index: 1, name: 'held from the device', color: '#1f77b4' },
  { index: 2, name: 'handed out (InUse)', color: '#ff7f0e' },
  { index: 3, name: 'requested', color: '#2ca02c' },
] as const

function chart(run: ReportRun): string {
  const [w, h, left, bottom, top] = [900, 260, 80, 36, 14]
  const maxOp = Math.max(1, ...run.samples.map((s) => s[0]))
  const maxY = Math.max(1, ...run.samples.map((s) => s[1]))
  const x = (op: number): number => left + ((w - left - 10) * op) / maxOp
  const y = (v: number): number => top + (h - top - bottom) * (1 - v / maxY)
  const ticks = [0, 0.25, 0.5, 0.75, 1]
    .map((f) => `<line x1="${left}" x2="${w - 10}" y1="${y(f * maxY)}" y2="${y(f * maxY)}" class="grid"/><text x="${left - 6}" y="${y(f * maxY) + 4}" text-anchor="end">${esc(mib(f * maxY))}</text>`)
    .join('')
  const lines = SERIES.map(
    (s) => `<polyline class="series" fill="none" stroke="${s.color}" stroke-width="2" points="${run.samples.map((p) => `${x(p[0]).toFixed(1)},${y(p[s.index]).toFixed(1)}`).join(' ')}"/>`,
  ).join('')
  const legend = SERIES.map((s, i) => `<rect x="${left + 10 + i * 190}" y="${h - 14}" width="12" height="12" fill="${s.color}"/><text x="${left + 28 + i * 190}" y="${h - 4}">${esc(s.name)}</text>`).join('')
  return `<svg class="chart" width="${w}" height="${h}" viewBox="0 0 ${w} ${h}" role="img" aria-label="memory over the replay">
<title>Memory over the replay: ${esc(run.label)}</title>${ticks}
<line x1="${left}" x2="${left}" y1="${top}" y2="${h - bottom}" class="axis"/><line x1="${left}" x2="${w - 10}" y1="${h - bottom}" y2="${h - bottom}" class="axis"/>
<text x="${(w + left) / 2}" y="${h - bottom + 16}" text-anchor="middle">operations (0 … ${maxOp.toLocaleString('en')})</text>${lines}${legend}</svg>`
}

function regionMap(run: ReportRun): string {
  if (run.allocator === 'memory pool') {
    return '<p class="no-map">A memory pool has no regions or chunks: it holds each block from the device as it was asked for, and keeps freed blocks for reuse. Held, above, is what it keeps (live blocks and its cache).</p>'
  }
  const regions = run.memoryLog.regions
  const w = 900
  const rowH = 18
  const maxSize = Math.max(1, ...regions.map((r) => Number(r.size)))
  const rows = regions
    .map((r, i) => {
      const width = Math.max(2, ((w - 200) * Number(r.size)) / maxSize)
      const y = 10 + i * (rowH + 6)
      const chunks = r.chunks
        .map((c) => {
          const cx = 190 + (width * Number(BigInt(c.addr) - BigInt(r.base))) / Number(r.size)
          const cw = Math.max(0.5, (width * Number(c.size)) / Number(r.size))
          return `<rect class="chunk ${c.inUse ? 'used' : 'free'}" x="${cx.toFixed(2)}" y="${y + 2}" width="${cw.toFixed(2)}" height="${rowH - 4}"/>`
        })
        .join('')
      return `<text x="180" y="${y + 13}" text-anchor="end">region ${esc(String(r.id))} · ${esc(mib(Number(r.size)))}</text><rect class="region" data-region="${esc(String(r.id))}" x="190" y="${y}" width="${width.toFixed(2)}" height="${rowH}"/>${chunks}`
    })
    .join('')
  const h = 30 + regions.length * (rowH + 6)
  return `<svg class="map" width="${w}" height="${h}" viewBox="0 0 ${w} ${h}" role="img" aria-label="regions and chunks">
<title>Regions and chunks after the replay: ${esc(run.label)}</title>${rows}
<rect x="190" y="${h - 16}" width="12" height="12" class="chunk used"/><text x="208" y="${h - 6}">chunk in use</text>
<rect x="320" y="${h - 16}" width="12" height="12" class="chunk free"/><text x="338" y="${h - 6}">free chunk</text></svg>`
}

/** The whole page. */
export function renderReport(title: string, runs: ReportRun[]): string {
  const sections = runs
    .map(
      (r) => `<section><h2>${esc(r.label)}</h2>
<p>${esc(r.allocator ?? 'arena')} · ${r.ops.toLocaleString('en')} operations · peak requested ${esc(mib(r.peakRequested))} · peak held ${esc(mib(r.peakHeld))} · held/requested ${(r.peakHeld / Math.max(1, r.peakRequested)).toFixed(3)}</p>
${chart(r)}
<h3>${r.allocator === 'memory pool' ? 'At the end' : 'Regions and chunks at the end'}</h3>
${regionMap(r)}</section>`,
    )
    .join('\n')
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${esc(title)}</title>
<style>
body{font:14px system-ui,sans-serif;margin:24px;color:#222}
svg text{font:12px system-ui,sans-serif;fill:#333}
.grid{stroke:#e4e4e4}.axis{stroke:#555}
.region{fill:#fafafa;stroke:#888}.chunk.used{fill:#c0392b}.chunk.free{fill:#a9dfbf}
section{margin-bottom:32px}
</style></head>
<body><h1>${esc(title)}</h1>
${sections}
</body></html>
`
}
