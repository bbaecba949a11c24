#!/usr/bin/env node
// Issue 13: which arena config holds least on the real models' allocation traffic. Replays each
// PyTorch snapshot of scripts/gpu/proof.sh (snapshot.WORKLOAD.pickle.xz, or a plain .pickle)
// with `cuda-arena replay --backend virtual` over a grid of configs, prints per workload the
// peak held of each, and ranks the configs:
//
//   best = least sum over the workloads of (peak held / peak requested); ties (sums within
//          0.001: the same memory) go to the config that changes fewest keys from the
//          defaults, then to the least total replay time. A config that fails any allocation
//          is out.
//
// The memory pool (arena.use_cuda_mempool=1) is replayed and printed but not ranked: on
// `virtual` it is the pool's stand-in (crates/arena-core/src/allocators/pool.rs), which reuses a freed
// block only for a request of exactly its size, where the driver's pool splits and coalesces;
// its peak is measured on the GPU by proof.sh instead.
//
//   node scripts/gpu/pick-config.mjs [--json OUT] [--cli dist/cli.js] [--top N] SNAPSHOT...
//
// Needs `npm run build` (dist/cli.js) and, for .xz files, the xz command. The last lines print
// the best config and the proof.sh phase-2 command that measures it on the GPU.
import { spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync, openSync, closeSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { basename, dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

const MIB = 1 << 20
/** Scores closer than this are the same memory (a sum of ratios: 0.1 % of one workload). */
const TIE = 1e-3
const here = dirname(fileURLToPath(import.meta.url))

// The grid: every combination of these values (the ORT defaults first), and the memory pool.
// arena.initial_growth_chunk_size_bytes only sizes the first region after a shrink, and a
// replay of a snapshot never shrinks: its two values must tie, which the table shows.
export const GRID = {
  'arena.extend_strategy': ['0', '1'],
  'arena.initial_chunk_size_bytes': [String(1 * MIB), String(256 * MIB), String(1024 * MIB)],
  'arena.max_dead_bytes_per_chunk': [String(128 * MIB), String(16 * MIB), String(2 * MIB), String(256 * 1024)],
  'arena.initial_growth_chunk_size_bytes': [String(2 * MIB), String(256 * MIB)],
}
export const POOL = 'arena.use_cuda_mempool=1'

/** Every config of the grid as a CUDA_ARENA_CONF string, leaving out keys at their default
 * (the all-default config is '', the CLI's "base"). */
export function gridConfigs(grid = GRID) {
  let confs = [[]]
  for (const [key, values] of Object.entries(grid)) {
    confs = confs.flatMap((c) => values.map((v, i) => (i === 0 ? c : [...c, `${key}=${v}`])))
  }
  return [...confs.map((c) => c.join(',')), POOL]
}

/** The workload a snapshot file is of: snapshot.WORKLOAD.pickle[.xz] names it. */
export function workloadOf(file) {
  const name = basename(file).replace(/\.xz$/, '').replace(/\.pickle$/, '')
  return name.startsWith('snapshot.') ? name.slice('snapshot.'.length) : name
}

function fail(message) {
  console.error(`pick-config: ${message}`)
  process.exit(1)
}

/** Replays one snapshot under every config; one CLI call (the snapshot is read once). */
function replay(cli, file, confs, tmp) {
  let path = file
  if (file.endsWith('.xz')) {
    path = join(tmp, basename(file, '.xz'))
    const out = openSync(path, 'w')
    const xz = spawnSync('xz', ['-dc', file], { stdio: ['ignore', out, 'inherit'] })
    closeSync(out)
    if (xz.error || xz.status !== 0) fail(`xz -dc ${file} failed${xz.error ? `: ${xz.error.message}` : ''}`)
  }
  const args = [cli, 'replay', path, '--backend', 'virtual', '--json']
  for (const c of confs) if (c !== '') args.push('--compare', c)
  const r = spawnSync(process.execPath, args, { encoding: 'utf8', maxBuffer: 1 << 30 })
  if (r.error || r.status !== 0) fail(`replay of ${file} failed: ${r.error?.message ?? r.stderr.trim()}`)
  const report = JSON.parse(r.stdout)
  const runs = report.runs.map((run) => ({
    conf: run.label === 'base' ? '' : run.label,
    peakRequested: run.peakRequested,
    peakHeld: run.peakHeld,
    ratio: run.peakRequested > 0 ? run.peakHeld / run.peakRequested : null,
    extensions: run.stats?.numArenaExtensions ?? null,
    failedAllocs: run.failedAllocs,
    elapsedNs: run.elapsedNs,
    ops: run.ops,
  }))
  return { file, workload: workloadOf(file), snapshot: report.snapshot, runs }
}

/** The ranking by the rule at the top of this file. */
export function rank(workloads) {
  const byConf = new Map()
  for (const w of workloads) {
    for (const run of w.runs) {
      const e = byConf.get(run.conf) ?? { conf: run.conf, score: 0, elapsedNs: 0, workloads: 0, failed: 0 }
      e.score += run.ratio ?? 0
      e.elapsedNs += run.elapsedNs
      e.workloads += 1
      e.failed += run.failedAllocs
      byConf.set(run.conf, e)
    }
  }
  const all = [...byConf.values()]
  for (const e of all) {
    e.excluded =
      e.conf === POOL ? 'the pool on virtual is a stand-in (exact-size reuse): measure it on the GPU'
      : e.failed > 0 ? `${e.failed} failed allocations`
      : e.workloads < workloads.length ? 'missing from a workload'
      : null
  }
  const keys = (conf) => (conf === '' ? 0 : conf.split(',').length)
  const ranked = all
    .filter((e) => !e.excluded)
    .sort((a, b) =>
      Math.abs(a.score - b.score) > TIE ? a.score - b.score
      : keys(a.conf) !== keys(b.conf) ? keys(a.conf) - keys(b.conf)
      : a.elapsedNs - b.elapsedNs)
  return { ranked, excluded: all.filter((e) => e.excluded) }
}

const mib = (b) => `${(b / MIB).toFixed(1)} MiB`
const label = (conf) => (conf === '' ? '(defaults)' : conf)

function printWorkload(w, top, best) {
  const s = w.snapshot
  console.log(`\n${w.workload}: ${w.file}`)
  if (s) {
    console.log(`  ${s.allocs} allocs and ${s.frees} frees replayed on ${s.streams.length} stream(s); ` +
      `${s.unknownFrees} unknown frees skipped, ${s.freedAtEnd} freed at the end`)
  }
  const sorted = [...w.runs].sort((a, b) => (a.ratio ?? Infinity) - (b.ratio ?? Infinity))
  const shown = new Set([...sorted.slice(0, top).map((r) => r.conf), '', POOL, best])
  const width = Math.max(12, ...[...shown].map((c) => label(c).length))
  console.log(`  ${'config'.padEnd(width)}  peak requested   peak held  held/requested  regions  failed  ms`)
  for (const r of sorted) {
    if (!shown.has(r.conf)) continue
    const mark = r.conf === best ? ' <- best' : ''
    console.log(`  ${label(r.conf).padEnd(width)}  ${mib(r.peakRequested).padStart(14)}  ${mib(r.peakHeld).padStart(10)}` +
      `  ${(r.ratio ?? NaN).toFixed(3).padStart(14)}  ${String(r.extensions ?? 'n/a').padStart(7)}` +
      `  ${String(r.failedAllocs).padStart(6)}  ${(r.elapsedNs / 1e6).toFixed(1).padStart(5)}${mark}`)
  }
}

function main(argv) {
  let json = null
  let cli = resolve(here, '../../dist/cli.js')
  let top = 8
  const files = []
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]
    if (a === '--json') json = argv[++i]
    else if (a === '--cli') cli = argv[++i]
    else if (a === '--top') top = Number(argv[++i])
    else if (a === '-h' || a === '--help') {
      console.log('usage: node scripts/gpu/pick-config.mjs [--json OUT] [--cli dist/cli.js] [--top N] SNAPSHOT...')
      return
    } else if (a.startsWith('--')) fail(`unknown option ${a}`)
    else files.push(a)
  }
  if (files.length === 0) fail('no snapshot given (snapshot.WORKLOAD.pickle.xz from scripts/gpu/proof.sh)')
  if (json === undefined || !Number.isInteger(top) || top < 1) fail('--json needs a path, --top a whole number')
  const confs = gridConfigs()
  const tmp = mkdtempSync(join(tmpdir(), 'pick-config-'))
  let workloads
  try {
    workloads = files.map((f) => replay(cli, f, confs, tmp))
  } finally {
    rmSync(tmp, { recursive: true, force: true })
  }
  const { ranked, excluded } = rank(workloads)
  const best = ranked[0]?.conf ?? null
  for (const w of workloads) printWorkload(w, top, best)
  console.log(`\nranking over ${workloads.length} workload(s) (${confs.length} configs): ` +
    'sum of peak held / peak requested; ties: fewest keys changed, then replay time')
  for (const e of ranked.slice(0, top)) {
    console.log(`  ${e.score.toFixed(4)}  ${(e.elapsedNs / 1e6).toFixed(1).padStart(7)} ms  ${label(e.conf)}`)
  }
  for (const e of excluded) console.log(`  not ranked: ${label(e.conf)}: ${e.excluded}`)
  if (json) {
    writeFileSync(json, `${JSON.stringify({ schema: 'cuda-arena-pick-config/1', rule: 'least sum of peakHeld/peakRequested over workloads; ties (within 0.001) by fewest keys changed, then replay time; configs with failed allocations, and the pool, not ranked', configs: confs, workloads, ranking: ranked, excluded, best }, null, 1)}\n`)
  }
  if (best === null) fail('no config replayed every workload without a failed allocation')
  console.log(`\nbest: ${label(best)}`)
  console.log(`phase 2 on the GPU: bash scripts/gpu/proof.sh 2 '${best === '' ? 'arena.extend_strategy=0' : best}'`)
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) main(process.argv.slice(2))
