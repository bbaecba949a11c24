/**
 * cuda-arena: ONNX Runtime's BFC arena, a memory-pool wrapper and a per-device allocator
 * factory for Node.js. See README.md.
 */
import { native } from './native'
import { toPairLists, type ArenaConfig, type ArenaOptions } from './config'
import { invalidArgument } from './errors'
import { str, stringPairs } from './args'
import type { DeviceInfo } from './types'

export { AllocatorFactory } from './factory-impl'
export { toArenaPairs } from './config'
export type { ArenaConfig, ArenaOptions, ExtendStrategy } from './config'
export * from './errors'
export { mixedTrace, replayTrace, nativePairNs, MAX_TRACE_OPS, MAX_TRACE_STREAMS } from './trace'
export type { TraceOp, TraceInput, ReplayReport } from './trace'
export type * from './types'
export { cLibrary, packageVersion, platformId, prebuiltPlatforms, ERR_NO_NATIVE_BINDING } from './platform'
export type { CLibrary } from './platform'
export { useWithOnnxRuntime, nativeOrtErrorCodes } from './onnxruntime'
export type { OnnxRuntimeAllocatorCalls, OnnxRuntimeMemoryInfo, OnnxRuntimeOptions, OnnxRuntimeRegistration, OnnxRuntimeSessionOptions } from './onnxruntime'

/** The GPUs the CUDA driver reports; `[]` without a driver. Never throws. */
export function devices(): DeviceInfo[] {
  try {
    return native.devices().map((d) => ({
      ordinal: d.ordinal,
      name: d.name,
      totalMemory: d.totalMemory,
      freeMemory: d.freeMemory,
      pciBusId: d.pciBusId,
      uuid: d.uuid,
      computeCapability: [d.computeCapability[0], d.computeCapability[1]] as [number, number],
      memoryPoolsSupported: d.memoryPoolsSupported,
    }))
  } catch {
    return []
  }
}

/** Whether a CUDA driver with a device is usable here. Never throws. */
export function cudaAvailable(): boolean {
  return native.cudaAvailable()
}

/** Options as `[keys, values]`, own enumerable string properties only. */
function lists(name: string, options: unknown): [string[], string[]] {
  const pairs = stringPairs(name, options)
  return [pairs.map(([k]) => k), pairs.map(([, v]) => v)]
}

/** `[keys, values]` → an object with those own properties (`__proto__` included as a key). */
function record([keys, values]: string[][]): ArenaOptions {
  const out: ArenaOptions = {}
  keys.forEach((k, i) => Object.defineProperty(out, k, { value: values[i], enumerable: true, writable: true, configurable: true }))
  return out
}

/** `ep_factory.<factoryName>.arena.*` options → bare `arena.*` pairs (name matched exactly). */
export function envArenaOptions(options: Record<string, string>, factoryName: string): ArenaOptions {
  const [keys, values] = lists('options', options)
  return record(native.envArenaOptions(keys, values, str('factoryName', factoryName)))
}

/** `ep.<lowercased epName>.arena.*` options → bare `arena.*` pairs. */
export function sessionArenaOptions(options: Record<string, string>, epName: string): ArenaOptions {
  const [keys, values] = lists('options', options)
  return record(native.sessionArenaOptions(keys, values, str('epName', epName)))
}

/**
 * Validates raw pairs (or a typed config) and returns the full config as raw pairs, every
 * key present; what it returns is accepted back (throws `ERR_ARENA_INVALID_CONFIG`).
 */
export function parseArenaConfig(options: ArenaOptions | ArenaConfig): ArenaOptions {
  const pairs = toPairLists(options)
  if (pairs === null) throw invalidArgument('options', options, 'must be an object of arena.* strings or a typed ArenaConfig')
  return record(native.parseArenaConfig(pairs[0], pairs[1]))
}

/** The error codes the native layer knows, for checking they match {@link ERROR_CODES}. */
export function nativeErrorCodes(): string[] {
  return native.errorCodes()
}
