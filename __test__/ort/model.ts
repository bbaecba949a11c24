/**
 * The ONNX test model, built by the test suite itself: `layers` × (MatMul by a `width`×`width`
 * weight, Add a bias, Relu — no Relu after the last), float32, weights drawn from a seeded
 * generator. With the default spec the weights are 4 MiB (four 1 MiB initializers) and each
 * intermediate of a 512-row batch is 1 MiB. `referenceOutput` computes the same function in
 * JS, independently of ONNX Runtime, to check the builder.
 *
 * Written with the small protobuf writer beside it (no `onnx` package, nothing fetched).
 * Field numbers are onnx.proto's.
 */
import { mkdtempSync, writeFileSync } from 'node:fs'
import { endianness, tmpdir } from 'node:os'
import { join } from 'node:path'
import { bytes, concat, message, string, varint } from './protobuf'

/** What the model is. */
export interface ModelSpec {
  /** Features per row: every weight is `width`×`width`, every bias `width`. */
  readonly width: number
  /** MatMul+Add(+Relu) layers. */
  readonly layers: number
  /** Seed of the weights. */
  readonly seed: number
}

/** The model the tests and the benchmark use: 4 MiB of weights, 1 MiB per intermediate at 512 rows. */
export const TEST_MODEL: ModelSpec = { width: 512, layers: 4, seed: 1 }
/** Rows of the batch the tests run. */
export const TEST_BATCH = 512

/** The graph's input and output names. */
export const INPUT = 'x'
export const OUTPUT = 'y'

/** The model's parameters, as the builder wrote them. */
export interface ModelWeights {
  readonly spec: ModelSpec
  /** `weights[i]` is layer i's `width`×`width` matrix, row-major (`[in][out]`). */
  readonly weights: Float32Array[]
  readonly biases: Float32Array[]
}

// onnx.proto
const FLOAT = 1
const IR_VERSION = 8
const OPSET = 17

/** mulberry32: a small seeded generator, so the weights are the same on every machine. */
export function random(seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/** `n` floats uniform in `[-scale, scale)`. */
function uniform(next: () => number, n: number, scale: number): Float32Array {
  const out = new Float32Array(n)
  for (let i = 0; i < n; i++) out[i] = (next() * 2 - 1) * scale
  return out
}

/** The weights of `spec` (Glorot-like scale, so activations stay near 1 through the layers). */
export function modelWeights(spec: ModelSpec = TEST_MODEL): ModelWeights {
  const next = random(spec.seed)
  const scale = Math.sqrt(6 / (2 * spec.width))
  const weights: Float32Array[] = []
  const biases: Float32Array[] = []
  for (let i = 0; i < spec.layers; i++) {
    weights.push(uniform(next, spec.width * spec.width, scale))
    biases.push(uniform(next, spec.width, 0.1))
  }
  return { spec, weights, biases }
}

/** A float tensor's little-endian bytes (raw_data is little-endian by the ONNX spec). */
function rawFloats(data: Float32Array): Uint8Array {
  // Both platforms cuda-arena ships for (x64, arm64 Linux) are little-endian.
  if (endianness() !== 'LE') throw new Error('the model builder writes raw_data on little-endian machines only')
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength)
}

/** TensorProto: an initializer. */
function tensor(field: number, name: string, dims: number[], data: Float32Array): Uint8Array {
  return message(field, [...dims.map((d) => varint(1, d)), varint(2, FLOAT), string(8, name), bytes(9, rawFloats(data))])
}

/** ValueInfoProto of a float tensor; a string dim is symbolic. */
function valueInfo(field: number, name: string, dims: (number | string)[]): Uint8Array {
  const dim = (d: number | string): Uint8Array => message(1, [typeof d === 'number' ? varint(1, d) : string(2, d)])
  const shape = message(2, dims.map(dim))
  const tensorType = message(1, [varint(1, FLOAT), shape])
  return message(field, [string(1, name), message(2, [tensorType])])
}

/** NodeProto. */
function node(opType: string, name: string, inputs: string[], outputs: string[]): Uint8Array {
  return message(1, [...inputs.map((i) => string(1, i)), ...outputs.map((o) => string(2, o)), string(3, name), string(4, opType)])
}

/** The model's bytes (a serialized ModelProto); the batch dimension is symbolic. */
export function modelBytes(weights: ModelWeights = modelWeights()): Uint8Array {
  const { width, layers } = weights.spec
  const nodes: Uint8Array[] = []
  const initializers: Uint8Array[] = []
  let current = INPUT
  for (let i = 0; i < layers; i++) {
    const last = i === layers - 1
    const [w, b, mm, add, relu] = [`w${i}`, `b${i}`, `mm${i}`, `add${i}`, `relu${i}`]
    initializers.push(tensor(5, w, [width, width], weights.weights[i]), tensor(5, b, [width], weights.biases[i]))
    nodes.push(node('MatMul', `MatMul${i}`, [current, w], [mm]))
    nodes.push(node('Add', `Add${i}`, [mm, b], [last ? OUTPUT : add]))
    if (!last) nodes.push(node('Relu', `Relu${i}`, [add], [relu]))
    current = relu
  }
  const graph = message(7, [
    ...nodes,
    string(2, 'cuda_arena_test_mlp'),
    ...initializers,
    valueInfo(11, INPUT, ['batch', width]),
    valueInfo(12, OUTPUT, ['batch', width]),
  ])
  return concat([varint(1, IR_VERSION), string(2, 'cuda-arena tests'), graph, message(8, [string(1, ''), varint(2, OPSET)])])
}

/** Writes the model to a new temporary directory; returns the file's path. */
export function writeModel(spec: ModelSpec = TEST_MODEL): string {
  const file = join(mkdtempSync(join(tmpdir(), 'cuda-arena-model-')), 'mlp.onnx')
  writeFileSync(file, modelBytes(modelWeights(spec)))
  return file
}

/** A seeded `batch`×`width` input. */
export function modelInput(spec: ModelSpec = TEST_MODEL, batch: number = TEST_BATCH, seed = 7): Float32Array {
  return uniform(random(seed), batch * spec.width, 1)
}

/**
 * The model's output for `input` (`batch` rows), computed in JS in float64: ONNX Runtime's
 * float32 kernels sum in another order, so the two agree to rounding, not bit for bit.
 */
export function referenceOutput(weights: ModelWeights, input: Float32Array, batch: number): Float64Array {
  const { width, layers } = weights.spec
  let x = Float64Array.from(input)
  for (let l = 0; l < layers; l++) {
    const w = weights.weights[l]
    const b = weights.biases[l]
    const y = new Float64Array(batch * width)
    for (let r = 0; r < batch; r++) {
      for (let k = 0; k < width; k++) {
        const xv = x[r * width + k]
        if (xv === 0) continue
        const row = k * width
        for (let c = 0; c < width; c++) y[r * width + c] += xv * w[row + c]
      }
      for (let c = 0; c < width; c++) {
        const v = y[r * width + c] + b[c]
        y[r * width + c] = l === layers - 1 ? v : Math.max(0, v)
      }
    }
    x = y
  }
  return x
}
