/**
 * Runs the fuzzer: generates operations from a seed (or replays saved ones), executes each and
 * checks the model after it, sweeps every invariant every so often, and at the end frees
 * everything, releases every allocator and stream, and checks that every device of every
 * factory holds no raw memory. A failure names the seed, the operation's index, the broken
 * check, and the last operations; `minimize` shrinks a failing sequence.
 */
import { type Op, execute, generate } from './ops'
import type { Index } from './model'
import { Prng } from './prng'
import { showV } from './values'
import { FuzzFailure, type SharedSpec, World } from './world'

export interface RunOptions {
  seed: number
  /** Operations to generate (ignored when replaying). */
  ops: number
  backend: 'host' | 'virtual'
  /** Copies of the package; operations mix objects of all of them. Default: this one. */
  copies?: Index[]
  /** Drop references and collect garbage mid-run (needs `--expose-gc`). */
  gc?: boolean
  /** Worker runs: the factory shared with other threads. */
  shared?: SharedSpec | null
  /** Sweep every invariant every this many operations. Default 250. */
  checkEvery?: number
  /** Also generate the cases of open findings (see docs/fuzzing-js.md). */
  includeOpen?: boolean
  /** Operation names never generated. */
  exclude?: readonly string[]
  /** Operations to run instead of generating them (a saved run); names in them carry `tag`. */
  replay?: Op[]
  /** Prefix of every factory name this run makes (unique per run). */
  tag?: string
  /** Called after every `progressEvery` operations (workers report; the main thread yields). */
  onProgress?: (done: number) => void | Promise<void>
  progressEvery?: number
  /** Called before the final sweep and cleanup (the main thread waits for its workers here). */
  beforeCleanup?: () => Promise<void>
  /** This thread ends last: devices shared with other threads must hold nothing either at the end. */
  lastOut?: boolean
}

export interface Failure {
  check: string
  message: string
  /** Index of the operation it happened in, or -1 in the final cleanup. */
  index: number
  /** The last operations, as text. */
  tail: string[]
}

export interface RunResult {
  seed: number
  backend: string
  tag: string
  /** Operations executed (skipped ones not counted). */
  calls: number
  /** API calls made, the checks' included. */
  apiCalls: number
  /** Per operation: how often it succeeded and with which codes it failed. */
  outcomes: Record<string, Record<string, number>>
  failure: Failure | null
  /** Every operation, for replay and minimizing. */
  log: Op[]
}

let runs = 0

/** A run's factory-name prefix: unique in the process and across processes. */
export function freshTag(seed: number): string {
  runs += 1
  return `fuzz-${process.pid}-${seed}-${runs}-${Math.floor(Math.random() * 1e9).toString(36)}`
}

/** One operation as text: `#12 h3 = f1.createAllocator({name: "Cuda"}, undefined)`. */
export function showOp(op: Op, i?: number): string {
  const head = i === undefined ? '' : `#${i} `
  const out = op.out ? `${op.out} = ` : ''
  const on = op.t ? `${op.t}.` : ''
  const copy = op.c ? ` [copy ${op.c}]` : ''
  const pollution = op.p?.length ? ` [Object.prototype: ${op.p.map(([k, v]) => `${k}=${showV(v)}`).join(', ')}]` : ''
  return `${head}${out}${on}${op.op}(${op.args.map(showV).join(', ')})${copy}${pollution}`
}

/** Runs one fuzz sequence. Never throws for a broken promise: it is in `failure`. */
export async function run(opts: RunOptions): Promise<RunResult> {
  const copies = opts.copies ?? [require('../../ts/index') as Index]
  const tag = opts.tag ?? freshTag(opts.seed)
  const w = new World(copies, opts.backend, tag, opts.shared ?? null)
  w.includeOpen = opts.includeOpen ?? false
  const g = new Prng(opts.seed)
  const exclude = new Set(opts.exclude ?? [])
  const checkEvery = opts.checkEvery ?? 250
  const log: Op[] = []
  const outcomes: Record<string, Record<string, number>> = {}
  let calls = 0
  let index = -1
  let failure: Failure | null = null
  const total = opts.replay ? opts.replay.length : opts.ops
  try {
    if (opts.shared && !opts.replay) {
      const s = opts.shared
      const devices = { arr: s.devices.map((d) => ({ o: { totalMemory: { b: String(d.totalMemory) }, ...(d.maxAllocation !== undefined ? { maxAllocation: { b: String(d.maxAllocation) } } : {}) } })) }
      log.push({ op: 'factory.new', c: 0, args: [{ o: { name: { s: s.name }, backend: { s: opts.backend }, devices } }, { s: 'collect' }], out: w.id('f') })
    }
    for (index = 0; index < total || index < log.length; index++) {
      const op = opts.replay ? opts.replay[index] : index < log.length ? log[index] : generate(w, g, { gc: opts.gc ?? false, exclude })
      if (index >= log.length) log.push(op)
      const r = await execute(w, op)
      if (r.outcome !== 'skip') {
        calls += 1
        const o = (outcomes[op.op] ??= {})
        o[r.outcome] = (o[r.outcome] ?? 0) + 1
        w.checkStats(r.touched, r.oom)
      }
      if ((index + 1) % checkEvery === 0) w.fullCheck()
      if (opts.onProgress && (index + 1) % (opts.progressEvery ?? 100) === 0) await opts.onProgress(index + 1)
    }
    index = -1
    if (opts.beforeCleanup) await opts.beforeCleanup()
    w.fullCheck()
    await cleanup(w, opts.gc ?? false, opts.lastOut ?? false)
  } catch (e) {
    const at = index
    const tail = log.slice(Math.max(0, at < 0 ? log.length - 25 : at - 24), at < 0 ? log.length : at + 1).map((op) => showOp(op, log.indexOf(op)))
    if (e instanceof FuzzFailure) failure = { check: e.check, message: e.message, index: at, tail }
    else failure = { check: 'crash', message: e instanceof Error ? `${e.name}: ${e.message}\n${e.stack ?? ''}` : String(e), index: at, tail }
    bestEffortRelease(w)
  }
  return { seed: opts.seed, backend: opts.backend, tag, calls, apiCalls: w.apiCalls, outcomes, failure, log }
}

/**
 * The end of a run: free every live allocation (its bytes read back first), release every
 * allocator handle and stream; then no device of any factory of this run holds raw memory
 * (devices other threads share are checked by whoever ends last).
 */
async function cleanup(w: World, gc: boolean, lastOut: boolean): Promise<void> {
  for (const a of w.reachable()) {
    const r = w.reader(a)!
    for (const l of [...a.live.values()]) {
      w.checkBytes(a, l, r, 'at the end')
      w.apiCalls += 1
      r.free(l.addr)
      a.live.delete(l.addr)
    }
  }
  for (const h of w.handles.values()) {
    if (h.released || !h.obj) continue
    const ref = [...w.factories.values()].find((f) => f.model === h.factory && f.copy === h.copy)
    if (!ref) throw new FuzzFailure('cleanup', `no factory object of copy ${h.copy} for ${h.id}`)
    w.apiCalls += 1
    ref.obj.releaseAllocator(h.obj)
    w.releaseHandle(h)
  }
  for (const s of w.streams.values()) {
    if (s.released || !s.obj) continue
    w.apiCalls += 1
    s.obj.release()
    w.releaseStream(s)
  }
  if (gc && (w.pendingHandles.length > 0 || w.pendingStreams.length > 0)) {
    await execute(w, { op: 'gc.collect', args: [] })
  }
  for (const f of w.factoryModels.values()) {
    const ref = w.factoryObj(f)!
    f.devices.forEach((_, d) => {
      if (!lastOut && (f.sharedDevices.has(d) || f.forbidden.has(d))) return
      w.apiCalls += 1
      const held = ref.obj.deviceStats(d).rawBytesOutstanding
      if (held !== 0n) throw new FuzzFailure('all-memory-back', `${f.name} device ${d} still holds ${held} bytes after every allocator was released`)
    })
    const left = [...f.arenas].filter((a) => !a.shared)
    if (left.length > 0) throw new FuzzFailure('all-memory-back', `${f.name}: allocators ${left.map((a) => a.id).join(', ')} not retired`)
  }
}

/** After a failure: hand back what can be handed back, so later runs in this process start clean. */
function bestEffortRelease(w: World): void {
  for (const h of w.handles.values()) {
    if (h.released || !h.obj) continue
    for (const f of w.factories.values()) {
      try {
        f.obj.releaseAllocator(h.obj)
        break
      } catch {
        // another factory's, or released already
      }
    }
  }
  for (const s of w.streams.values()) {
    try {
      s.obj?.release()
    } catch {
      // released already
    }
  }
}

/** The ops of a saved run with its factory names moved to `tag` (a replay must not meet the original's factories). */
export function retag(log: Op[], from: string, to: string): Op[] {
  return JSON.parse(JSON.stringify(log).split(from).join(to)) as Op[]
}

/**
 * Shrinks a failing sequence (delta debugging over operations): drops chunks of operations
 * while the run still fails the same check. Operations whose objects were dropped are skipped.
 */
export async function minimize(base: RunOptions, failing: RunResult, say: (s: string) => void = () => {}): Promise<Op[]> {
  const check = failing.failure?.check
  if (!check) return failing.log
  const stillFails = async (ops: Op[]): Promise<boolean> => {
    const tag = freshTag(base.seed)
    const r = await run({ ...base, tag, replay: retag(ops, failing.tag, tag), onProgress: undefined, beforeCleanup: undefined })
    return r.failure?.check === check
  }
  let ops = failing.failure!.index >= 0 ? failing.log.slice(0, failing.failure!.index + 1) : failing.log
  let chunk = Math.max(1, Math.floor(ops.length / 2))
  while (chunk >= 1) {
    let removed = false
    for (let start = 0; start < ops.length; start += chunk) {
      const candidate = [...ops.slice(0, start), ...ops.slice(start + chunk)]
      if (candidate.length > 0 && (await stillFails(candidate))) {
        ops = candidate
        removed = true
        start -= chunk
        say(`minimize: ${ops.length} ops`)
      }
    }
    if (!removed) chunk = Math.floor(chunk / 2)
  }
  return ops
}

/** A failure as text: what to run to see it again, and the last operations. */
export function report(r: RunResult, how: string): string {
  const f = r.failure!
  return [
    `fuzz failure: ${f.message}`,
    `  seed ${r.seed}, backend ${r.backend}, at operation ${f.index < 0 ? 'cleanup' : `#${f.index}`} (${r.calls} calls done)`,
    `  reproduce: ${how}`,
    '  last operations:',
    ...f.tail.map((t) => `    ${t}`),
  ].join('\n')
}
