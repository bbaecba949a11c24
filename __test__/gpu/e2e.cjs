// The Node API end to end on the `cuda` backend: run on a GPU machine against the built
// package (`npm run build` output in dist/ and native/): `node __test__/gpu/e2e.cjs`; or
// against an installed one: `CUDA_ARENA_MODULE=/app/node_modules/cuda-arena node …/e2e.cjs`.
// Prints what it checked and the JS-vs-Rust replay figures; exits 1 on any failure.
'use strict'
const assert = require('node:assert/strict')
const { randomBytes } = require('node:crypto')
const api = require(process.env.CUDA_ARENA_MODULE || '../../dist/index.js')

let failed = 0
function check(name, fn) {
  try {
    fn()
    console.log(`ok - ${name}`)
  } catch (e) {
    failed += 1
    console.log(`not ok - ${name}: ${e && e.stack ? e.stack : e}`)
  }
}

const gpus = api.devices()
check('devices() lists the GPUs with every field', () => {
  assert.ok(gpus.length >= 1)
  const g = gpus[0]
  assert.ok(g.name.length > 0 && g.totalMemory > 0n && g.freeMemory > 0n && g.pciBusId.includes(':') && g.uuid.startsWith('GPU-'))
  console.log(`  ${g.name}, ${g.totalMemory >> 20n} MiB, cc ${g.computeCapability.join('.')}, pools ${g.memoryPoolsSupported}`)
})

const start = api.devices()[0].freeMemory
const f = new api.AllocatorFactory({ name: 'gpu-e2e', backend: 'cuda' })
check('device and pinned arenas hold what is written', () => {
  for (const name of ['Cuda', 'CudaPinned']) {
    const a = f.createAllocator({ name })
    for (const size of [1, 255, 4097, 1 << 20, 9 << 20]) {
      const p = a.alloc(size)
      const data = randomBytes(size)
      a.write(p, data)
      const back = Buffer.alloc(size)
      a.read(p, back)
      assert.ok(back.equals(data), `${name} ${size}`)
      assert.throws(() => a.read(p + BigInt(size), Buffer.alloc(1)), { code: 'ERR_ARENA_UNKNOWN_POINTER' })
      a.free(p)
    }
    f.releaseAllocator(a)
  }
})

check('streams: reuse across streams only after wait(record())', () => {
  const a = f.createAllocator({ name: 'Cuda' })
  const [s, t] = [f.createStream(0), f.createStream(0)]
  const p = a.allocOnStream(4096, s)
  const keep = a.allocOnStream(4096, s)
  a.free(p)
  const q = a.allocOnStream(4096, t)
  assert.notEqual(q, p)
  t.wait(s.record())
  assert.equal(a.allocOnStream(4096, t), p)
  t.synchronize()
  for (const x of [q, p, keep]) a.free(x)
  s.release()
  t.release()
  f.releaseAllocator(a)
})

check('the memory pool through the factory', () => {
  const pool = f.createAllocator({ name: 'Cuda' }, { 'arena.use_cuda_mempool': '1' })
  const p = pool.alloc(5 << 20)
  pool.write(p, Buffer.alloc(16, 7))
  assert.ok(pool.getStats().totalAllocated >= 5n << 20n)
  assert.throws(() => pool.free(p + 256n), { code: 'ERR_ARENA_UNKNOWN_POINTER' })
  pool.free(p)
  pool.shrink()
  assert.equal(pool.getStats().numArenaShrinkages, 1n)
  f.releaseAllocator(pool)
})

check('more than the card has is ERR_ARENA_OUT_OF_MEMORY and the arena keeps working', () => {
  const a = f.createAllocator({ name: 'Cuda' })
  assert.throws(() => a.alloc(gpus[0].totalMemory + (1n << 20n)), { code: 'ERR_ARENA_OUT_OF_MEMORY' })
  a.free(a.alloc(1 << 20))
  f.releaseAllocator(a)
})

check('after every release the driver has its memory back (within 2 MiB)', () => {
  const s = f.deviceStats(0)
  assert.equal(s.rawBytesOutstanding, 0n)
  const end = api.devices()[0].freeMemory
  assert.ok(end + (2n << 20n) >= start, `free ${end} vs start ${start}`)
})

// JS-driven replay vs the same trace replayed natively, on device memory. Both compile the
// trace first (ids to reused slots), so neither harness's bookkeeping is in the figures.
const trace = api.mixedTrace(200000, { seed: 42 })
const n = trace.length
const kind = new Uint8Array(n)
const slot = new Uint32Array(n)
const size = new Float64Array(n)
let slots = 0
{
  const slotOf = new Map()
  const vacant = []
  trace.forEach((op, i) => {
    if (op.op === 'alloc') {
      const s = vacant.length ? vacant.pop() : slots++
      slotOf.set(op.id, s)
      kind[i] = 1
      slot[i] = s
      size[i] = op.size
    } else {
      const s = slotOf.get(op.id)
      slotOf.delete(op.id)
      vacant.push(s)
      slot[i] = s
    }
  })
}
function jsReplay(a) {
  const table = new Array(slots).fill(null)
  const t0 = process.hrtime.bigint()
  for (let i = 0; i < n; i++) {
    if (kind[i] === 1) table[slot[i]] = a.alloc(size[i])
    else {
      a.free(table[slot[i]])
      table[slot[i]] = null
    }
  }
  return Number(process.hrtime.bigint() - t0) / n
}
const median = (xs) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)]
check('the JS-driven replay is within 2x of the Rust one', () => {
  const a = f.createAllocator({ name: 'Cuda' })
  const js = median([0, 1, 2, 3, 4].map(() => jsReplay(a)))
  const rust = median([0, 1, 2, 3, 4].map(() => { const r = api.replayTrace(a, trace); return r.elapsedNs / r.ops }))
  console.log(`  mixed 200k on device memory: JS ${js.toFixed(1)} ns/op, Rust ${rust.toFixed(1)} ns/op, ratio ${(js / rust).toFixed(2)}`)
  f.releaseAllocator(a)
  assert.ok(js <= 2 * rust, `JS ${js} vs Rust ${rust}`)
})

console.log(`${failed === 0 ? 'all passed' : `${failed} failed`}`)
process.exit(failed === 0 ? 0 : 1)
