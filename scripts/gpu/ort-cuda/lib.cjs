// What tests.cjs and serve.cjs share. Plain CommonJS: the GPU machine has Node (carried) but no
// npm and no TypeScript. The packages come from the unpacked app folder, $ORT_CUDA_APP
// (node_modules/{cuda-arena, cuda-arena-linux-x64-gnu, onnxruntime-node, onnxruntime-common}),
// as a user's app would resolve them.
//
// ORT_CUDA_DRY=1: the dry run (no GPU): the `host` backend, 'Cpu' memory and the CPU provider,
// so CI runs the same scripts through the same packages.
'use strict'
const { createRequire } = require('node:module')
const { join } = require('node:path')

const app = process.env.ORT_CUDA_APP
if (!app) throw new Error('ORT_CUDA_APP must name the unpacked app folder (remote.sh sets it)')
const appRequire = createRequire(join(app, 'package.json'))

/** onnxruntime-node and cuda-arena, resolved from the app. */
function modules() {
  return { ort: appRequire('onnxruntime-node'), arena: appRequire('cuda-arena') }
}

/** Where sessions run: the CUDA provider on device 0, or (dry run) the CPU provider. */
function target() {
  const dry = process.env.ORT_CUDA_DRY === '1'
  return dry
    ? { dry, backend: 'host', memory: { name: 'Cpu' }, providers: ['cpu'] }
    : { dry, backend: 'cuda', memory: { name: 'Cuda', deviceId: 0 }, providers: [{ name: 'cuda', deviceId: 0 }] }
}

/** A seeded generator of floats in [0, 1) (LCG: the same draws on every machine). */
function rng(seed) {
  let s = seed >>> 0
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0
    return s / 2 ** 32
  }
}

/** `k=v,k=v` into an options object ('' gives none). */
function parseConf(conf) {
  const out = {}
  for (const kv of (conf || '').split(',').filter(Boolean)) {
    const i = kv.indexOf('=')
    if (i <= 0) throw new Error(`bad config entry ${JSON.stringify(kv)}: want key=value`)
    out[kv.slice(0, i)] = kv.slice(i + 1)
  }
  return out
}

/** Bigints of a stats object as numbers (sizes below 2^53). */
function num(o) {
  return Object.fromEntries(Object.entries(o).map(([k, v]) => [k, typeof v === 'bigint' ? Number(v) : v]))
}

/**
 * The models the scripts feed. `bert`: BERT-base exported by export_bert.py (input_ids and
 * attention_mask [batch, sequence], outputs last_hidden_state and pooler_output). `mlp`: the
 * test suite's model (__test__/ort/model.ts: x [batch, 512] -> y), written by pack.sh.
 */
const MODELS = {
  bert: {
    inputs(ort, batch, seq, r) {
      const ids = new BigInt64Array(batch * seq)
      for (let i = 0; i < ids.length; i++) ids[i] = BigInt(Math.floor(r() * 30000))
      const mask = new BigInt64Array(batch * seq).fill(1n)
      return { input_ids: new ort.Tensor('int64', ids, [batch, seq]), attention_mask: new ort.Tensor('int64', mask, [batch, seq]) }
    },
    outputs: ['last_hidden_state', 'pooler_output'],
    summary: 'pooler_output',
  },
  mlp: {
    inputs(ort, batch, _seq, r) {
      const x = new Float32Array(batch * 512)
      for (let i = 0; i < x.length; i++) x[i] = r() * 2 - 1
      return { x: new ort.Tensor('float32', x, [batch, 512]) }
    },
    outputs: ['y'],
    summary: 'y',
  },
}

/** The bytes of every output of `result`, for bit-for-bit comparison. */
function outputBytes(model, result) {
  return model.outputs.map((n) => {
    const d = result[n].data
    return Buffer.from(d.buffer, d.byteOffset, d.byteLength)
  })
}

/** Whether two outputBytes lists are equal bit for bit. */
function sameBytes(a, b) {
  return a.length === b.length && a.every((x, i) => x.equals(b[i]))
}

/**
 * Memory in use on device 0 as the driver counts it (cuMemGetInfo: total - free), in bytes;
 * on `host` (dry run) the factory's raw bytes outstanding, the closest it has.
 */
function usedBytes(factory) {
  const d = factory.deviceStats(0)
  if (d.total !== undefined && d.free !== undefined) return Number(d.total - d.free)
  return Number(d.rawBytesOutstanding)
}

/** What a benchmark process runs on: the target, the two packages (ORT logging errors only), the model. */
function runtime(kind) {
  const T = target()
  const { ort, arena } = modules()
  ort.env.logLevel = 'error'
  return { T, ort, arena, model: MODELS[kind] }
}

/** A request's shape drawn from `r`: batch 1..maxBatch, sequence 8..maxSeq (serve.cjs and pair.cjs alike). */
function drawShape(r, maxBatch, maxSeq) {
  const b = 1 + Math.floor(r() * Number(maxBatch))
  const s = 8 + Math.floor(r() * (Number(maxSeq) - 7))
  return [b, s]
}

module.exports = { modules, target, runtime, drawShape, rng, parseConf, num, MODELS, outputBytes, sameBytes, usedBytes }
