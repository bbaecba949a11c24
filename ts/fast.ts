/**
 * The fast path (see bindings/node/src/fast.rs): arguments and results of the hottest calls
 * pass through a scratch buffer this module owns for the life of the thread, so each call
 * converts no arguments. Internal.
 */
import { native } from './native'

const buffer = new ArrayBuffer(32)
/** [handle, size, -, stream handle] as numbers. */
export const scratchF64 = new Float64Array(buffer)
/** [-, address, result address, -] as 64-bit integers. */
export const scratchU64 = new BigUint64Array(buffer)
native.fastInit(buffer)

/** The same three calls registered by hand (bindings/node/src/fast.rs): no argument handling
 * at all on the native side. Not in the generated typings, so typed here. */
interface RawFastPath {
  rawFastAlloc(): void
  rawFastAllocOnStream(): void
  rawFastFree(): void
}
const raw = native as unknown as Partial<RawFastPath>

export const fastAlloc: () => void = raw.rawFastAlloc ?? native.fastAlloc
export const fastAllocOnStream: () => void = raw.rawFastAllocOnStream ?? native.fastAllocOnStream
export const fastFree: () => void = raw.rawFastFree ?? native.fastFree
