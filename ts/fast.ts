/**
 * This copy of the package's fast path (see bindings/node/src/exports/fast.rs): the arguments and
 * results of the hottest calls pass through a scratch block of its own, which the native side
 * owns, so each call converts no arguments. Another copy of the package in this thread (a
 * cleared `require` cache, two versions of a dependency) has its own. Where the runtime
 * refuses external buffers, there is no fast path and every call takes the checked one.
 * Internal.
 */
import { native } from './native'

/** What `createFastPath()` returns. Not in the generated typings, so typed here. */
interface FastPath {
  /** 32 bytes: [allocator handle, size or address, result address, stream handle]. */
  buffer: ArrayBuffer
  alloc(): void
  allocOnStream(): void
  free(): void
}

function create(): FastPath | undefined {
  const make = (native as unknown as { createFastPath?: () => FastPath | undefined }).createFastPath
  try {
    return make?.() ?? undefined
  } catch {
    return undefined
  }
}

/** The fast path, or `undefined` when there is none. */
export const fast: FastPath | undefined = create()
const buffer = fast?.buffer ?? new ArrayBuffer(32)
/** [handle, size, -, stream handle] as numbers. */
export const scratchF64 = new Float64Array(buffer)
/** [-, address, result address, -] as 64-bit integers. */
export const scratchU64 = new BigUint64Array(buffer)
/** The result address as two 32-bit halves: both 0 means no address (no bigint is made). */
export const scratchU32 = new Uint32Array(buffer)
