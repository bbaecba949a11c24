// One process of the serving benchmark (bench.sh runs many, alternating): K sessions of one model,
// all at once, each working through its own queue of seeded requests of random batch x sequence,
// on ONNX Runtime's own allocator ('ort') or on a cuda-arena 'Cuda' allocator registered with
// onnxruntime-node ('arena', with a config). Each session gets its own CUDA stream from the
// provider; libuv runs each session.run on a worker thread (UV_THREADPOOL_SIZE >= K).
//   ORT_CUDA_APP=APP node serve.cjs MODE CONF SESSIONS REQUESTS MAX_BATCH MAX_SEQ MODEL [bert|mlp]
// Memory: the driver's count (cuMemGetInfo) sampled every millisecond from before the sessions
// are created until the requests are done, less what was in use before (so the model's weights,
// the provider's cuBLAS/cuDNN workspaces and the CUDA context's growth are in it); for 'arena'
// also the arena's own peak held (TotalAllocated, sampled) and MaxInUse.
// Prints 'RESULT {json}'.
'use strict'
const { runtime, drawShape, rng, parseConf, num, MODELS, usedBytes } = require('./lib.cjs')

const [mode, conf = '', k = '1', nreq = '60', maxB = '16', maxS = '256', modelPath, kind = 'bert'] = process.argv.slice(2)
if (!['ort', 'arena'].includes(mode) || !modelPath || !MODELS[kind]) {
  console.error('usage: node serve.cjs ort|arena CONF SESSIONS REQUESTS MAX_BATCH MAX_SEQ MODEL [bert|mlp]')
  process.exit(2)
}
const { T, ort, arena, model } = runtime(kind)
const MiB = 2 ** 20
const WARM = 3

async function main() {
  const K = Number(k)
  const N = Number(nreq)
  const factory = new arena.AllocatorFactory({ name: 'serve', backend: T.backend })
  let reg = null
  let opts = { executionProviders: T.providers }
  if (mode === 'arena') {
    reg = arena.useWithOnnxRuntime(factory, T.memory, parseConf(conf))
    opts = { ...reg.sessionOptions, ...opts }
  }
  const base = usedBytes(factory)
  // What reached the driver from here on (allocations, frees, and the waits for the device's
  // work and for one stream's), from a library that counts them.
  const driverCounts = () => {
    const d = factory.deviceStats(0)
    return { rawAllocs: d.rawAllocs, rawFrees: d.rawFrees, deviceWaits: d.deviceWaits, streamWaits: d.streamWaits }
  }
  const driverBase = driverCounts()
  let peak = base
  let heldPeak = 0
  // The driver's count every millisecond, for every allocator alike. The arena's held bytes
  // after each request (and at the end): polling its stats every millisecond too cost it about
  // 5 % of its requests/s (K = 1 and 4 on an H200, six rounds) against ORT's own allocator,
  // which is not polled. Held bytes grow only inside a request's mappings, and the default
  // configuration unmaps only on the way to a mapping, so a request's end sees its peak but
  // for pages a later mapping of the same request unmapped first. HELD_SAMPLE=1 polls them
  // every millisecond too (as before); HELD_SAMPLE=0 never, not even after requests.
  const heldEvery = process.env.HELD_SAMPLE
  const sampleDriver = () => {
    const u = usedBytes(factory)
    if (u > peak) peak = u
  }
  const sampleHeld = () => {
    if (reg && heldEvery !== '0') {
      const held = Number(reg.allocator.getStats().totalAllocated)
      if (held > heldPeak) heldPeak = held
    }
  }
  const sample = () => {
    sampleDriver()
    sampleHeld()
  }
  const timer = setInterval(heldEvery && heldEvery !== '0' ? sample : sampleDriver, 1)
  const t0 = process.hrtime.bigint()
  const sessions = []
  for (let i = 0; i < K; i++) sessions.push(await ort.InferenceSession.create(modelPath, opts))
  const createMs = Number(process.hrtime.bigint() - t0) / 1e6
  // After creation, before any request: the weights, and what the provider took outside any
  // allocator (the driver's count less the arena's).
  const afterCreate = usedBytes(factory) - base
  const heldAfterCreate = reg ? Number(reg.allocator.getStats().totalAllocated) : null
  const times = []
  // Per session, then summed in session order: the same whatever order the sessions finish in.
  const sums = new Array(K).fill(0)
  async function worker(i) {
    const r = rng(100 + i)
    for (let q = 0; q < N + WARM; q++) {
      const [b, s] = drawShape(r, maxB, maxS)
      const t = process.hrtime.bigint()
      const out = await sessions[i].run(model.inputs(ort, b, s, r))
      const ms = Number(process.hrtime.bigint() - t) / 1e6
      sample()
      if (q >= WARM) times.push(ms)
      sums[i] += out[model.summary].data[0]
    }
  }
  const t1 = process.hrtime.bigint()
  await Promise.all(sessions.map((_, i) => worker(i)))
  const wall = Number(process.hrtime.bigint() - t1) / 1e9
  clearInterval(timer)
  sample()
  times.sort((a, b) => a - b)
  const driverEnd = driverCounts()
  const driver = {}
  for (const k of Object.keys(driverEnd)) {
    driver[k] = driverEnd[k] === undefined || driverBase[k] === undefined ? null : Number(driverEnd[k] - driverBase[k])
  }
  const stats = reg ? num(reg.allocator.getStats()) : null
  // FREE_LOG=1: where the arena's free memory is at the end, by stream tag (a diagnostic).
  let free = null
  if (reg && process.env.FREE_LOG === '1') {
    const log = reg.allocator.memoryLog()
    free = { extents: log.regions.length, freeMiB: 0, taggedFreeMiB: 0, largestFreeMiB: 0, freeChunks: 0, streams: {} }
    for (const g of log.regions) for (const c of g.chunks) {
      if (c.inUse) continue
      const m = Number(c.size) / MiB
      free.freeMiB += m
      free.freeChunks++
      free.largestFreeMiB = Math.max(free.largestFreeMiB, m)
      if (c.stream !== undefined && c.stream !== null && BigInt(c.stream) !== 0n) {
        free.taggedFreeMiB += m
        const k = String(c.stream)
        free.streams[k] = (free.streams[k] || 0) + m
      }
    }
  }
  for (const s of sessions) await s.release()
  const result = {
    mode,
    conf,
    sessions: K,
    requestsPerSession: N,
    maxBatch: Number(maxB),
    maxSeq: Number(maxS),
    kind,
    dry: T.dry,
    createMs,
    reqPerS: (K * (N + WARM)) / wall,
    medianMs: times[times.length >> 1],
    p90Ms: times[Math.floor(times.length * 0.9)],
    peakMiB: (peak - base) / MiB,
    afterCreateMiB: afterCreate / MiB,
    heldAfterCreateMiB: reg ? heldAfterCreate / MiB : null,
    heldPeakMiB: reg ? heldPeak / MiB : null,
    heldEndMiB: stats ? stats.totalAllocated / MiB : null,
    maxInUseMiB: stats ? stats.maxInUse / MiB : null,
    extensions: stats ? stats.numArenaExtensions : null,
    shrinkages: stats ? stats.numArenaShrinkages : null,
    allocs: stats ? stats.numAllocs : null,
    checksum: sums.reduce((a, b) => a + b, 0),
    driver,
    ...(free ? { free } : {}),
  }
  console.log('RESULT ' + JSON.stringify(result))
  if (reg) reg.unregister()
}
main().catch((e) => {
  console.log('FAILED', e && e.code ? `${e.code}:` : '', e && e.stack ? e.stack : e)
  process.exitCode = 2
})
