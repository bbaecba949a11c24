/**
 * ava's `test` for the ONNX Runtime tests: they skip when onnxruntime-node (an optional peer
 * dependency) cannot be loaded, unless `CUDA_ARENA_REQUIRE_ORT=1` (set by CI), which makes them
 * run and fail saying why.
 */
import test from 'ava'
import { ortAvailable } from './runtime'

const run = ortAvailable || process.env.CUDA_ARENA_REQUIRE_ORT === '1'

/** `test` when onnxruntime-node loads or is required, else `test.skip`. */
export const ortTest = run ? test : test.skip
/** `test.serial` when onnxruntime-node loads or is required, else `test.skip`. */
export const ortSerial = run ? test.serial : test.skip
