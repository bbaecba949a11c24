// The JS API fuzzer, for long runs and for reproducing a failure (docs/fuzzing-js.md):
//
//   node --import tsx scripts/fuzz-api.ts --seed 7 --ops 5000 --backend host
//   node --import tsx scripts/fuzz-api.ts --seeds 1000 --ops 5000 --mode all --out /tmp/fuzz
//   node --import tsx scripts/fuzz-api.ts --replay /tmp/fuzz/fail-7-host.json --minimize
//
// Modes: `inproc` (this process, two copies of the package with --copies 2), `gc` (a child
// process with --expose-gc: two copies, references dropped and collected), `workers` (two
// worker threads share a factory with this thread and are terminated at random points), `all`.
// A failure prints the seed, the operation's index and the last operations, and writes the
// whole run as JSON to --out for --replay (and --minimize). Exit status 1 if anything failed.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { copies } from '../__test__/fuzz/copies'
import { runGcChild, runWithWorkers, type Summary } from '../__test__/fuzz/modes'
import type { Op } from '../__test__/fuzz/ops'
import { freshTag, minimize, report, retag, run, type RunOptions, type RunResult, showOp } from '../__test__/fuzz/runner'

const { values: a } = parseArgs({
  options: {
    seed: { type: 'string', default: '1' },
    seeds: { type: 'string', default: '1' },
    ops: { type: 'string', default: '5000' },
    backend: { type: 'string', default: 'both' },
    mode: { type: 'string', default: 'inproc' },
    copies: { type: 'string', default: '2' },
    'include-open': { type: 'boolean', default: false },
    replay: { type: 'string' },
    minimize: { type: 'boolean', default: false },
    out: { type: 'string', default: join(tmpdir(), 'cuda-arena-fuzz') },
    quiet: { type: 'boolean', default: false },
  },
})

const first = Number(a.seed)
const count = Number(a.seeds)
const ops = Number(a.ops)
const backends = (a.backend === 'both' ? ['host', 'virtual'] : [a.backend]) as ('host' | 'virtual')[]
const modes = a.mode === 'all' ? ['inproc', 'gc', 'workers'] : [a.mode!]
const includeOpen = a['include-open']
const say = (s: string): void => {
  if (!a.quiet) console.log(s)
}

interface Saved {
  options: Omit<RunOptions, 'copies' | 'replay'> & { copies: number }
  tag: string
  log: Op[]
}

function save(name: string, r: RunResult | Summary, options: Saved['options']): string {
  mkdirSync(a.out!, { recursive: true })
  const file = join(a.out!, `${name}.json`)
  writeFileSync(file, JSON.stringify({ options, tag: r.tag, log: r.log ?? [] } satisfies Saved))
  return file
}

async function replayFile(file: string): Promise<number> {
  const saved = JSON.parse(readFileSync(file, 'utf8')) as Saved
  const tag = freshTag(saved.options.seed)
  const base: RunOptions = { ...saved.options, copies: copies(saved.options.copies) }
  const r = await run({ ...base, tag, replay: retag(saved.log, saved.tag, tag) })
  if (!r.failure) {
    console.log(`replay of ${saved.log.length} ops: no failure`)
    return 0
  }
  console.log(report(r, `node --import tsx scripts/fuzz-api.ts --replay ${file}`))
  if (a.minimize) {
    const small = await minimize(base, r, say)
    const out = save(`min-${saved.options.seed}-${saved.options.backend}`, { ...r, log: small }, saved.options)
    console.log(`\nminimized to ${small.length} ops (${out}):`)
    small.forEach((op, i) => console.log(`  ${showOp(op, i)}`))
  }
  return 1
}

async function main(): Promise<number> {
  if (a.replay) return replayFile(a.replay)
  let calls = 0
  let apiCalls = 0
  let failures = 0
  const started = Date.now()
  for (let seed = first; seed < first + count; seed++) {
    for (const backend of backends) {
      for (const mode of modes) {
        const t0 = Date.now()
        if (mode === 'inproc') {
          const options = { seed, ops, backend, includeOpen, copies: Number(a.copies) }
          const r = await run({ ...options, copies: copies(options.copies) })
          calls += r.calls
          apiCalls += r.apiCalls
          say(`seed ${seed} ${backend} inproc: ${r.calls} calls, ${r.apiCalls} API calls, ${Date.now() - t0} ms`)
          if (r.failure) {
            failures += 1
            const file = save(`fail-${seed}-${backend}`, r, options)
            console.log(report(r, `node --import tsx scripts/fuzz-api.ts --replay ${file} --minimize`))
          }
        } else if (mode === 'gc') {
          const r = await runGcChild({ seed, ops, backend, includeOpen })
          calls += r.calls
          apiCalls += r.apiCalls
          say(`seed ${seed} ${backend} gc: ${r.calls} calls, ${r.apiCalls} API calls, ${Date.now() - t0} ms`)
          if (r.failure) {
            failures += 1
            console.log(report(r as RunResult, `node --import tsx scripts/fuzz-api.ts --mode gc --seed ${seed} --ops ${ops} --backend ${backend}`))
          }
        } else {
          const r = await runWithWorkers({ seed, ops, backend, includeOpen, workers: 2 })
          calls += r.calls
          apiCalls += r.main.apiCalls
          const ends = r.workers.map((w) => `${w.terminated ? 'terminated' : 'finished'} after ${w.done}`).join(', ')
          say(`seed ${seed} ${backend} workers: ${r.calls} calls (workers ${ends}), ${Date.now() - t0} ms`)
          if (r.failure) {
            failures += 1
            console.log(`fuzz failure with workers, seed ${seed} ${backend}: ${r.failure}`)
            if (r.main.failure) console.log(report(r.main, `node --import tsx scripts/fuzz-api.ts --mode workers --seed ${seed} --ops ${ops} --backend ${backend}`))
            for (const w of r.workers) if (w.result?.failure) console.log(report(w.result as RunResult, 'worker'))
          }
        }
      }
    }
  }
  console.log(`total: ${calls} random calls (${apiCalls} API calls with the checks'), ${failures} failures, ${((Date.now() - started) / 1000).toFixed(1)} s`)
  return failures ? 1 : 0
}

main().then(
  (code) => {
    process.exitCode = code
  },
  (e: unknown) => {
    console.error(e)
    process.exitCode = 2
  },
)
