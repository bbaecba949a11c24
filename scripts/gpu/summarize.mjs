#!/usr/bin/env node
// Issue 13: the README's table of the GPU proof, from the JSON of scripts/gpu/models.py runs
// (proof.sh's proof.tar.xz holds them under runs/), as Markdown on stdout:
//
//   node scripts/gpu/summarize.mjs [--replay pick.json] runs/*.json
//
// Per workload and run: whether every loss (training) or request output (serving) is bitwise
// that of the native run and, if not, how many differ and the largest loss difference; peak
// device memory measured by the driver (cuMemGetInfo, above the baseline); the allocator's own
// peaks (held: torch's max reserved or the arena's TotalAllocated; in use: torch's max
// allocated or the arena's MaxInUse); the median step or request time; both as ratios to
// native; and whether the device test passed (models.py --check: memory back after
// empty_cache). Among the arena runs, the best config is the one with the least sum over the
// workloads of (allocator peak held / peak requested, torch's exact requested_bytes peak of the
// native run), ties (within 0.001) by the least sum of time ratios, among the configs whose
// every run has native's outputs bitwise and passed the device test; it is marked "best".
// --replay adds the replay figures of scripts/gpu/pick-config.mjs --json.
import { readFileSync } from 'node:fs'
import { resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

const MIB = 1 << 20
const ORDER = ['native', 'expandable', 'arena']
const WORKLOADS = ['gpt2-train', 'resnet50-train', 'encoder-serve', 'decoder-generate']

/** Runs grouped by workload, then label. */
export function group(runs) {
  const by = new Map()
  for (const r of runs) {
    if (!r || r.schema !== 'cuda-arena-models/1') throw new Error(`not a models.py JSON: ${r?.schema}`)
    if (!by.has(r.workload)) by.set(r.workload, new Map())
    by.get(r.workload).set(r.label, r)
  }
  return by
}

/** The values that must be bitwise equal across allocators: loss hex or request checksums. */
const outputs = (r) => (r.records ?? []).map((x) => (r.unit === 'step' ? x.loss_hex : x.checksum))

/** How r's outputs compare with the reference run's. */
export function compare(r, ref) {
  const mine = outputs(r)
  const theirs = outputs(ref)
  const n = Math.min(mine.length, theirs.length)
  let differ = 0
  let maxDiff = 0
  for (let i = 0; i < n; i++) {
    if (mine[i] === theirs[i]) continue
    differ++
    if (r.unit === 'step') {
      const d = Math.abs(hexToFloat(mine[i]) - hexToFloat(theirs[i]))
      maxDiff = Number.isNaN(d) ? Infinity : Math.max(maxDiff, d)
    }
  }
  return { n, differ, maxDiff, sameLength: mine.length === theirs.length, identical: differ === 0 && mine.length === theirs.length && n > 0 }
}

/** Python's float.hex() ('0x1.8p+1', '-0x0.0p+0', 'inf', 'nan') as a number. */
export function hexToFloat(s) {
  if (s === 'nan') return NaN
  if (s === 'inf') return Infinity
  if (s === '-inf') return -Infinity
  const m = /^(-)?0x([01])\.([0-9a-f]+)p([+-]\d+)$/.exec(s)
  if (!m) throw new Error(`not a float.hex() value: ${s}`)
  const mantissa = parseInt(m[2], 16) + parseInt(m[3], 16) / 16 ** m[3].length
  return (m[1] ? -1 : 1) * mantissa * 2 ** Number(m[4])
}

/** The best arena run by the rule at the top of this file: { label, score, time } or null. */
export function bestArena(by) {
  const scores = new Map()
  const workloads = [...by.keys()]
  for (const [, runs] of by) {
    const native = runs.get('native')
    const requested = native?.memory?.allocator?.peak_requested_bytes
    const nativeTime = native?.time?.median_s
    for (const [label, r] of runs) {
      if (r.allocator_kind !== 'arena') continue
      const e = scores.get(label) ?? { label, score: 0, time: 0, workloads: 0, ok: true }
      const held = r.memory?.allocator?.peak_held_bytes
      const same = native?.ok && r.ok && compare(r, native).identical
      if (!same || r.check?.passed === false || held === undefined || !requested || !nativeTime || !r.time?.median_s) e.ok = false
      else {
        e.score += held / requested
        e.time += r.time.median_s / nativeTime
      }
      e.workloads++
      scores.set(label, e)
    }
  }
  const ranked = [...scores.values()]
    .filter((e) => e.ok && e.workloads === workloads.length)
    .sort((a, b) => (Math.abs(a.score - b.score) > 1e-3 ? a.score - b.score : a.time - b.time))
  return ranked[0] ?? null
}

const mib = (b) => (b === undefined || b === null ? '—' : `${(b / MIB).toFixed(0)}`)
const ratio = (x, y) => (x === undefined || x === null || !y ? '—' : (x / y).toFixed(2))
const ms = (s) => (s === undefined ? '—' : s < 0.01 ? (s * 1000).toFixed(2) : (s * 1000).toFixed(1))

function sortLabels(labels) {
  const rank = (l) => {
    const i = ORDER.indexOf(l)
    if (i >= 0) return [i, l]
    if (l === 'native-snapshot') return [99, l]
    return [ORDER.length, l]
  }
  return [...labels].sort((a, b) => {
    const [x, l] = rank(a)
    const [y, m] = rank(b)
    return x - y || l.localeCompare(m)
  })
}

function describe(r) {
  if (r.allocator_kind === 'native') return r.label === 'native-snapshot' ? 'native, recording history' : 'native'
  if (r.allocator_kind === 'expandable') return 'native, `expandable_segments:True`'
  return r.arena_conf ? `cuda-arena \`${r.arena_conf}\`` : 'cuda-arena (defaults)'
}

function sameAsNative(r, native) {
  if (r === native) return 'reference'
  if (!native?.ok || !r.ok) return '—'
  const c = compare(r, native)
  if (c.identical) return `bitwise (${c.n}/${c.n})`
  const diff = r.unit === 'step' && c.differ ? `, max abs diff ${c.maxDiff.toExponential(2)}` : ''
  const len = c.sameLength ? '' : `, ${outputs(r).length} vs ${outputs(native).length} values`
  return `**no**: ${c.differ}/${c.n} differ${diff}${len}`
}

export function render(runs, replay) {
  const by = group(runs)
  const best = bestArena(by)
  const lines = []
  const any = runs.find((r) => r.ok && r.device) ?? runs[0]
  const v = any?.versions ?? {}
  lines.push(`GPU: ${any?.device?.name ?? '?'} (driver ${any?.device?.driver_version ?? '?'}); torch ${v.torch ?? '?'} (CUDA ${v.cuda ?? '?'}), transformers ${v.transformers ?? '?'}, torchvision ${v.torchvision ?? '?'}.`)
  lines.push('')
  lines.push('| model | allocator | outputs vs native | driver peak MiB | × native | allocator peak held MiB | peak in use MiB | median time | × native | device test |')
  lines.push('|---|---|---|---:|---:|---:|---:|---:|---:|---|')
  const workloads = [...by.keys()].sort((a, b) => WORKLOADS.indexOf(a) - WORKLOADS.indexOf(b))
  for (const w of workloads) {
    const runsOf = by.get(w)
    const native = runsOf.get('native')
    for (const label of sortLabels(runsOf.keys())) {
      const r = runsOf.get(label)
      const m = r.memory ?? {}
      const a = m.allocator ?? {}
      const t = r.time ?? {}
      const name = describe(r) + (best && best.label === label ? ' — **best**' : '')
      const unit = t.unit ? ` ms/${t.unit}` : ''
      const test = !r.ok ? `**failed**: ${(r.error ?? '').trim().split('\n').pop().slice(0, 80)}`
        : r.check ? (r.check.passed ? 'passed' : `**failed**: ${r.check.failures.join('; ').slice(0, 120)}`)
        : '—'
      lines.push(`| ${w} | ${name} | ${sameAsNative(r, native)} | ${mib(m.driver_peak_bytes)} | ` +
        `${ratio(m.driver_peak_bytes, native?.memory?.driver_peak_bytes)} | ${mib(a.peak_held_bytes)} | ` +
        `${mib(a.peak_allocated_bytes)} | ${ms(t.median_s)}${t.median_s === undefined ? '' : unit} | ` +
        `${ratio(t.median_s, native?.time?.median_s)} | ${test} |`)
    }
  }
  lines.push('')
  for (const w of workloads) {
    const native = by.get(w).get('native')
    if (!native) continue
    const d = native.determinism ?? {}
    const warned = (d.warnings ?? []).filter((x) => /determinis/i.test(x.message)).map((x) => x.message)
    const p = native.params ?? {}
    const req = native.memory?.allocator?.peak_requested_bytes
    lines.push(`- ${w}: ${Object.entries(p).map(([k, x]) => `${k} ${x}`).join(', ')}; ` +
      `${native.records?.filter((x) => !x.warmup).length ?? 0} timed ${native.unit}s after ${native.time?.warmup ?? 0} warm-up; ` +
      `peak requested ${mib(req)} MiB (torch's requested_bytes); determinism ${d.warn_only ? '**warn_only**' : 'strict'}` +
      (d.nondeterministic_op ? ` (strict failed: ${d.nondeterministic_op})` : '') +
      (warned.length ? `; warned: ${warned.join(' / ')}` : '') +
      ((native.notes ?? []).length ? `; ${native.notes.join('; ')}` : ''))
  }
  if (best) lines.push('', `Best arena run: ${best.label} (sum of held/requested ${best.score.toFixed(3)} over ${by.size} models, sum of time ratios ${best.time.toFixed(2)}).`)
  if (replay) lines.push('', ...renderReplay(replay, runs))
  return lines.join('\n')
}

/** The replay figures of pick-config.mjs's JSON: per workload, the defaults, the replay's best,
 * and every config the GPU runs used. */
export function renderReplay(pick, runs = []) {
  const confs = new Set(['', pick.best])
  for (const r of runs) if (r.allocator_kind === 'arena' && r.arena_conf) confs.add(r.arena_conf)
  const lines = ['Replays of the native runs\' snapshots (`cuda-arena replay --backend virtual`, scripts/gpu/pick-config.mjs):', '',
    '| model | config | peak requested MiB | peak held MiB | held/requested | regions |', '|---|---|---:|---:|---:|---:|']
  for (const w of pick.workloads) {
    for (const conf of confs) {
      const run = w.runs.find((x) => x.conf === conf)
      if (!run) continue
      const name = (conf === '' ? 'defaults' : `\`${conf}\``) + (conf === pick.best ? ' — best by replay' : '') +
        (conf === 'arena.use_cuda_mempool=1' ? ' (the pool\'s stand-in)' : '')
      lines.push(`| ${w.workload} | ${name} | ${mib(run.peakRequested)} | ${mib(run.peakHeld)} | ${run.ratio?.toFixed(3) ?? '—'} | ${run.extensions ?? 'n/a'} |`)
    }
  }
  return lines
}

function main(argv) {
  let replay = null
  const files = []
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--replay') replay = JSON.parse(readFileSync(argv[++i], 'utf8'))
    else if (argv[i] === '-h' || argv[i] === '--help') {
      console.log('usage: node scripts/gpu/summarize.mjs [--replay pick.json] runs/*.json')
      return
    } else files.push(argv[i])
  }
  if (files.length === 0) {
    console.error('summarize: no JSON given (runs/*.json from scripts/gpu/proof.sh\'s proof.tar.xz)')
    process.exit(1)
  }
  const runs = files.filter((f) => !f.endsWith('.strict-failed.json')).map((f) => JSON.parse(readFileSync(f, 'utf8')))
  console.log(render(runs, replay))
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) main(process.argv.slice(2))
