/**
 * The op table: every public method of AllocatorFactory, OrtAllocator (and its `withStream`
 * views), Stream, StreamEvent and the exported functions. Each op is generated as data from
 * the model's state (gen.ts; so a run can be saved, replayed and minimized) and executed against
 * the API (exec-*.ts): the model predicts which codes may be thrown and whether success is
 * allowed, checks the result, and is updated with what happened.
 */
import { resolve, type Op, type Result, Skip } from './call'
import {
  allocLike,
  execAccess,
  execFree,
  execQuery,
  execReset,
  execShrink,
  execSizeQuery,
  execWithStream,
} from './exec-allocator'
import {
  execCollect,
  execConfigFn,
  execDrop,
  execFactory,
  execMisc,
  execMixedTrace,
  execNamespace,
  execNewFactory,
  execPairNs,
  execReplay,
  execStream,
  execWrongThis,
} from './exec-api'
import type { World } from './world'

export type { Op, Result } from './call'
export { generate } from './gen'
export { streamRuleSeen } from './exec-allocator'


type Exec = (w: World, op: Op, r: Result) => void | Promise<void>

export const EXEC: Record<string, Exec> = {
  'factory.new': execNewFactory,
  'factory.get': execFactory,
  'factory.createAllocator': execFactory,
  'factory.createSharedAllocator': execFactory,
  'factory.releaseAllocator': execFactory,
  'factory.deviceStats': execFactory,
  'factory.createStream': execFactory,
  alloc: (w, op, r) => allocLike(w, op, r, 'alloc'),
  reserve: (w, op, r) => allocLike(w, op, r, 'reserve'),
  allocOnStream: (w, op, r) => allocLike(w, op, r, 'allocOnStream'),
  free: execFree,
  allocatedSize: (w, op, r) => execSizeQuery(w, op, r, 'allocatedSize'),
  requestedSize: (w, op, r) => execSizeQuery(w, op, r, 'requestedSize'),
  write: (w, op, r) => execAccess(w, op, r, 'write'),
  read: (w, op, r) => execAccess(w, op, r, 'read'),
  fill: (w, op, r) => execAccess(w, op, r, 'fill'),
  query: execQuery,
  shrink: execShrink,
  resetChunksUsingStream: execReset,
  withStream: execWithStream,
  'stream.record': execStream,
  'stream.wait': execStream,
  'stream.synchronize': execStream,
  'stream.release': execStream,
  'stream.props': execStream,
  'stream.syncId': execStream,
  'fn.config': execConfigFn,
  'fn.namespace': execNamespace,
  'fn.misc': execMisc,
  'fn.mixedTrace': execMixedTrace,
  'fn.replayTrace': execReplay,
  'fn.nativePairNs': execPairNs,
  wrongThis: execWrongThis,
  'gc.drop': execDrop,
  'gc.collect': execCollect,
}

/** Runs `op`; `skip` when an object it names is gone (a minimized or collected sequence). */
export async function execute(w: World, op: Op): Promise<Result> {
  const r: Result = { outcome: 'skip', touched: new Set(), oom: null }
  const fn = EXEC[op.op]
  if (!fn) throw new Error(`unknown op ${op.op}`)
  try {
    w.pollution = op.p?.map(([k, v]) => [k, resolve(w, v)] as [string, unknown]) ?? null
    await fn(w, op, r)
  } catch (e) {
    if (e instanceof Skip) return { outcome: 'skip', touched: r.touched, oom: null }
    throw e
  } finally {
    w.pollution = null
  }
  return r
}
