// A fuzz run in a process of its own, for garbage collection: run with
// `node --expose-gc --import tsx __test__/fuzz/child.ts '<json options>'`. The run mixes two
// copies of the package, drops references and collects mid-sequence. Prints one JSON line.
import { copies } from './copies'
import { summary } from './modes'
import { run, type RunOptions } from './runner'

const opts = JSON.parse(process.argv[2] ?? '{}') as Pick<RunOptions, 'seed' | 'ops' | 'backend' | 'includeOpen' | 'checkEvery'> & { copies?: number }
if (!(globalThis as { gc?: unknown }).gc) throw new Error('run with --expose-gc')
run({ ...opts, copies: copies(opts.copies ?? 2), gc: true }).then(
  (r) => {
    console.log(JSON.stringify(summary(r)))
    process.exitCode = r.failure ? 1 : 0
  },
  (e: unknown) => {
    console.error(e)
    process.exitCode = 2
  },
)
