// `npm run bench` (after `npm run build`): what the binding costs. JS-driven alloc+free pairs
// and a JS-driven trace replay on the `virtual` backend, each next to the same work in a
// native Rust loop in the same run; medians of several rounds, and the binding's share. Both
// replays compile the trace (ids to reused slots) before timing.
import { AllocatorFactory, mixedTrace, nativePairNs, replayTrace, type OrtAllocator, type TraceOp } from '../ts/index'

const ROUNDS = 7
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]
let factories = 0
const freshArena = (): { f: AllocatorFactory; a: OrtAllocator } => {
  factories += 1
  const f = new AllocatorFactory({ name: `bench-${process.pid}-${factories}`, backend: 'virtual' })
  return { f, a: f.createAllocator({ name: 'Cuda' }) }
}

function jsPairs(a: OrtAllocator, size: number, n: number): number {
  const start = process.hrtime.bigint()
  for (let i = 0; i < n; i++) a.free(a.alloc(size))
  return Number(process.hrtime.bigint() - start) / n
}

/** The trace as typed arrays with ids mapped to reused slots, as the Rust replay compiles it,
 * so both loops do the same bookkeeping. */
interface Compiled {
  kind: Uint8Array
  slot: Uint32Array
  size: Float64Array
  slots: number
}
function compile(trace: TraceOp[]): Compiled {
  const n = trace.length
  const c: Compiled = { kind: new Uint8Array(n), slot: new Uint32Array(n), size: new Float64Array(n), slots: 0 }
  const slotOf = new Map<number, number>()
  const vacant: number[] = []
  trace.forEach((op, i) => {
    if (op.op === 'alloc') {
      const s = vacant.pop() ?? c.slots++
      slotOf.set(op.id, s)
      c.kind[i] = 1
      c.slot[i] = s
      c.size[i] = op.size
    } else {
      const s = slotOf.get(op.id) ?? 0
      slotOf.delete(op.id)
      vacant.push(s)
      c.slot[i] = s
    }
  })
  return c
}

function jsReplay(a: OrtAllocator, c: Compiled): number {
  const table: (bigint | null)[] = new Array<bigint | null>(c.slots).fill(null)
  const n = c.kind.length
  const start = process.hrtime.bigint()
  for (let i = 0; i < n; i++) {
    if (c.kind[i] === 1) table[c.slot[i]] = a.alloc(c.size[i])
    else {
      a.free(table[c.slot[i]])
      table[c.slot[i]] = null
    }
  }
  return Number(process.hrtime.bigint() - start) / n
}

const rows: string[][] = []
const { a } = freshArena()
for (const [name, size] of [['256B', 256], ['64KiB', 65536], ['4MiB', 4 << 20]] as const) {
  jsPairs(a, size, 100_000)
  const js = median(Array.from({ length: ROUNDS }, () => jsPairs(a, size, 300_000)))
  const rust = median(Array.from({ length: ROUNDS }, () => nativePairNs(a, size, 300_000)))
  rows.push([`alloc+free pair ${name}`, js.toFixed(1), rust.toFixed(1), (js / rust).toFixed(2), `${(100 * (js - rust) / js).toFixed(0)}%`])
}
const trace = mixedTrace(200_000, { seed: 42 })
const compiled = compile(trace)
const js = median(Array.from({ length: 5 }, () => jsReplay(freshArena().a, compiled)))
const rust = median(Array.from({ length: 5 }, () => { const r = replayTrace(freshArena().a, trace); return r.elapsedNs / r.ops }))
rows.push(['replay mixed 200k, per op', js.toFixed(1), rust.toFixed(1), (js / rust).toFixed(2), `${(100 * (js - rust) / js).toFixed(0)}%`])

console.log('| benchmark (virtual) | JS median ns | Rust median ns | JS / Rust | binding share |')
console.log('|---|---:|---:|---:|---:|')
for (const r of rows) console.log(`| ${r.join(' | ')} |`)
