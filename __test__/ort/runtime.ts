/**
 * onnxruntime-node for the tests: an optional peer dependency, so the tests that need it skip
 * when it cannot be loaded, unless `CUDA_ARENA_REQUIRE_ORT=1` (set by CI), which makes them
 * run and fail saying why.
 */
import test from 'ava'
import type * as Ort from 'onnxruntime-node'

/** Why onnxruntime-node could not be loaded, or undefined when it was. */
let loadError: unknown
let loaded: typeof Ort | undefined
try {
  loaded = require('onnxruntime-node') as typeof Ort
} catch (e) {
  loadError = e
}

const required = process.env.CUDA_ARENA_REQUIRE_ORT === '1'

/** `test` when onnxruntime-node loads (or is required), else `test.skip`. */
export const ortTest = loaded !== undefined || required ? test : test.skip

/** onnxruntime-node; throws (failing the test) when it could not be loaded. */
export function ort(): typeof Ort {
  if (loaded === undefined) {
    throw new Error(`onnxruntime-node could not be loaded (CUDA_ARENA_REQUIRE_ORT=1 makes that a failure): ${String(loadError)}`)
  }
  return loaded
}
