/**
 * cuda-arena: ONNX Runtime's BFC arena, a memory-pool wrapper and a per-device allocator
 * factory for Node.js. See README.md.
 */
import { native } from './native'
import type { ArenaOptions } from './config'
import type { DeviceInfo } from './types'

export { AllocatorFactory } from './factory-impl'
export { toArenaPairs } from './config'
export type { ArenaConfig, ArenaOptions, ExtendStrategy } from './config'
export * from './errors'
export { mixedTrace, replayTrace, nativePairNs } from './trace'
export type { TraceOp, ReplayReport } from './trace'
export type * from './types'
export { cLibrary, packageVersion, platformId, prebuiltPlatforms, ERR_NO_NATIVE_BINDING } from './platform'
export type { CLibrary } from './platform'

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

/** `ep_factory.<factoryName>.arena.*` options → bare `arena.*` pairs (name matched exactly). */
export function envArenaOptions(options: Record<string, string>, factoryName: string): ArenaOptions {
  return native.envArenaOptions(options, factoryName)
}

/** `ep.<lowercased epName>.arena.*` options → bare `arena.*` pairs. */
export function sessionArenaOptions(options: Record<string, string>, epName: string): ArenaOptions {
  return native.sessionArenaOptions(options, epName)
}

/** Validates raw pairs and returns the full config, every key present (throws `ERR_ARENA_INVALID_CONFIG`). */
export function parseArenaConfig(options: ArenaOptions): ArenaOptions {
  return native.parseArenaConfig(options)
}

/** The error codes the native layer knows, for checking they match {@link ERROR_CODES}. */
export function nativeErrorCodes(): string[] {
  return native.errorCodes()
}
