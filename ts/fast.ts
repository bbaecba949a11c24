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

export const fastAlloc = native.fastAlloc
export const fastAllocOnStream = native.fastAllocOnStream
export const fastFree = native.fastFree
