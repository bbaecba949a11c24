// ONNX Runtime's CUDA provider on a cuda-arena 'Cuda' allocator registered with onnxruntime-node:
// the GPU tests (remote.sh runs them there; dry-run.sh runs them here on the CPU provider).
//   ORT_CUDA_APP=APP node tests.cjs MLP_MODEL [BERT_MODEL]
// env: ORT_CUDA_DRY=1 (CPU provider, `host` backend); UV_THREADPOOL_SIZE >= 2 (two sessions at once).
// Prints 'ok N - name' / 'not ok N - name', what the provider called ('# calls ...'), a last line
// 'N passed, N failed', and 'FINDINGS {json}' before it; exit 1 on any failure.
'use strict'
const assert = require('node:assert/strict')
const { modules, target, rng, num, MODELS, outputBytes, sameBytes, usedBytes } = require('./lib.cjs')

const [mlpPath, bertPath] = process.argv.slice(2)
if (!mlpPath) {
  console.error('usage: node tests.cjs MLP_MODEL [BERT_MODEL]')
  process.exit(2)
}
const T = target()
const { ort, arena } = modules()
ort.env.logLevel = 'error'
// The model with dynamic batch and sequence: BERT on the GPU; the MLP (dynamic batch) in the dry run.
const dyn = bertPath ? { path: bertPath, model: MODELS.bert, maxBatch: 16, maxSeq: 256 } : { path: mlpPath, model: MODELS.mlp, maxBatch: 64, maxSeq: 1 }

const tests = []
const test = (name, fn) => tests.push({ name, fn })
const findings = {}
const calls = () => reg.calls()
const stats = () => num(reg.allocator.getStats())
/** What changed in the call counters from `a` to `b` (counters only). */
function delta(a, b) {
  const out = {}
  for (const k of Object.keys(b)) if (typeof b[k] === 'number') out[k] = b[k] - a[k]
  return out
}

const factory = new arena.AllocatorFactory({ name: 'ort-cuda-tests', backend: T.backend })
const reg = arena.useWithOnnxRuntime(factory, T.memory)
const onArena = { ...reg.sessionOptions, executionProviders: T.providers }
const onOrt = { executionProviders: T.providers }
const mlp = MODELS.mlp

async function outputsOf(session, model, shapes, seed) {
  const r = rng(seed)
  const out = []
  for (const [b, s] of shapes) {
    const res = await session.run(model.inputs(ort, b, s, r))
    out.push(outputBytes(model, res))
  }
  return out
}
function shapesFor(d, n, seed) {
  const r = rng(seed)
  return Array.from({ length: n }, () => [1 + Math.floor(r() * d.maxBatch), 8 + Math.floor(r() * Math.max(1, d.maxSeq - 7))])
}

test('the registration reaches onnxruntime-node\'s ONNX Runtime with an OrtApi of 23 or later', () => {
  assert.ok(reg.registered)
  assert.ok(reg.apiVersion >= 23, `apiVersion ${reg.apiVersion}`)
  assert.match(reg.ortVersion, /^1\.\d+\.\d+/)
  findings.ort = { version: reg.ortVersion, apiVersion: reg.apiVersion, dry: T.dry }
})

test('a session on the registered allocator takes its weights and its tensors from the arena', async () => {
  const c0 = calls()
  const s0 = stats()
  const raw0 = factory.deviceStats(0).rawBytesOutstanding
  const session = await ort.InferenceSession.create(mlpPath, onArena)
  try {
    const c1 = calls()
    const s1 = stats()
    // The weights: four 512x512 float matrices (4 MiB) and the biases.
    assert.ok(s1.inUse - s0.inUse >= 4 << 20, `in use after creation: ${s1.inUse - s0.inUse}`)
    assert.ok(s1.totalAllocated > 0, 'the arena holds memory')
    // On the GPU the arena's memory is the device's, through the factory's raw allocator.
    if (!T.dry) assert.ok(factory.deviceStats(0).rawBytesOutstanding > raw0, 'device memory came through the factory')
    await session.run(mlp.inputs(ort, 256, 1, rng(1)))
    const c2 = calls()
    const s2 = stats()
    assert.ok(s2.numAllocs > s1.numAllocs, 'the run allocated from the arena')
    assert.equal(s2.inUse, s1.inUse, "the run's tensors went back")
    findings.creation = { calls: delta(c0, c1), reserves: s1.numReserves - s0.numReserves, allocs: s1.numAllocs - s0.numAllocs, bytes: s1.inUse - s0.inUse }
    findings.run = { calls: delta(c1, c2), allocs: s2.numAllocs - s1.numAllocs }
    console.log('# calls at creation', JSON.stringify(findings.creation))
    console.log('# calls in one run', JSON.stringify(findings.run))
  } finally {
    await session.release()
  }
  assert.equal(stats().inUse, s0.inUse, 'the weights went back with the session')
})

test('every allocation ONNX Runtime asked of the view is one the arena counted', async () => {
  const c0 = calls()
  const s0 = stats()
  const session = await ort.InferenceSession.create(mlpPath, onArena)
  await outputsOf(session, mlp, [[8, 1], [300, 1], [64, 1]], 2)
  await session.release()
  const d = delta(c0, calls())
  const s1 = stats()
  assert.equal(d.failed, 0)
  assert.equal(d.freeIgnored, 0, 'ORT freed only what the view gave it')
  // numAllocs counts allocations and reserves (ORT's NumAllocs); size-0 requests give NULL and count nothing.
  assert.ok(s1.numAllocs - s0.numAllocs <= d.alloc + d.reserve + d.allocOnStream, JSON.stringify({ d, allocs: s1.numAllocs - s0.numAllocs }))
  assert.equal(s1.numReserves - s0.numReserves, d.reserve)
  assert.equal(s1.inUse, s0.inUse)
  if (T.dry) assert.equal(d.allocOnStream, 0, 'the CPU allocator has no AllocOnStream')
})

test('the provider takes weights with Alloc at creation and a run\'s tensors with AllocOnStream on the session\'s stream', async () => {
  const c0 = calls()
  const session = await ort.InferenceSession.create(mlpPath, onArena)
  const c1 = calls()
  await outputsOf(session, mlp, [[16, 1], [200, 1]], 14)
  const c2 = calls()
  await session.release()
  const c3 = calls()
  const [create, runs, release] = [delta(c0, c1), delta(c1, c2), delta(c2, c3)]
  findings.pattern = { create, runs, release }
  console.log('# calls by phase', JSON.stringify(findings.pattern))
  if (T.dry) {
    // The CPU provider: Reserve for the prepacked weights, Alloc for a run's tensors.
    assert.deepEqual([create.reserve, create.alloc, runs.alloc > 0, runs.allocOnStream], [4, 0, true, 0])
  } else {
    // The CUDA provider: every initializer with Alloc (no Reserve); every tensor of a run with
    // AllocOnStream on the stream the provider made for the session, one new stream.
    assert.deepEqual([create.reserve, create.allocOnStream, create.alloc], [0, 0, 8], 'creation: 4 weights and 4 biases with Alloc')
    assert.equal(runs.alloc, 0, 'no Alloc during a run')
    assert.ok(runs.allocOnStream > 0)
    assert.equal(runs.allocOnStreamWithoutStream, 0, 'every AllocOnStream came with a stream')
    assert.equal(runs.newStreams, 1, 'the session brought one stream')
  }
  assert.equal(release.free, create.alloc + create.reserve, 'the weights freed at release')
  assert.equal(runs.free, runs.alloc + runs.allocOnStream, 'every tensor of the runs freed')
})

test('a session created after another was released (its stream destroyed) allocates safely from what the first freed', async () => {
  // The first session's stream is gone once it is released, and ONNX Runtime tells no
  // allocator: recording an event on it when the next session wanted its chunks crashed the
  // process (SIGSEGV on an H200) until events were recorded at the frees themselves.
  const first = await ort.InferenceSession.create(mlpPath, onArena)
  await outputsOf(first, mlp, [[8, 1], [300, 1], [64, 1]], 15)
  await first.release()
  const next = await ort.InferenceSession.create(dyn.path, onArena)
  try {
    await outputsOf(next, dyn.model, shapesFor(dyn, 2, 15), 15)
  } finally {
    await next.release()
  }
  assert.equal(stats().inUse, 0)
})

test('outputs are bitwise those of the same session on ONNX Runtime\'s own allocator', async () => {
  const shapes = [[1, 1], [17, 1], [256, 1], [512, 1]]
  const own = await ort.InferenceSession.create(mlpPath, onOrt)
  const expected = await outputsOf(own, mlp, shapes, 3)
  await own.release()
  const session = await ort.InferenceSession.create(mlpPath, onArena)
  const got = await outputsOf(session, mlp, shapes, 3)
  await session.release()
  got.forEach((g, i) => assert.ok(sameBytes(g, expected[i]), `batch ${shapes[i][0]}: outputs differ`))
})

test('a control session on ONNX Runtime\'s own allocator leaves the arena untouched', async () => {
  const c0 = calls()
  const s0 = stats()
  const own = await ort.InferenceSession.create(mlpPath, onOrt)
  await outputsOf(own, mlp, [[128, 1], [3, 1]], 4)
  await own.release()
  const d = delta(c0, calls())
  for (const [k, v] of Object.entries(d)) if (k !== 'getStats') assert.equal(v, 0, `${k} was called`)
  const s1 = stats()
  assert.deepEqual([s1.numAllocs, s1.numReserves, s1.inUse, s1.totalAllocated], [s0.numAllocs, s0.numReserves, s0.inUse, s0.totalAllocated])
})

test('a model with dynamic shapes gives ONNX Runtime\'s own outputs, request after request', async () => {
  const shapes = shapesFor(dyn, 12, 5)
  const own = await ort.InferenceSession.create(dyn.path, onOrt)
  const expected = await outputsOf(own, dyn.model, shapes, 6)
  await own.release()
  const c0 = calls()
  const session = await ort.InferenceSession.create(dyn.path, onArena)
  const c1 = calls()
  const s1 = stats()
  const r = rng(6)
  for (let i = 0; i < shapes.length; i++) {
    const res = await session.run(dyn.model.inputs(ort, shapes[i][0], shapes[i][1], r))
    assert.ok(sameBytes(outputBytes(dyn.model, res), expected[i]), `request ${i} (${shapes[i]}): outputs differ`)
    assert.equal(stats().inUse, s1.inUse, `request ${i}: in use back to the weights`)
  }
  const c2 = calls()
  await session.release()
  findings.dynamic = { model: bertPath ? 'bert' : 'mlp', creation: delta(c0, c1), runs: delta(c1, c2), requests: shapes.length, maxInUse: stats().maxInUse }
  console.log('# calls, dynamic model', JSON.stringify(findings.dynamic))
})

test('two sessions running at once, each on its own stream, give ONNX Runtime\'s own outputs', async () => {
  const shapes = [shapesFor(dyn, 10, 7), shapesFor(dyn, 10, 8)]
  const own = await ort.InferenceSession.create(dyn.path, onOrt)
  const expected = [await outputsOf(own, dyn.model, shapes[0], 9), await outputsOf(own, dyn.model, shapes[1], 10)]
  await own.release()
  const c0 = calls()
  const sessions = [await ort.InferenceSession.create(dyn.path, onArena), await ort.InferenceSession.create(dyn.path, onArena)]
  const got = await Promise.all(sessions.map((s, i) => outputsOf(s, dyn.model, shapes[i], 9 + i)))
  const d = delta(c0, calls())
  for (const s of sessions) await s.release()
  got.forEach((g, i) => g.forEach((x, j) => assert.ok(sameBytes(x, expected[i][j]), `session ${i} request ${j}: outputs differ`)))
  findings.twoSessions = { calls: d, streamHandles: calls().streamHandles.map(String) }
  console.log('# calls, two sessions at once', JSON.stringify(findings.twoSessions))
  if (!T.dry) assert.ok(d.newStreams >= 2, `streams the two sessions brought: ${d.newStreams}`)
})

test('what a session frees on its stream serves another session\'s stream once the first run has ended', async () => {
  const a = await ort.InferenceSession.create(dyn.path, onArena)
  const b = await ort.InferenceSession.create(dyn.path, onArena)
  const big = [[dyn.maxBatch, dyn.maxSeq]]
  await outputsOf(a, dyn.model, big, 11)
  await outputsOf(a, dyn.model, big, 11)
  const afterA = stats()
  const c0 = calls()
  for (let i = 0; i < 3; i++) await outputsOf(b, dyn.model, big, 11)
  const afterB = stats()
  const d = delta(c0, calls())
  await a.release()
  await b.release()
  const grew = afterB.totalAllocated - afterA.totalAllocated
  findings.crossStream = { heldAfterA: afterA.totalAllocated, heldAfterB: afterB.totalAllocated, grewBytes: grew, runMaxInUse: afterA.maxInUse, calls: d }
  console.log('# second stream', JSON.stringify(findings.crossStream))
  // B's runs need what A's needed; had A's freed chunks stayed A's, B would hold a second set.
  const oneRun = afterA.maxInUse - afterA.inUse
  assert.ok(grew < oneRun / 2, `the arena grew by ${grew} bytes for a second stream (one run's tensors: ${oneRun})`)
})

test('every byte goes back to the device after the sessions are released and the allocator unregistered', async () => {
  const session = await ort.InferenceSession.create(dyn.path, onArena)
  await outputsOf(session, dyn.model, shapesFor(dyn, 3, 12), 12)
  await session.release()
  assert.equal(stats().inUse, 0, 'nothing in use once every session is released')
  const before = num(factory.deviceStats(0))
  reg.unregister()
  const after = num(factory.deviceStats(0))
  findings.unregister = { rawBytesBefore: before.rawBytesOutstanding, rawBytesAfter: after.rawBytesOutstanding, usedMiBAfter: usedBytes(factory) / 2 ** 20 }
  console.log('# unregister', JSON.stringify(findings.unregister))
  assert.equal(after.rawBytesOutstanding, 0, 'raw bytes outstanding after unregister')
  assert.equal(reg.registered, false)
  // New sessions now run on ORT's own allocator, and the arena stays untouched.
  const c0 = calls()
  const own = await ort.InferenceSession.create(mlpPath, onArena)
  await outputsOf(own, mlp, [[4, 1]], 13)
  await own.release()
  const d = delta(c0, calls())
  assert.equal(d.alloc + d.reserve + d.allocOnStream, 0, 'a session made after unregister() used the view')
})

async function main() {
  let passed = 0
  let failed = 0
  // ORT_CUDA_TESTS=2,6: only those (numbers as printed), to chase one failure.
  const only = (process.env.ORT_CUDA_TESTS || '').split(',').filter(Boolean).map(Number)
  for (const [i, t] of tests.entries()) {
    if (only.length && !only.includes(i + 1)) continue
    if (process.env.ORT_CUDA_TRACE) console.log(`# start ${i + 1}`)
    try {
      await t.fn()
      passed += 1
      console.log(`ok ${i + 1} - ${t.name}`)
    } catch (e) {
      failed += 1
      console.log(`not ok ${i + 1} - ${t.name}`)
      console.log(`  ${String(e && e.stack ? e.stack : e).split('\n').join('\n  ')}`)
    }
  }
  console.log('FINDINGS ' + JSON.stringify(findings))
  console.log(`${passed} passed, ${failed} failed`)
  process.exitCode = failed === 0 ? 0 : 1
}
main().catch((e) => {
  console.log('FAILED', e && e.code ? `${e.code}:` : '', e && e.stack ? e.stack : e)
  process.exitCode = 2
})
