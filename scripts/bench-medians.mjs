#!/usr/bin/env node
// Prints the medians of the last `cargo bench -p cuda-arena-core` run as a Markdown table, from
// criterion's estimates (target/criterion/<group>/<bench>/new/estimates.json).
import { readdirSync, readFileSync, existsSync } from 'node:fs'
import { join } from 'node:path'

const root = process.argv[2] ?? 'target/criterion'
const rows = []
const walk = (dir, name) => {
  const est = join(dir, 'new', 'estimates.json')
  if (existsSync(est)) {
    const { median } = JSON.parse(readFileSync(est, 'utf8'))
    const ci = median.confidence_interval
    rows.push([name, median.point_estimate, ci.lower_bound, ci.upper_bound])
    return
  }
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (entry.isDirectory() && entry.name !== 'report') walk(join(dir, entry.name), name ? `${name}/${entry.name}` : entry.name)
  }
}
if (!existsSync(root)) {
  console.error(`no criterion results under ${root}: run cargo bench -p cuda-arena-core first`)
  process.exit(1)
}
walk(root, '')
console.log('| benchmark | median ns | 95% CI of the median |')
console.log('|---|---:|---|')
for (const [name, med, lo, hi] of rows.sort((a, b) => a[0].localeCompare(b[0]))) {
  console.log(`| ${name} | ${med.toFixed(1)} | ${lo.toFixed(1)} – ${hi.toFixed(1)} |`)
}
