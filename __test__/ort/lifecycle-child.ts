/**
 * A child process for __test__/onnxruntime-lifetimes.spec.ts: runs registration, sessions,
 * unregistration and exit in the order its argument spells, one letter a step, then prints
 * `done` and lets the process end (or ends it the way the last step says). The parent checks
 * the exit: status 0, no signal, `done` printed.
 *
 *   R  register a Cpu arena of a host factory (useWithOnnxRuntime)
 *   S  create a session with the registration's session options
 *   P  create a plain session (ONNX Runtime's own allocator)
 *   N  run every open session once; each run's output must be the first run's, bit for bit
 *   X  release every open session
 *   U  unregister
 *   F  release the registration's allocator through the factory (its user, not the view's)
 *   G  garbage-collect (needs --expose-gc), after dropping the registration object
 *   W  a worker thread registers, runs a session and unregisters; the worker then ends
 *   V  a worker thread's registration is refused (ERR_ORT_REFUSED: this thread's is current)
 *   w  a worker thread registers and runs a session, then ends without unregistering
 *   E  process.exit(0) now
 *   Q  start a run on every open session and process.exit(0) while they are in flight
 */
import { Worker } from 'node:worker_threads'
import { AllocatorFactory, useWithOnnxRuntime, type OnnxRuntimeRegistration } from '../../ts/index'
import type * as Ort from 'onnxruntime-node'
import { createSession, runOnce } from './session'

const steps = process.argv[2] ?? ''
const factory = new AllocatorFactory({ name: `lifecycle-${process.pid}`, backend: 'host' })
let registration: OnnxRuntimeRegistration | undefined
const sessions: Ort.InferenceSession[] = []
let reference: Buffer | undefined

function check(out: Float32Array): void {
  const bytes = Buffer.from(out.buffer, out.byteOffset, out.byteLength)
  reference ??= Buffer.from(bytes)
  if (!bytes.equals(reference)) throw new Error('a run gave another output than the first')
}

function worker(refused: boolean, unregister = true): Promise<void> {
  const register = refused
    ? `
      let code
      try { useWithOnnxRuntime(f, { name: 'Cpu' }) } catch (e) { code = e.code }
      if (code !== 'ERR_ORT_REFUSED') throw new Error('the worker registered over the main thread: ' + code)
      return`
    : ''
  const source = `
    require(${JSON.stringify(require.resolve('tsx/cjs'))})
    const { AllocatorFactory, useWithOnnxRuntime } = require(${JSON.stringify(require.resolve('../../ts/index'))})
    const { createSession, runOnce } = require(${JSON.stringify(require.resolve('./session'))})
    ;(async () => {
      const f = new AllocatorFactory({ name: 'lifecycle-worker-${process.pid}', backend: 'host' })${register}
      const reg = useWithOnnxRuntime(f, { name: 'Cpu' })
      const s = await createSession(reg)
      await runOnce(s)
      if (reg.allocator.getStats().numAllocs === 0n) throw new Error('the worker session did not use the arena')
      ${unregister ? 'reg.unregister()' : ''}
    })().catch((e) => { console.error(e); process.exit(3) })`
  return new Promise((resolve, reject) => {
    const w = new Worker(source, { eval: true })
    w.on('error', reject)
    w.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`worker exited with ${code}`))))
  })
}

async function main(): Promise<void> {
  for (const step of steps) {
    switch (step) {
      case 'R':
        registration = useWithOnnxRuntime(factory, { name: 'Cpu' })
        break
      case 'S':
        if (!registration) throw new Error('S before R')
        sessions.push(await createSession(registration))
        break
      case 'P':
        sessions.push(await createSession())
        break
      case 'N':
        for (const s of sessions) check(await runOnce(s))
        break
      case 'X':
        for (const s of sessions.splice(0)) await s.release()
        break
      case 'U':
        registration?.unregister()
        break
      case 'F':
        if (registration) factory.releaseAllocator(registration.allocator)
        break
      case 'G':
        registration = undefined
        ;(globalThis as { gc?: () => void }).gc?.()
        break
      case 'W':
        await worker(false)
        break
      case 'V':
        await worker(true)
        break
      case 'w':
        await worker(false, false)
        break
      case 'E':
        console.log('done')
        process.exit(0)
        break
      case 'Q':
        for (const s of sessions) void runOnce(s)
        console.log('done')
        process.exit(0)
        break
      default:
        throw new Error(`unknown step ${step}`)
    }
  }
  console.log('done')
}

main().catch((e) => {
  console.error(e)
  process.exit(2)
})
