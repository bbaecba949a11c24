/**
 * The ways a fuzz run is made: in this process; in a child process with the garbage collector
 * exposed (two copies of the package, references dropped mid-run); and with worker threads
 * that share a named factory with this thread and are terminated at random points, after which
 * this thread releases its handles and every device must hold no memory.
 */
import { spawn } from 'node:child_process'
import { join } from 'node:path'
import { Worker } from 'node:worker_threads'
import { Prng } from './prng'
import { freshTag, run, type RunResult } from './runner'
import type { SharedSpec } from './world'

/** A run's result without its log unless it failed (the log is for replaying a failure). */
export type Summary = Omit<RunResult, 'log'> & { log?: RunResult['log'] }

export function summary(r: RunResult): Summary {
  const { log, ...rest } = r
  return r.failure ? { ...rest, log } : rest
}

const root = join(__dirname, '..', '..')

export interface ModeOptions {
  seed: number
  ops: number
  backend: 'host' | 'virtual'
  includeOpen?: boolean
}

/** A run in a child process with `--expose-gc`: two copies of the package, references dropped and collected. */
export function runGcChild(o: ModeOptions): Promise<Summary> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--expose-gc', '--import', 'tsx', join(__dirname, 'child.ts'), JSON.stringify(o)], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    let err = ''
    child.stdout.on('data', (d: Buffer) => (out += d.toString()))
    child.stderr.on('data', (d: Buffer) => (err += d.toString()))
    child.on('error', reject)
    child.on('close', (code, signal) => {
      const last = out.trim().split('\n').pop() ?? ''
      try {
        resolve(JSON.parse(last, (_, v: unknown) => v) as Summary)
      } catch {
        // The child died without a result (a crash, an abort): that is a failure in itself.
        resolve({
          seed: o.seed,
          backend: o.backend,
          tag: '',
          calls: 0,
          apiCalls: 0,
          outcomes: {},
          failure: { check: 'child-process', message: `exited with ${code ?? signal}: ${err.slice(-2000)}`, index: -1, tail: [] },
        })
      }
    })
  })
}

export interface WorkerState {
  /** Operations the worker reported done. */
  done: number
  /** Whether it was terminated (else it finished). */
  terminated: boolean
  result: Summary | null
  error: string | null
}

export interface WorkersResult {
  main: RunResult
  workers: WorkerState[]
  /** Operations executed by all threads (a terminated worker's: as far as it reported). */
  calls: number
  failure: string | null
}

/**
 * `workers` worker threads and this thread fuzz one factory by name: device 0 is shared by
 * all of them, device 1 is this thread's, device 2+k worker k's. Each worker is terminated
 * after a random number of its progress reports (or finishes first). Then this thread checks
 * its model still holds (its own allocations read back), frees and releases everything, and
 * every device of the shared factory must hold no memory.
 */
export async function runWithWorkers(o: ModeOptions & { workers: number }): Promise<WorkersResult> {
  const g = new Prng(o.seed ^ 0x5eed)
  const tag = freshTag(o.seed)
  const name = `${tag}-shared`
  const devices = Array.from({ length: 2 + o.workers }, () => ({ totalMemory: 64n << 20n }))
  const spec = (own: number): SharedSpec => ({ name, devices, sharedDevices: [0], ownDevices: [own] })
  const boot = `require('tsx/cjs'); require(${JSON.stringify(join(__dirname, 'worker.ts'))})`
  const every = 50
  const states: WorkerState[] = []
  const exits: Promise<void>[] = []
  for (let k = 0; k < o.workers; k++) {
    const killAfter = g.range(1, Math.ceil(o.ops / every) + 2)
    const state: WorkerState = { done: 0, terminated: false, result: null, error: null }
    states.push(state)
    const w = new Worker(boot, {
      eval: true,
      workerData: { seed: o.seed * 1000 + k + 1, ops: o.ops, backend: o.backend, shared: spec(2 + k), tag: `${tag}-w${k}`, progressEvery: every, includeOpen: o.includeOpen },
    })
    w.on('message', (m: { type: string; done?: number; result?: Summary }) => {
      if (m.type === 'result') state.result = m.result!
      else {
        state.done = m.done!
        if (m.done! / every >= killAfter && !state.terminated) {
          state.terminated = true
          void w.terminate()
        }
      }
    })
    w.on('error', (e) => (state.error = String(e)))
    exits.push(new Promise((resolve) => w.once('exit', () => resolve())))
  }
  const main = await run({
    seed: o.seed,
    ops: o.ops,
    backend: o.backend,
    shared: spec(1),
    tag: `${tag}-main`,
    includeOpen: o.includeOpen,
    // Let the workers' messages in (and the terminations they lead to) while this thread fuzzes.
    onProgress: () => new Promise((resolve) => setImmediate(resolve)),
    progressEvery: 10,
    beforeCleanup: async () => {
      await Promise.all(exits)
    },
    lastOut: true,
  })
  const failures = [
    main.failure ? `main: ${main.failure.message}` : null,
    ...states.map((s, k) => (s.error ? `worker ${k}: ${s.error}` : s.result?.failure ? `worker ${k}: ${s.result.failure.message}` : null)),
  ].filter((x): x is string => x !== null)
  const calls = main.calls + states.reduce((n, s) => n + (s.result?.calls ?? s.done), 0)
  return { main, workers: states, calls, failure: failures.length ? failures.join('\n') : null }
}
