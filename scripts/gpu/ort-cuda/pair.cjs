// ONNX Runtime's own allocator and a cuda-arena allocator timed in pairs in one process, request
// by request: the steadier figure for the throughput bar of one session (issue 25). bench.sh
// runs each allocator in processes of its own, whose speed swings ±15 % from process to process
// on the GPU machine (docs/benchmarks.md); here whatever moves the process moves both alike.
//   ORT_CUDA_APP=APP node pair.cjs CONF REQUESTS MAX_BATCH MAX_SEQ MODEL [bert|mlp]
// Two sessions of one model: one on ORT's own allocator, one with the session option that takes
// the cuda-arena allocator registered with CONF (`k=v,k=v`; '' the defaults). Each request
// (seeded batch x sequence, as serve.cjs draws them) runs on both, one after the other, the
// order swapping every request, each run timed alone (CONF `ort`: both sessions on ORT's own
// allocator, the control that shows what the pairing itself gives); one session runs one request at a time,
// so the time of a run is what a session's throughput is made of. The first WARM requests of
// each are not counted. Outputs must be identical bit for bit, request by request.
// Prints 'PAIR {json}': the sum and median of each allocator's run times (ms), `ratio` (ORT's
// sum ÷ the arena's: the arena's requests/s ÷ ORT's) and `medianRatio` (the median over
// requests of ORT's time ÷ the arena's), and whether every output matched.
'use strict'
const { runtime, drawShape, rng, parseConf, num, MODELS, outputBytes, sameBytes } = require('./lib.cjs')

const [conf = '', nreq = '60', maxB = '16', maxS = '256', modelPath, kind = 'bert'] = process.argv.slice(2)
if (!modelPath || !MODELS[kind]) {
  console.error('usage: node pair.cjs CONF REQUESTS MAX_BATCH MAX_SEQ MODEL [bert|mlp]')
  process.exit(2)
}
const { T, ort, arena, model } = runtime(kind)
const WARM = 3

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length ? s[s.length >> 1] : null
}

async function main() {
  const N = Number(nreq)
  const factory = new arena.AllocatorFactory({ name: 'pair', backend: T.backend })
  const control = conf === 'ort'
  const reg = arena.useWithOnnxRuntime(factory, T.memory, control ? {} : parseConf(conf))
  // With both sessions on ORT's own allocator (the control, BERT at K = 1 on an H200), the one
  // created second, and the one that ran first on the requests at even places of the seeded
  // sequence, ran 1-3 % slower. PAIR_OURS_FIRST=1 creates the arena's session first and runs
  // it first on even requests; remote.sh alternates it from process to process, so that over
  // a pair of processes each session runs each request in both places.
  const oursFirst = process.env.PAIR_OURS_FIRST === '1'
  const create = (withArena) =>
    ort.InferenceSession.create(modelPath, {
      ...(withArena && !control ? reg.sessionOptions : {}),
      executionProviders: T.providers,
    })
  // PAIR_K = K > 1: K sessions on each allocator; each request is K requests run at once on
  // one allocator's K sessions (each session its own draw), then the same K on the other's,
  // timed as a whole (what K concurrent sessions' throughput is made of).
  const K = Number(process.env.PAIR_K || 1)
  if (!Number.isInteger(K) || K < 1 || K > 64) {
    console.error(`PAIR_K must be an integer from 1 to 64, not ${process.env.PAIR_K}`)
    process.exit(2)
  }
  const firsts = []
  const seconds = []
  for (let i = 0; i < K; i++) firsts.push(await create(oursFirst))
  for (let i = 0; i < K; i++) seconds.push(await create(!oursFirst))
  const [own, ours] = oursFirst ? [seconds, firsts] : [firsts, seconds]
  const r = rng(100)
  const ms = { own: [], ours: [] }
  let identical = true
  const timed = async (sessions, feeds) => {
    const t = process.hrtime.bigint()
    const out = await Promise.all(sessions.map((session, i) => session.run(feeds[i])))
    return [Number(process.hrtime.bigint() - t) / 1e6, out]
  }
  for (let q = 0; q < N + WARM; q++) {
    // One draw of inputs per session for both: the same tensors' data, fed twice.
    const feeds = []
    for (let i = 0; i < K; i++) {
      const [b, s] = drawShape(r, maxB, maxS)
      feeds.push(model.inputs(ort, b, s, r))
    }
    const order = (q + (oursFirst ? 1 : 0)) % 2 === 0 ? ['own', 'ours'] : ['ours', 'own']
    const outs = {}
    for (const who of order) {
      const [t, out] = await timed(who === 'own' ? own : ours, feeds)
      outs[who] = out
      if (q >= WARM) ms[who].push(t)
    }
    for (let i = 0; i < K; i++) {
      if (!sameBytes(outputBytes(model, outs.own[i]), outputBytes(model, outs.ours[i]))) identical = false
    }
  }
  const stats = num(reg.allocator.getStats())
  const { streamHandles, ...calls } = reg.calls()
  for (const session of [...own, ...ours]) await session.release()
  reg.unregister()
  const sum = (xs) => xs.reduce((a, b) => a + b, 0)
  const result = {
    conf,
    oursFirst,
    sessions: K,
    requests: N,
    maxBatch: Number(maxB),
    maxSeq: Number(maxS),
    kind,
    dry: T.dry,
    ownMs: sum(ms.own),
    oursMs: sum(ms.ours),
    ownMedianMs: median(ms.own),
    oursMedianMs: median(ms.ours),
    ratio: sum(ms.own) / sum(ms.ours),
    medianRatio: median(ms.own.map((t, i) => t / ms.ours[i])),
    identical,
    oursMaxInUseMiB: stats.maxInUse / 2 ** 20,
    oursHeldEndMiB: stats.totalAllocated / 2 ** 20,
    oursAllocs: stats.numAllocs,
    oursExtensions: stats.numArenaExtensions,
    oursShrinkages: stats.numArenaShrinkages,
    // What ONNX Runtime asked of the arena (OnnxRuntimeAllocatorCalls), and how many streams it knows.
    oursCalls: { ...calls, streams: streamHandles.length },
  }
  console.log('PAIR ' + JSON.stringify(result))
  if (!identical) process.exitCode = 1
}
main().catch((e) => {
  console.log('FAILED', e && e.code ? `${e.code}:` : '', e && e.stack ? e.stack : e)
  process.exitCode = 2
})
