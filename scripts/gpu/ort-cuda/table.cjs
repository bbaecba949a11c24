// The serving benchmark's table from bench.sh's results.jsonl: one row per scenario and allocator,
// each figure the median over rounds (processes). Markdown on stdout; exit 1 when a scenario has
// a missing or failed allocator, or when allocators' outputs differ (checksums).
//   node table.cjs results.jsonl
'use strict'
const { readFileSync } = require('node:fs')

const file = process.argv[2]
if (!file) {
  console.error('usage: node table.cjs results.jsonl')
  process.exit(2)
}
const rows = readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l))
const median = (xs) => {
  const v = xs.filter((x) => typeof x === 'number' && Number.isFinite(x)).sort((a, b) => a - b)
  if (v.length === 0) return null
  return v.length % 2 ? v[v.length >> 1] : (v[v.length / 2 - 1] + v[v.length / 2]) / 2
}
const fmt = (x, digits = 0) => (x === null ? '–' : x.toFixed(digits))

const scenarios = [...new Set(rows.map((r) => r.scenario))]
const allocators = [...new Set(rows.map((r) => r.allocator))]
let bad = false
const out = []
out.push('| requests | allocator | driver peak MiB | arena held peak / MaxInUse MiB | held ÷ MaxInUse | requests/s | median ms | p90 ms | rounds |')
out.push('|---|---|---:|---:|---:|---:|---:|---:|---:|')
for (const sc of scenarios) {
  const mine = rows.filter((r) => r.scenario === sc)
  const sums = new Set()
  for (const a of allocators) {
    const ok = mine.filter((r) => r.allocator === a && r.result)
    const failed = mine.filter((r) => r.allocator === a && !r.result).length
    if (ok.length === 0) {
      bad = true
      out.push(`| ${sc} | ${a} | failed (${failed}) | | | | | | |`)
      continue
    }
    for (const r of ok) sums.add(r.result.checksum)
    const m = (k) => median(ok.map((r) => r.result[k]))
    const held = m('heldPeakMiB')
    const inUse = m('maxInUseMiB')
    out.push(
      `| ${sc} | ${a} | ${fmt(m('peakMiB'))} | ${held === null ? '–' : `${fmt(held)} / ${fmt(inUse)}`} | ${held === null || !inUse ? '–' : fmt(held / inUse, 2)} | ${fmt(m('reqPerS'), 1)} | ${fmt(m('medianMs'), 1)} | ${fmt(m('p90Ms'), 1)} | ${ok.length}${failed ? ` (+${failed} failed)` : ''} |`,
    )
  }
  // Float sums of the same outputs in the same order: one value when every allocator agrees.
  if (sums.size > 1) {
    bad = true
    out.push(`| ${sc} | outputs differ between allocators: ${[...sums].join(', ')} | | | | | | | |`)
  }
}
console.log(out.join('\n'))
process.exitCode = bad ? 1 : 0
