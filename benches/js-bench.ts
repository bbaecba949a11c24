// `npm run bench` (after `npm run build`): what the binding costs. JS-driven alloc+free pairs
// and a JS-driven trace replay on the `virtual` backend, each next to the same work in a
// native Rust loop in the same run; medians of several rounds, and the binding's share.
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

function jsReplay(a: OrtAllocator, trace: TraceOp[]): number {
  const addrs: (bigint | null)[] = []
  const start = process.hrtime.bigint()
  for (const op of trace) {
    if (op.op === 'alloc') addrs[op.id] = a.alloc(op.size)
    else {
      a.free(addrs[op.id] ?? null)
      addrs[op.id] = null
    }
  }
  return Number(process.hrtime.bigint() - start) / trace.length
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
const js = median(Array.from({ length: 5 }, () => jsReplay(freshArena().a, trace)))
const rust = median(Array.from({ length: 5 }, () => { const r = replayTrace(freshArena().a, trace); return r.elapsedNs / r.ops }))
rows.push(['replay mixed 200k, per op', js.toFixed(1), rust.toFixed(1), (js / rust).toFixed(2), `${(100 * (js - rust) / js).toFixed(0)}%`])

console.log('| benchmark (virtual) | JS median ns | Rust median ns | JS / Rust | binding share |')
console.log('|---|---:|---:|---:|---:|')
for (const r of rows) console.log(`| ${r.join(' | ')} |`)
