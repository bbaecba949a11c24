/**
 * onnxruntime-node for the tests and the benchmark: an optional peer dependency, loaded if it
 * can be. See `test.ts` for how tests skip without it.
 */
import type * as Ort from 'onnxruntime-node'

/** Why onnxruntime-node could not be loaded, or undefined when it was. */
let loadError: unknown
let loaded: typeof Ort | undefined
try {
  loaded = require('onnxruntime-node') as typeof Ort
} catch (e) {
  loadError = e
}

/** Whether onnxruntime-node loaded. */
export const ortAvailable = loaded !== undefined

/** onnxruntime-node; throws when it could not be loaded. */
export function ort(): typeof Ort {
  if (loaded === undefined) throw new Error(`onnxruntime-node could not be loaded: ${String(loadError)}`)
  return loaded
}
