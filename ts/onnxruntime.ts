/**
 * onnxruntime-node sessions on a cuda-arena allocator: `useWithOnnxRuntime` registers an
 * allocator of a factory with the environment of the ONNX Runtime that onnxruntime-node loaded
 * in this process, and sessions created with `registration.sessionOptions` allocate from it.
 *
 * How: ONNX Runtime's environment is process-wide, and its library is one shared object. The
 * native side opens that same library (`RTLD_NOLOAD`: only if it is already loaded), negotiates
 * an `OrtApi` version, takes the environment with `CreateEnv` and calls `RegisterAllocator`
 * with cuda-arena's `OrtAllocator` view of the allocator (`bindings/node/src/exports/ort.rs`, over the
 * `cuda-arena-ort-allocator` crate). A session opts in with the session config entry
 * `session.use_env_allocators=1`, which onnxruntime-node passes on from `extra`.
 *
 * Lifetime: sessions created before `unregister()` keep allocating from the view, and
 * onnxruntime-node never releases sessions still open at exit, so the view and the arena user it
 * holds live until the process exits; `unregister()` stops new sessions from taking it and hands
 * the arena's wholly free memory back to the device. A
 * registration still in force when the thread that made it ends (a worker) is unregistered then.
 *
 * onnxruntime-node is an optional peer dependency: nothing here loads it until this is called.
 */
import { dirname, join } from 'node:path'
import { native, type Native } from './native'
import { toPairLists, type ArenaConfig, type ArenaOptions } from './config'
import { ERR_ARENA_RELEASED, ERR_ORT_LOAD, ERR_ORT_NOT_FOUND, invalidArgument, ortError } from './errors'
import { instance, int, MAX_U32, obj, options as optionsArg, optInt, own, ownEntries, str } from './args'
import { AllocatorFactory } from './factory-impl'
import { AllocatorImpl } from './allocator-impl'
import type { OrtAllocator } from './types'

/** Which memory the registered allocator serves (ONNX Runtime's memory info names). */
export interface OnnxRuntimeMemoryInfo {
  /** `'Cpu'` for the CPU provider's sessions; `'Cuda'` / `'CudaPinned'` for the CUDA provider's. */
  name: 'Cpu' | 'Cuda' | 'CudaPinned'
  /** The device ordinal. Default 0. */
  deviceId?: number
}

/** Where to find ONNX Runtime and which API to use. */
export interface OnnxRuntimeOptions {
  /**
   * The ONNX Runtime shared library to register with; it is loaded if it is not yet. Default:
   * onnxruntime-node's own (`bin/napi-v6/<platform>/<arch>/libonnxruntime.so.1` of the
   * onnxruntime-node this package resolves), after loading onnxruntime-node.
   */
  libraryPath?: string
  /** The `OrtApi` version to use. Default: the highest that both the library and cuda-arena know. */
  apiVersion?: number
}

/** The session options fragment that makes a session use the environment's allocators. */
export interface OnnxRuntimeSessionOptions {
  readonly extra: { readonly session: { readonly use_env_allocators: '1' } }
}

/**
 * How often ONNX Runtime called each function of the registered `OrtAllocator`, since it was
 * registered: what a provider asks of its allocator. The CUDA provider, for instance, calls
 * `AllocOnStream` with its sessions' streams; `Reserve` is for initializers.
 */
export interface OnnxRuntimeAllocatorCalls {
  /** `Alloc` calls. */
  readonly alloc: number
  /** `Reserve` calls. */
  readonly reserve: number
  /** `AllocOnStream` calls, with or without a stream. */
  readonly allocOnStream: number
  /** Of those, the calls with no stream or a stream without a native handle (served as `Alloc`). */
  readonly allocOnStreamWithoutStream: number
  /** `Free` calls with a non-null address. */
  readonly free: number
  /** Of those, frees of an address the allocator did not hold (logged and ignored). */
  readonly freeIgnored: number
  /** `Alloc`, `Reserve` and `AllocOnStream` calls that returned null for a non-zero size. */
  readonly failed: number
  /** `GetStats` calls. */
  readonly getStats: number
  /** `Shrink` calls. */
  readonly shrink: number
  /** Streams `AllocOnStream` made known to the allocator (a native handle seen for the first time, or again after it was forgotten). */
  readonly newStreams: number
  /** The native handles (`cudaStream_t` values) of the streams the allocator knows now, lowest first. */
  readonly streamHandles: readonly bigint[]
}

/** What `useWithOnnxRuntime` returns. */
export interface OnnxRuntimeRegistration {
  /** The registered cuda-arena allocator, for `getStats()` and `memoryLog()`; released by `unregister()`. */
  readonly allocator: OrtAllocator
  /** The `OrtApi` version in use. */
  readonly apiVersion: number
  /** The ONNX Runtime library registered with. */
  readonly libraryPath: string
  /** That library's version (`OrtGetApiBase()->GetVersionString()`), e.g. `'1.30.0'`. */
  readonly ortVersion: string
  /** Spread into `InferenceSession.create`'s options (merge by hand if you pass `extra` too). */
  readonly sessionOptions: OnnxRuntimeSessionOptions
  /** Whether the allocator is still registered. */
  readonly registered: boolean
  /** How often ONNX Runtime called each allocator function, and the streams it brought; works after `unregister()` too. */
  calls(): OnnxRuntimeAllocatorCalls
  /**
   * Unregisters the allocator (new sessions use ONNX Runtime's own), hands the arena's wholly
   * free memory back to the device (as `shrink()`) and releases `allocator`. Sessions created
   * before keep using the view. A second call does nothing.
   */
  unregister(): void
}

const MEMORY_NAMES: readonly string[] = ['Cpu', 'Cuda', 'CudaPinned']
const SESSION_OPTIONS: OnnxRuntimeSessionOptions = Object.freeze({
  extra: Object.freeze({ session: Object.freeze({ use_env_allocators: '1' as const }) }),
})

/** The ONNX Runtime library of the onnxruntime-node this package resolves, loaded. */
function onnxRuntimeNodeLibrary(): string {
  let manifest: string
  try {
    manifest = require.resolve('onnxruntime-node/package.json')
  } catch (e) {
    throw ortError(ERR_ORT_NOT_FOUND, 'onnxruntime-node is not installed (it is an optional peer dependency: npm install onnxruntime-node), or give ortOptions.libraryPath', { cause: e })
  }
  const root = dirname(manifest)
  try {
    require(root)
  } catch (e) {
    throw ortError(ERR_ORT_LOAD, `onnxruntime-node at ${root} could not be loaded`, { cause: e })
  }
  // onnxruntime-node creates ONNX Runtime's environment at its first session; create it now,
  // as it would, so the environment has its settings (ort.env.logLevel) rather than ours. Its
  // internal module may move in another version: then the environment is made with ours.
  let initOrt: unknown
  try {
    initOrt = (require(join(root, 'dist', 'binding')) as { initOrt?: unknown }).initOrt
  } catch {
    initOrt = undefined
  }
  try {
    if (typeof initOrt === 'function') (initOrt as () => void)()
  } catch (e) {
    throw ortError(ERR_ORT_LOAD, `onnxruntime-node at ${root} could not start ONNX Runtime`, { cause: e })
  }
  return join(root, 'bin', 'napi-v6', process.platform, process.arch, 'libonnxruntime.so.1')
}

class Registration implements OnnxRuntimeRegistration {
  readonly sessionOptions = SESSION_OPTIONS
  readonly #native: Native.NativeOrtRegistration
  readonly #factory: AllocatorFactory
  #unregistered = false

  constructor(native: Native.NativeOrtRegistration, factory: AllocatorFactory, readonly allocator: OrtAllocator) {
    this.#native = native
    this.#factory = factory
  }
  get apiVersion(): number {
    return this.#native.apiVersion()
  }
  get libraryPath(): string {
    return this.#native.libraryPath()
  }
  get ortVersion(): string {
    return this.#native.ortVersion()
  }
  get registered(): boolean {
    return this.#native.isRegistered()
  }
  calls(): OnnxRuntimeAllocatorCalls {
    const c = this.#native.calls()
    return Object.freeze({
      alloc: c.alloc,
      reserve: c.reserve,
      allocOnStream: c.allocOnStream,
      allocOnStreamWithoutStream: c.allocOnStreamWithoutStream,
      free: c.free,
      freeIgnored: c.freeIgnored,
      failed: c.failed,
      getStats: c.getStats,
      shrink: c.shrink,
      newStreams: c.newStreams,
      streamHandles: Object.freeze(c.streamHandles.map((h) => BigInt(h))),
    })
  }
  unregister(): void {
    if (this.#unregistered) return
    this.#native.unregister()
    this.#unregistered = true
    try {
      this.#factory.releaseAllocator(this.allocator)
    } catch (e) {
      // The caller released it already: nothing left to give back.
      if ((e as { code?: unknown }).code !== ERR_ARENA_RELEASED) throw e
    }
  }
}

/**
 * Registers `factory`'s shared allocator for `info` (created with `options` if it does not
 * exist yet) with the environment of the ONNX Runtime loaded in this process, and returns the
 * registration; sessions created with `registration.sessionOptions` allocate from it.
 *
 * Throws `ERR_ORT_NOT_FOUND` (onnxruntime-node not installed, or its library not loaded),
 * `ERR_ORT_LOAD` (the library or onnxruntime-node cannot be loaded), `ERR_ORT_VERSION` (no
 * common `OrtApi` version), `ERR_ORT_REFUSED` (ONNX Runtime refused: e.g. an allocator is
 * already registered for this memory info), and the factory's codes for `info` and `options`.
 * A failed call changes nothing.
 */
export function useWithOnnxRuntime(
  factory: AllocatorFactory,
  info: OnnxRuntimeMemoryInfo,
  options?: ArenaOptions | ArenaConfig,
  ortOptions?: OnnxRuntimeOptions,
): OnnxRuntimeRegistration {
  const f = instance('factory', factory, AllocatorFactory, 'must be an AllocatorFactory')
  const i = obj('info', info)
  ownEntries('info', i, ['name', 'deviceId'])
  const name = own(i, 'name')
  if (typeof name !== 'string' || !MEMORY_NAMES.includes(name)) throw invalidArgument('info.name', name, "must be 'Cpu', 'Cuda' or 'CudaPinned'")
  const deviceId = optInt('info.deviceId', own(i, 'deviceId'), 0, MAX_U32, 0)
  const pairs = toPairLists(options)
  // Checked now, so a bad config is refused before onnxruntime-node is loaded.
  if (pairs !== null) native.parseArenaConfig(pairs[0], pairs[1])
  const o = optionsArg('ortOptions', ortOptions)
  ownEntries('ortOptions', o, ['libraryPath', 'apiVersion'])
  const pathArg = own(o, 'libraryPath')
  const givenVersion = own(o, 'apiVersion')
  const givenPath = pathArg === undefined ? undefined : str('ortOptions.libraryPath', pathArg)
  if (givenPath === '' || givenPath?.includes('\0')) {
    throw invalidArgument('ortOptions.libraryPath', givenPath, 'must be a non-empty path without NUL characters')
  }
  const apiVersion = givenVersion === undefined ? undefined : int('ortOptions.apiVersion', givenVersion, 1, MAX_U32)

  const libraryPath = givenPath ?? onnxRuntimeNodeLibrary()
  // The pairs read once above, so the view's user is made with exactly the allocator's options.
  const raw = pairs === null ? undefined : Object.fromEntries(pairs[0].map((k, j) => [k, pairs[1][j]]))
  const allocator = f.createAllocator({ name: name as OnnxRuntimeMemoryInfo['name'], deviceId }, raw)
  let registration: Native.NativeOrtRegistration
  try {
    registration = native.ortRegister((allocator as AllocatorImpl).native, pairs?.[0], pairs?.[1], libraryPath, givenPath === undefined, apiVersion)
  } catch (e) {
    f.releaseAllocator(allocator)
    throw e
  }
  return new Registration(registration, f, allocator)
}

/** The codes the native side raises for ONNX Runtime, for checking they match `ORT_ERROR_CODES`. */
export function nativeOrtErrorCodes(): string[] {
  return native.ortErrorCodes()
}
