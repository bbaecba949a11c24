/**
 * Sessions of the test model, for the ONNX Runtime tests and for anything else that needs real
 * ONNX Runtime traffic on a cuda-arena allocator (trace recording, the benchmark):
 * `runOnFactory` registers a factory's allocator, creates a session on it, runs it and reports
 * the allocator's stats at each step.
 */
import type * as Ort from 'onnxruntime-node'
import { ort } from './runtime'
import { INPUT, OUTPUT, TEST_BATCH, TEST_MODEL, modelInput, writeModel } from './model'
import {
  useWithOnnxRuntime,
  type AllocatorFactory,
  type AllocatorStats,
  type ArenaConfig,
  type ArenaOptions,
  type OnnxRuntimeMemoryInfo,
  type OnnxRuntimeOptions,
  type OnnxRuntimeRegistration,
} from '../../ts/index'

let modelFile: string | undefined
/** The test model ({@link TEST_MODEL}), written once per process. */
export function testModelPath(): string {
  modelFile ??= writeModel(TEST_MODEL)
  return modelFile
}

/**
 * A session of the test model: with `registration`, one that allocates from the registered
 * allocator; without, one on ONNX Runtime's own allocator.
 */
export async function createSession(registration?: OnnxRuntimeRegistration, options: Ort.InferenceSession.SessionOptions = {}): Promise<Ort.InferenceSession> {
  const { InferenceSession } = ort()
  return InferenceSession.create(testModelPath(), { ...options, ...(registration?.sessionOptions ?? {}) })
}

/** One run on the seeded input of `batch` rows; the output's floats. */
export async function runOnce(session: Ort.InferenceSession, batch: number = TEST_BATCH): Promise<Float32Array> {
  const { Tensor } = ort()
  const out = await session.run({ [INPUT]: new Tensor('float32', modelInput(TEST_MODEL, batch), [batch, TEST_MODEL.width]) })
  return out[OUTPUT].data as Float32Array
}

/** What {@link runOnFactory} saw. */
export interface FactoryRun {
  /** The allocator's stats right after registering, after creating the session, after each run. */
  readonly registered: AllocatorStats
  readonly created: AllocatorStats
  readonly afterRuns: AllocatorStats[]
  /** Each run's output. */
  readonly outputs: Float32Array[]
}

/** Options of {@link runOnFactory}. */
export interface RunOnFactoryOptions {
  /** Default 2. */
  runs?: number
  /** Rows per run. Default {@link TEST_BATCH}. */
  batch?: number
  /** Default `{ name: 'Cpu' }`. */
  info?: OnnxRuntimeMemoryInfo
  options?: ArenaOptions | ArenaConfig
  ortOptions?: OnnxRuntimeOptions
  sessionOptions?: Ort.InferenceSession.SessionOptions
  /** Called once registered, before the session exists (e.g. to start recording). */
  onRegistered?: (registration: OnnxRuntimeRegistration) => void
}

/**
 * The test model on `factory`'s allocator: registers it, creates a session, runs it, and
 * returns the stats after each step; then releases the session and unregisters, also on
 * failure. Tests in one process must not run it concurrently (one registration per memory info).
 */
export async function runOnFactory(factory: AllocatorFactory, o: RunOnFactoryOptions = {}): Promise<FactoryRun> {
  const registration = useWithOnnxRuntime(factory, o.info ?? { name: 'Cpu' }, o.options, o.ortOptions)
  try {
    const registered = registration.allocator.getStats()
    o.onRegistered?.(registration)
    const session = await createSession(registration, o.sessionOptions)
    try {
      const created = registration.allocator.getStats()
      const afterRuns: AllocatorStats[] = []
      const outputs: Float32Array[] = []
      for (let i = 0; i < (o.runs ?? 2); i++) {
        outputs.push(await runOnce(session, o.batch))
        afterRuns.push(registration.allocator.getStats())
      }
      return { registered, created, afterRuns, outputs }
    } finally {
      await session.release()
    }
  } finally {
    registration.unregister()
  }
}
