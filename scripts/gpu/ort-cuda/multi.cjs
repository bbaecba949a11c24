// Two GPUs, one process: a cuda-arena 'Cuda' allocator registered for device 0 and for device 1
// with CONF, a BERT session on each (the CUDA provider, deviceId 0 / 1), REQUESTS requests each,
// both devices at once. Checks that each device's arena served its own session (its stats, raw
// bytes on its own device), that the outputs are identical across devices, and that every raw
// byte is back after the sessions are released and the allocators unregistered.
//   ORT_CUDA_APP=APP node multi.cjs BERT_MODEL [CONF] [REQUESTS]
// env: ONLY=0|1 (one device alone); ORDER=10 (register and create device 1's first);
//      SEQUENTIAL=1 (device 0's requests, then device 1's). Prints 'RESULT {json}'; exit 0 only
//      if every check holds.
'use strict'
const { modules, rng, parseConf, num, MODELS } = require('./lib.cjs')

const [model, conf = '', nreq = '40'] = process.argv.slice(2)
if (!model) {
  console.error('usage: node multi.cjs BERT_MODEL [CONF] [REQUESTS]')
  process.exit(2)
}
const { ort, arena } = modules()
ort.env.logLevel = 'error'
const bert = MODELS.bert

async function main() {
  const factory = new arena.AllocatorFactory({ name: 'multi', backend: 'cuda' })
  const devices = process.env.ONLY ? [Number(process.env.ONLY)] : process.env.ORDER === '10' ? [1, 0] : [0, 1]
  const used = (d) => {
    const s = factory.deviceStats(d)
    return Number(s.total - s.free) / 2 ** 20
  }
  const base = devices.map(used)
  const regs = devices.map((d) => arena.useWithOnnxRuntime(factory, { name: 'Cuda', deviceId: d }, parseConf(conf)))
  const sessions = []
  for (const [i, d] of devices.entries()) {
    sessions.push(await ort.InferenceSession.create(model, { ...regs[i].sessionOptions, executionProviders: [{ name: 'cuda', deviceId: d }] }))
  }
  const outs = devices.map(() => [])
  const serve = async (i) => {
    const r = rng(5)
    for (let q = 0; q < Number(nreq); q++) {
      const b = 1 + Math.floor(r() * 16)
      const s = 8 + Math.floor(r() * 249)
      const o = await sessions[i].run(bert.inputs(ort, b, s, r))
      outs[i].push(Buffer.from(o.pooler_output.data.buffer, o.pooler_output.data.byteOffset, o.pooler_output.data.byteLength))
    }
  }
  if (process.env.SEQUENTIAL === '1') for (const i of devices.keys()) await serve(i)
  else await Promise.all(devices.map((_, i) => serve(i)))
  const during = devices.map((d, i) => used(d) - base[i])
  const stats = regs.map((r) => num(r.allocator.getStats()))
  const raw = devices.map((d) => num(factory.deviceStats(d)).rawBytesOutstanding)
  const calls = regs.map((r) => r.calls())
  for (const s of sessions) await s.release()
  const same = outs.every((o) => o.every((x, j) => x.equals(outs[0][j])))
  for (const r of regs) r.unregister()
  const after = devices.map((d) => num(factory.deviceStats(d)).rawBytesOutstanding)
  const checks = {
    eachArenaServedItsSession: stats.every((s) => s.numAllocs > 0) && calls.every((c) => c.allocOnStream > 0),
    // The driver's count on each device grew by at least the weights (420 MiB): each arena's
    // memory is on its own device. (A memory pool's memory is not in the raw counters.)
    memoryOnEachDevice: during.every((mib) => mib > 400),
    sameOutputs: same,
    rawBytesBackAfterUnregister: after.every((x) => x === 0),
  }
  const ok = Object.values(checks).every(Boolean)
  console.log('RESULT ' + JSON.stringify({ conf, devices, ok, checks, driverUsedMiB: during, heldMiB: stats.map((s) => s.totalAllocated / 2 ** 20), maxInUseMiB: stats.map((s) => s.maxInUse / 2 ** 20), numAllocs: stats.map((s) => s.numAllocs), rawOutstanding: raw, rawOutstandingAfterUnregister: after, usedAfterMiB: devices.map((d) => used(d)) }))
  process.exitCode = ok ? 0 : 1
}
main().catch((e) => {
  console.log('FAILED', e && e.code ? `${e.code}:` : '', e && e.stack ? e.stack : e)
  process.exitCode = 2
})
