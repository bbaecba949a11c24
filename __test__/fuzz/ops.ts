/**
 * The op table: every public method of AllocatorFactory, OrtAllocator (and its `withStream`
 * views), Stream, StreamEvent and the exported functions. Each op is generated as data from
 * the model's state (so a run can be saved, replayed and minimized) and executed against the
 * API: the model predicts which codes may be thrown and whether success is allowed, checks the
 * result, and is updated with what happened.
 */
import { isDeepStrictEqual } from 'node:util'
import type { OrtAllocator, Stream } from '../../ts/index'
import { expectConfig, expectParsed, RAW_RANGES, TYPED } from './config-oracle'
import {
  type AllocRec,
  allocOutlook,
  ArenaM,
  ceil256,
  DEFAULT_TOTAL,
  type DeviceM,
  EventM,
  FactoryM,
  FactoryRef,
  HandleM,
  type Kind,
  type Live,
  MAX_U64,
  type MemName,
  StreamM,
  ViewM,
  WINDOW,
} from './model'
import type { Prng } from './prng'
import {
  big,
  classifyPtr,
  classifySize,
  EDGE_BIGINTS,
  EDGE_NUMBERS,
  makeBuf,
  makeWeird,
  NULL,
  num,
  patternBytes,
  showV,
  str,
  UNDEF,
  type BufKind,
  type V,
  viewBytes,
  WEIRD_NAMES,
  WIDE_OFFSETS,
} from './values'
import { fail, forgetStream, windows, type World } from './world'

/** One operation, as data. */
export interface Op {
  op: string
  /** Which copy of the package runs it (functions and new factories). */
  c?: number
  /** The object it is called on. */
  t?: string
  args: V[]
  /** The id its result gets (an object or an allocation). */
  out?: string
  /** Keys set on `Object.prototype` while the call runs (own properties only may count). */
  p?: [string, V][]
}

/** What an operation did, for the checks that follow it. */
export interface Result {
  /** `ok`, `skip` (an object it names is gone), or the error code thrown. */
  outcome: string
  /** Allocators whose stats it may have changed. */
  touched: Set<ArenaM>
  /** The allocator an out-of-memory failure happened on. */
  oom: ArenaM | null
}

const IA = 'ERR_ARENA_INVALID_ARGUMENT'
const IC = 'ERR_ARENA_INVALID_CONFIG'
const OOM = 'ERR_ARENA_OUT_OF_MEMORY'
const UP = 'ERR_ARENA_UNKNOWN_POINTER'
const REL = 'ERR_ARENA_RELEASED'
const NO_CUDA = 'ERR_NO_CUDA'

class Skip extends Error {}
const skip = (): never => {
  throw new Skip()
}

// ---------------------------------------------------------------- values

function resolve(w: World, v: V): unknown {
  if ('n' in v) return Number(v.n)
  if ('b' in v) return BigInt(v.b)
  if ('s' in v) return v.s
  if ('u' in v) return undefined
  if ('z' in v) return null
  if ('bool' in v) return v.bool
  if ('w' in v) return makeWeird(v.w)
  if ('ptr' in v) {
    const a = w.allocs.get(v.ptr) ?? skip()
    return a.addr + BigInt(v.off)
  }
  if ('ref' in v) {
    const m = refModel(w, v.ref) ?? skip()
    return m.obj ?? skip()
  }
  if ('arr' in v) return v.arr.map((x) => resolve(w, x))
  if ('o' in v) {
    const out: Record<string, unknown> = {}
    for (const [k, x] of Object.entries(v.o)) Object.defineProperty(out, k, { value: resolve(w, x), enumerable: true, writable: true, configurable: true })
    return out
  }
  return makeBuf(v.buf, v.len, v.seed)
}

type AnyModel = FactoryRef | HandleM | ViewM | StreamM | EventM

function refModel(w: World, id: string): AnyModel | undefined {
  return w.factories.get(id) ?? w.handles.get(id) ?? w.views.get(id) ?? w.streams.get(id) ?? w.events.get(id)
}

/** The model behind a value argument that is a reference (else `undefined`). */
function modelOf(w: World, v: V): AnyModel | undefined {
  return 'ref' in v ? refModel(w, v.ref) : undefined
}

// ---------------------------------------------------------------- calls

/** `e` as text, whatever it is (a thrown proxy's traps may throw). */
function errText(e: unknown): string {
  try {
    if (e instanceof Error) return `${e.name} ${String((e as { code?: unknown }).code)} ${e.message}`
  } catch {
    return 'a value whose traps throw'
  }
  return typeof e === 'string' ? JSON.stringify(e) : typeof e
}

/** The `code` of a thrown value that is an `Error`, without trusting it. */
function codeOf(e: unknown): string | undefined {
  try {
    if (!(e instanceof Error)) return undefined
    const code = (e as { code?: unknown }).code
    return typeof code === 'string' ? code : undefined
  } catch {
    return undefined
  }
}

/** Calls `fn`; a thrown error must be coded and one of `codes`, a return must be allowed. */
function call<T>(w: World, what: string, codes: readonly string[], ok: boolean, fn: () => T): { ok: true; value: T } | { ok: false; code: string } {
  w.apiCalls += 1
  let value: T
  try {
    value = polluted(w, fn)
  } catch (e) {
    if (e instanceof Skip) throw e
    const code = codeOf(e)
    const known = (w.copies[0].ERROR_CODES as readonly string[]).includes(code as string)
    if (!known) fail('coded-error', `${what} threw an error without a known code: ${errText(e)}`)
    if (!codes.includes(code as string)) {
      fail('expected-code', `${what} threw ${code as string} (${(e as Error).message}); expected ${[ok ? 'success' : '', ...codes].filter(Boolean).join(' or ')}`)
    }
    if ((e as Error).message.length > 1000) fail('short-message', `${what}: a message of ${(e as Error).message.length} characters`)
    return { ok: false, code: code as string }
  }
  if (!ok) fail('expected-error', `${what} succeeded; expected ${codes.join(' or ')}`)
  return { ok: true, value }
}

const uniq = (codes: string[]): string[] => [...new Set(codes)]

/** Runs `fn` with the current op's keys set on `Object.prototype`, and takes them off after. */
function polluted<T>(w: World, fn: () => T): T {
  const keys = w.pollution
  if (!keys || keys.length === 0) return fn()
  const proto = Object.prototype as Record<string, unknown>
  for (const [k, v] of keys) Object.defineProperty(proto, k, { value: v, configurable: true, writable: true, enumerable: true })
  try {
    return fn()
  } finally {
    for (const [k] of keys) delete proto[k]
  }
}

/** The own enumerable properties of `x` in an object with no prototype (reads nothing inherited). */
function ownRecord(x: object): Record<string, unknown> {
  return Object.assign(Object.create(null) as Record<string, unknown>, Object.fromEntries(Object.entries(x)))
}

// ---------------------------------------------------------------- targets

interface Target {
  h: HandleM
  view: ViewM | null
  obj: OrtAllocator
  id: string
}

function allocTarget(w: World, t: string | undefined): Target {
  const m = t === undefined ? undefined : refModel(w, t)
  if (m instanceof HandleM) return { h: m, view: null, obj: m.obj ?? skip(), id: m.id }
  if (m instanceof ViewM) return { h: m.handle, view: m, obj: m.obj ?? skip(), id: m.id }
  return skip()
}

/** Whether `v` is a live stream of copy `copy`, and how it fits an allocator of `a`. */
function streamClass(w: World, v: V, copy: number, a: ArenaM | null): 'fit' | 'misfit' | 'released' | 'invalid' {
  const m = modelOf(w, v)
  if (!(m instanceof StreamM) || m.copy !== copy) return 'invalid'
  if (m.released) return 'released'
  if (a && (m.backend !== a.factory.backend || m.device !== (a.memName === 'Cpu' ? 0 : a.device))) return 'misfit'
  return 'fit'
}

/** Before a call that may fail on `a`: its memory log as it is, to compare after. */
function logBefore(w: World, a: ArenaM, released: boolean): void {
  if (released || a.shared || a.log || w.pendingStreams.length > 0) return
  const r = w.reader(a)
  if (!r) return
  w.apiCalls += 1
  a.log = r.memoryLog()
}

function afterFailure(w: World, a: ArenaM, released: boolean, code: string, r: Result): void {
  if (code === OOM && !released) r.oom = a
  if (!released && a.log && w.pendingStreams.length === 0) w.checkLogUnchanged(a, a.log, code === OOM)
  if (code === OOM) a.log = null
}

function touch(a: ArenaM, r: Result): void {
  r.touched.add(a)
  a.log = null
}

/** The live allocation of `a` whose requested range holds `[addr, addr+len)`: 'yes', 'no' or 'either'. */
function rangeInside(a: ArenaM, addr: bigint, len: bigint): { v: 'yes' | 'no' | 'either'; live?: Live } {
  // (`v` is changed by the caller for shared allocators.)
  let edge = false
  for (const l of a.live.values()) {
    if (addr >= l.addr && addr + len <= l.addr + l.req) {
      // A zero-length range at the very end of a chunk belongs to the next chunk in an arena.
      if (len === 0n && addr === l.addr + l.req && a.isArena && !l.reserve) {
        edge = true
        continue
      }
      return { v: 'yes', live: l }
    }
  }
  return { v: edge ? 'either' : 'no' }
}

// ---------------------------------------------------------------- allocations

function recordAlloc(w: World, a: ArenaM, obj: OrtAllocator, id: string, p: unknown, req: bigint, reserve: boolean, r: Result): void {
  touch(a, r)
  if (typeof p !== 'bigint' || p <= 0n) fail('alloc-result', `${id}: an allocation of ${req} returned ${String(p)}`)
  if (p % 256n !== 0n) fail('aligned', `${id}: ${p} is not 256-byte aligned`)
  for (const b of w.reachable()) {
    const l = b.live.get(p)
    if (l) fail('fresh-address', `${id}: ${a.id} returned ${p}, which is live as ${l.id} in ${b.id}`)
  }
  w.apiCalls += 2
  const size = obj.allocatedSize(p)
  const requested = obj.requestedSize(p)
  const asReserve = reserve && a.kind !== 'pool'
  if (requested !== req) fail('requested-size', `${id}: requestedSize ${requested}, asked ${req}`)
  const exactSize = asReserve || !a.isArena
  if (exactSize ? size !== req : size < ceil256(req) || size % 256n !== 0n) fail('allocated-size', `${id} (${a.kind}${asReserve ? ' reserve' : ''}): allocatedSize ${size} for ${req}`)
  const live: Live = { id, addr: p, req, size, reserve: asReserve, stream: 0n, bytes: a.factory.backend === 'host' ? new Map() : null }
  for (const b of w.reachable()) {
    for (const l of b.live.values()) {
      if (p < l.addr + l.size && l.addr < p + size) fail('no-overlap', `${id} [${p}, +${size}) in ${a.id} overlaps ${l.id} [${l.addr}, +${l.size}) in ${b.id}`)
    }
  }
  a.live.set(p, live)
  w.allocs.set(id, { addr: p, arena: a, req })
  w.recentAllocs.push(id)
  if (w.recentAllocs.length > 128) w.recentAllocs.shift()
  a.numAllocs += 1n
  if (asReserve) a.numReserves += 1n
  if (live.bytes) {
    // A pattern of its own at each end: a free of live memory through a wrong path, or an
    // overlapping allocation, shows when it is read back.
    const seed = Number(id.slice(1)) || 1
    for (const [s, e] of windows(Number(req))) {
      const data = patternBytes(e - s, seed + s)
      w.apiCalls += 1
      obj.write(p + BigInt(s), data)
      data.forEach((b, i) => live.bytes!.set(s + i, b))
    }
  }
}

/** The codes a size argument adds, and its value when it is one. */
function sizeCodes(x: unknown): { codes: string[]; v: bigint | null } {
  const c = classifySize(x)
  if (c.kind === 'invalid') return { codes: [IA], v: null }
  if (c.kind === 'tooLarge') return { codes: [OOM], v: null }
  return { codes: [], v: c.v }
}

function allocLike(w: World, op: Op, r: Result, kind: 'alloc' | 'reserve' | 'allocOnStream'): void {
  const t = allocTarget(w, op.t)
  const a = t.h.arena
  const rel = t.h.released
  const size = resolve(w, op.args[0])
  // A view's alloc is allocOnStream on its stream.
  const streamV = kind === 'allocOnStream' ? op.args[1] : kind === 'alloc' && t.view ? ({ ref: t.view.stream.id } as V) : null
  if (kind === 'allocOnStream' && !a.streamAware) {
    if (t.obj.allocOnStream !== undefined) fail('method-presence', `${t.id} (${a.kind}) has allocOnStream`)
    return
  }
  const stream = streamV ? resolve(w, streamV) : undefined
  const s = sizeCodes(size)
  const codes = [...s.codes]
  if (streamV) {
    const sc = streamClass(w, streamV, t.h.copy, a)
    if (sc === 'invalid') codes.push(IA)
    if (sc === 'released') codes.push(REL)
    if (sc === 'misfit') codes.push(IA)
  }
  if (rel) codes.push(REL)
  let ok = codes.length === 0
  let outlook: 'ok' | 'fail' | 'either' = 'ok'
  if (ok && s.v! > 0n) {
    outlook = allocOutlook(a, s.v!, kind === 'reserve', a.shared ? null : w.outstanding(a.factory, a.ledger))
    if (outlook !== 'ok') codes.push(OOM)
    ok = outlook !== 'fail'
  }
  logBefore(w, a, rel)
  // The chunk an allocation takes must be one its stream may take: remember the tags.
  const tags = ok && s.v! > 0n && kind !== 'reserve' && a.kind === 'arena' && a.streamTagged && !a.shared && w.pendingStreams.length === 0 ? tagLog(w, a) : null
  const what = `${t.id}.${kind}(${op.args.map(showV).join(', ')})`
  const res = call(w, what, uniq(codes), ok, () => {
    if (kind === 'alloc') return t.obj.alloc(size as never)
    if (kind === 'reserve') return t.obj.reserve(size as never)
    return t.obj.allocOnStream!(size as never, stream as Stream)
  })
  if (!res.ok) {
    r.outcome = res.code
    afterFailure(w, a, rel, res.code, r)
    return
  }
  r.outcome = 'ok'
  if (s.v === 0n) {
    if (res.value !== null) fail('alloc-zero', `${what} returned ${String(res.value)}, not null`)
    return
  }
  recordAlloc(w, a, t.obj, op.out!, res.value, s.v!, kind === 'reserve', r)
  const consumer = streamV ? (modelOf(w, streamV) as StreamM) : null
  if (consumer && a.kind === 'arena') a.streamTagged = true
  if (tags) checkStreamRule(w, a, tags, res.value as bigint, consumer, what)
  if (a.kind === 'pool') checkPoolRule(w, a, t.obj, res.value as bigint, consumer, what)
}

/**
 * The memory pool's rule (pool.rs): a freed block is reused by the stream it was used on, or
 * by anyone once it has no stream. A block that came from the cache leaves `totalAllocated`
 * as it was.
 */
function checkPoolRule(w: World, a: ArenaM, obj: OrtAllocator, p: bigint, consumer: StreamM | null, what: string): void {
  const mine = consumer?.nativeId ?? 0n
  const live = a.live.get(p)!
  live.stream = mine
  const tag = a.cached.get(p)
  a.cached.delete(p)
  if (tag === undefined || a.shared || !a.last) return
  if (tag === 0n || tag === mine) {
    streamRuleSeen.poolReuse += 1
    return
  }
  w.apiCalls += 1
  if (obj.getStats().totalAllocated !== a.last.totalAllocated) {
    streamRuleSeen.poolRefused += 1
    return
  }
  const owner = [...w.streams.values()].find((x) => x.nativeId === tag)
  fail('stream-reuse', `${what} reused the pool's block at ${p}, freed on stream ${owner?.id ?? tag}, ${consumer ? `for stream ${consumer.id}` : 'without a stream'}`)
}

/** How often a tagged chunk was taken, by which part of the rule (to see the check is exercised). */
export const streamRuleSeen = { ownStream: 0, afterWait: 0, poolReuse: 0, poolRefused: 0 }

/** The memory log of `a` as it is now (read again if the cached one is stale). */
function tagLog(w: World, a: ArenaM): import('../../ts/index').MemoryLog | null {
  if (a.log) return a.log
  const r = w.reader(a)
  if (!r) return null
  w.apiCalls += 1
  a.log = r.memoryLog()
  return a.log
}

/**
 * DESIGN "Streams": a free chunk last used by stream S at sync id k may be taken by stream T
 * only when S is T, or the chunk has no stream, or T has waited (through events, chains of
 * them included) on an event S recorded after k; an allocation without a stream takes only
 * chunks without one.
 */
function checkStreamRule(w: World, a: ArenaM, before: import('../../ts/index').MemoryLog, p: bigint, consumer: StreamM | null, what: string): void {
  const region = before.regions.find((g) => g.base <= p && p < g.base + g.size)
  const chunk = region?.chunks.find((c) => !c.inUse && c.addr <= p && p < c.addr + c.size)
  if (!region || !chunk || chunk.stream === undefined || chunk.stream === 0n) return
  // Out of memory, the arena may have released wholly free regions (tagged chunks too) and
  // grown a new one at the same addresses: then the chunk taken is a new one.
  const r = w.reader(a)!
  w.apiCalls += 1
  if (r.getStats().numArenaShrinkages !== before.stats.numArenaShrinkages) {
    w.apiCalls += 1
    const now = r.memoryLog().regions.find((g) => g.base <= p && p < g.base + g.size)
    if (now?.id !== region.id) return
  }
  const owner = [...w.streams.values()].find((x) => x.nativeId === chunk.stream)
  // A stream released (or collected) since: its chunks are anyone's.
  if (!owner || owner.released || !owner.obj) return
  if (consumer && consumer.nativeId === chunk.stream) {
    streamRuleSeen.ownStream += 1
    return
  }
  const known = consumer?.knows.get(chunk.stream) ?? 0n
  if (consumer && chunk.syncId < known) {
    streamRuleSeen.afterWait += 1
    return
  }
  fail('stream-reuse', `${what} took the free chunk at ${chunk.addr}, last used by stream ${owner.id} at sync id ${chunk.syncId}; ${consumer ? `${consumer.id} has waited on its sync id ${known} only` : 'an allocation without a stream takes only chunks without one'}`)
}

// ---------------------------------------------------------------- pointer ops

function ptrCodes(x: unknown): { codes: string[]; addr: bigint | null; isNull: boolean } {
  const c = classifyPtr(x)
  if (c.kind === 'invalid') return { codes: [IA], addr: null, isNull: false }
  // A bigint that is no 64-bit address is no address of this allocator (either code reads right).
  if (c.kind === 'wide') return { codes: [UP, IA], addr: null, isNull: false }
  if (c.kind === 'null') return { codes: [], addr: 0n, isNull: true }
  return { codes: [], addr: c.v, isNull: false }
}

function execFree(w: World, op: Op, r: Result): void {
  const t = allocTarget(w, op.t)
  const a = t.h.arena
  const rel = t.h.released
  const p = resolve(w, op.args[0])
  const pc = ptrCodes(p)
  const codes = [...pc.codes]
  if (rel) codes.push(REL)
  let live: Live | undefined
  let ok = codes.length === 0
  if (ok && pc.addr !== 0n) {
    live = a.live.get(pc.addr!)
    if (!live) {
      codes.push(UP)
      ok = false
    }
  }
  if (live && !rel) w.checkBytes(a, live, t.obj, 'before free')
  logBefore(w, a, rel)
  const res = call(w, `${t.id}.free(${showV(op.args[0])})`, uniq(codes), ok, () => t.obj.free(p as bigint))
  if (!res.ok) {
    r.outcome = res.code
    afterFailure(w, a, rel, res.code, r)
    return
  }
  r.outcome = 'ok'
  if (live) {
    a.live.delete(live.addr)
    if (a.kind === 'pool') a.cached.set(live.addr, live.stream)
    touch(a, r)
  }
}

function execSizeQuery(w: World, op: Op, r: Result, which: 'allocatedSize' | 'requestedSize'): void {
  const t = allocTarget(w, op.t)
  const a = t.h.arena
  const rel = t.h.released
  const p = resolve(w, op.args[0])
  const pc = ptrCodes(p)
  // null is no bigint here: only free takes it.
  const codes = pc.isNull ? [IA] : [...pc.codes]
  if (rel) codes.push(REL)
  const live = codes.length === 0 ? a.live.get(pc.addr!) : undefined
  if (codes.length === 0 && !live) codes.push(UP)
  const res = call(w, `${t.id}.${which}(${showV(op.args[0])})`, uniq(codes), live !== undefined, () => t.obj[which](p as bigint))
  r.outcome = res.ok ? 'ok' : res.code
  if (res.ok) {
    const want = which === 'allocatedSize' ? live!.size : live!.req
    if (res.value !== want) fail('sizes-stable', `${t.id}.${which}(${live!.id}) is ${res.value}, was ${want}`)
  }
}

/** write / read / fill: the stream argument, the range, and the host's bytes. */
function execAccess(w: World, op: Op, r: Result, which: 'write' | 'read' | 'fill'): void {
  const t = allocTarget(w, op.t)
  const a = t.h.arena
  const rel = t.h.released
  const p = resolve(w, op.args[0])
  const streamV = op.args[which === 'fill' ? 3 : 2]
  const stream = resolve(w, streamV)
  const codes: string[] = []
  if (stream !== undefined) {
    const sc = streamClass(w, streamV, t.h.copy, null)
    if (sc === 'invalid') codes.push(IA)
    if (sc === 'released') codes.push(REL)
  }
  const pc = ptrCodes(p)
  codes.push(...(pc.isNull ? [IA] : pc.codes))
  let len: bigint | null = null
  let data: unknown
  let byte: unknown
  if (which === 'fill') {
    byte = resolve(w, op.args[1])
    if (typeof byte !== 'number' || !Number.isInteger(byte) || byte < 0 || byte > 255) codes.push(IA)
    const length = resolve(w, op.args[2])
    data = length
    const c = classifySize(length)
    // README: outside one live allocation is ERR_ARENA_UNKNOWN_POINTER, and no length past
    // 2^64 fits inside one.
    if (c.kind === 'invalid') codes.push(IA)
    else if (c.kind === 'tooLarge') codes.push(UP, ...(a.factory.backend === 'virtual' ? [IA] : []))
    else len = c.v
  } else {
    data = resolve(w, op.args[1])
    const kind = 'buf' in op.args[1] ? op.args[1].buf : null
    if (!ArrayBuffer.isView(data) || kind === 'detached') codes.push(IA)
    else if (which === 'read' && kind === 'sab') codes.push(IA)
    else len = BigInt((data as ArrayBufferView).byteLength)
  }
  if (rel) codes.push(REL)
  let ok = codes.length === 0
  let live: Live | undefined
  if (ok) {
    const inside = rangeInside(a, pc.addr!, len!)
    live = inside.live
    const virtual = a.factory.backend === 'virtual'
    if (inside.v === 'no' && a.shared) {
      // Another thread's allocation may hold the range: reading it is allowed to work, and
      // writing it would break that thread's memory, so this thread never does.
      if (which !== 'read') return skip()
      codes.push(UP, ...(virtual ? [IA] : []))
      inside.v = 'either'
    }
    if (inside.v === 'no') {
      codes.push(UP, ...(virtual ? [IA] : []))
      ok = false
    } else if (virtual) {
      codes.push(IA, ...(inside.v === 'either' ? [UP] : []))
      ok = false
    } else if (inside.v === 'either') {
      codes.push(UP)
    }
  }
  logBefore(w, a, rel)
  const what = `${t.id}.${which}(${op.args.map(showV).join(', ')})`
  const res = call(w, what, uniq(codes), ok, () => {
    const s = stream as Stream | undefined
    if (which === 'write') return t.obj.write(p as bigint, data as ArrayBufferView, s)
    if (which === 'read') return t.obj.read(p as bigint, data as ArrayBufferView, s)
    return t.obj.fill(p as bigint, byte as number, data as bigint, s)
  })
  if (!res.ok) {
    r.outcome = res.code
    afterFailure(w, a, rel, res.code, r)
    return
  }
  r.outcome = 'ok'
  if (!live || !live.bytes) return
  const off = Number(pc.addr! - live.addr)
  const n = Number(len!)
  if (which === 'read') {
    const got = viewBytes(data)
    for (let i = 0; i < n; i++) {
      const want = live.bytes.get(off + i)
      if (want !== undefined && got[i] !== want) fail('read-back', `${live.id} byte ${off + i} reads ${got[i]}, was written ${want}`)
    }
    return
  }
  const src = which === 'write' ? viewBytes(data) : null
  for (const [s, e] of windows(Number(live.req))) {
    for (let i = Math.max(s, off); i < Math.min(e, off + n); i++) live.bytes.set(i, src ? src[i - off] : (byte as number))
  }
}

// ---------------------------------------------------------------- other allocator ops

function execQuery(w: World, op: Op, r: Result): void {
  const t = allocTarget(w, op.t)
  const a = t.h.arena
  const rel = t.h.released
  const which = (op.args[0] as { s: string }).s
  if (which === 'version') {
    if (t.obj.version !== 25) fail('version', `${t.id}.version is ${t.obj.version}`)
    r.outcome = 'ok'
    return
  }
  const res = call(w, `${t.id}.${which}()`, rel ? [REL] : [], !rel, () => (t.obj as unknown as Record<string, () => unknown>)[which]())
  r.outcome = res.ok ? 'ok' : res.code
  if (!res.ok) return
  if (which === 'info' && !isDeepStrictEqual(res.value, { name: a.memName, deviceId: a.memName === 'Cpu' ? 0 : a.device, type: a.type })) {
    fail('info', `${t.id}.info() is ${JSON.stringify(res.value)}`)
  }
}

function execShrink(w: World, op: Op, r: Result): void {
  const t = allocTarget(w, op.t)
  const a = t.h.arena
  if ((t.obj.shrink !== undefined) !== a.canShrink) fail('method-presence', `${t.id} (${a.kind}) shrink present: ${t.obj.shrink !== undefined}`)
  if (!a.canShrink) return
  const rel = t.h.released
  const res = call(w, `${t.id}.shrink()`, rel ? [REL] : [], !rel, () => t.obj.shrink!())
  r.outcome = res.ok ? 'ok' : res.code
  if (res.ok) touch(a, r)
}

function execReset(w: World, op: Op, r: Result): void {
  const t = allocTarget(w, op.t)
  const a = t.h.arena
  if ((t.obj.resetChunksUsingStream !== undefined) !== a.streamAware) fail('method-presence', `${t.id} (${a.kind}) resetChunksUsingStream present: ${t.obj.resetChunksUsingStream !== undefined}`)
  if (!a.streamAware) return
  const rel = t.h.released
  const stream = resolve(w, op.args[0])
  const sc = streamClass(w, op.args[0], t.h.copy, a)
  const codes = [...(rel ? [REL] : []), ...(sc === 'invalid' || sc === 'misfit' ? [IA] : []), ...(sc === 'released' ? [REL] : [])]
  logBefore(w, a, rel)
  const res = call(w, `${t.id}.resetChunksUsingStream(${showRef(op.args[0])})`, uniq(codes), codes.length === 0, () => t.obj.resetChunksUsingStream!(stream as Stream))
  r.outcome = res.ok ? 'ok' : res.code
  if (!res.ok) {
    afterFailure(w, a, rel, res.code, r)
    return
  }
  a.log = null
  const m = modelOf(w, op.args[0]) as StreamM
  forgetStream(a, m.nativeId)
  if (a.kind !== 'pool' && !a.shared) {
    w.apiCalls += 1
    const log = t.obj.memoryLog()
    for (const g of log.regions) for (const c of g.chunks) if (c.stream === m.nativeId) fail('stream-reset', `${a.id} chunk ${c.addr} still tagged with stream ${m.id} after resetChunksUsingStream`)
  }
}

function execWithStream(w: World, op: Op, r: Result): void {
  const t = allocTarget(w, op.t)
  const a = t.h.arena
  const rel = t.h.released
  const stream = resolve(w, op.args[0])
  const sc = streamClass(w, op.args[0], t.h.copy, null)
  const codes = [...(rel ? [REL] : []), ...(sc === 'invalid' ? [IA] : []), ...(sc === 'released' ? [REL] : []), ...(!a.streamAware ? [IA] : [])]
  const res = call(w, `${t.id}.withStream(${showRef(op.args[0])})`, uniq(codes), codes.length === 0, () => t.obj.withStream(stream as Stream))
  r.outcome = res.ok ? 'ok' : res.code
  if (!res.ok) return
  const view = res.value
  if (view.version !== 25 || typeof view.alloc !== 'function') fail('view', `${t.id}.withStream() gave no allocator`)
  w.views.set(op.out!, new ViewM(op.out!, t.h, modelOf(w, op.args[0]) as StreamM, view))
}

function showRef(v: V): string {
  return showV(v)
}

// ---------------------------------------------------------------- streams

function execStream(w: World, op: Op, r: Result): void {
  const m = refModel(w, op.t!)
  const which = op.op.slice('stream.'.length)
  if (which === 'syncId') {
    if (!(m instanceof EventM) || !m.obj) return skip()
    r.outcome = 'ok'
    return
  }
  if (!(m instanceof StreamM) || !m.obj) return skip()
  const s = m.obj
  const rel = m.released
  if (which === 'props') {
    // A released stream's deviceId: the docs do not say whether reading it is a use.
    const dev = call(w, `${m.id}.deviceId`, rel ? [REL] : [], true, () => s.deviceId)
    if (dev.ok && dev.value !== m.device) fail('stream-props', `${m.id}.deviceId is ${dev.value}, made on ${m.device}`)
    const res = call(w, `${m.id}.id`, rel ? [REL] : [], !rel, () => s.id)
    r.outcome = res.ok ? 'ok' : res.code
    if (res.ok && res.value !== m.nativeId) fail('stream-props', `${m.id}.id changed from ${m.nativeId} to ${res.value}`)
    return
  }
  if (which === 'record') {
    const res = call(w, `${m.id}.record()`, rel ? [REL] : [], !rel, () => s.record())
    r.outcome = res.ok ? 'ok' : res.code
    if (!res.ok) return
    const sync = res.value.syncId
    m.sync += 1n
    if (sync !== m.sync) fail('sync-ids', `${m.id}.record() gave sync id ${String(sync)}; it is event ${m.sync} of the stream`)
    m.lastSync = sync
    const carries = new Map(m.knows)
    carries.set(m.nativeId, m.sync)
    w.events.set(op.out!, new EventM(op.out!, m, m.copy, res.value, carries))
    return
  }
  if (which === 'wait') {
    const ev = resolve(w, op.args[0])
    const em = modelOf(w, op.args[0])
    const valid = em instanceof EventM && em.copy === m.copy
    const codes = [...(rel ? [REL] : []), ...(valid ? [] : [IA])]
    const res = call(w, `${m.id}.wait(${showRef(op.args[0])})`, codes, codes.length === 0, () => s.wait(ev as never))
    r.outcome = res.ok ? 'ok' : res.code
    if (res.ok) {
      for (const [id, sync] of (em as EventM).carries) if (id !== m.nativeId && sync > (m.knows.get(id) ?? 0n)) m.knows.set(id, sync)
    }
    return
  }
  if (which === 'synchronize') {
    const res = call(w, `${m.id}.synchronize()`, rel ? [REL] : [], !rel, () => s.synchronize())
    r.outcome = res.ok ? 'ok' : res.code
    return
  }
  // release
  const res = call(w, `${m.id}.release()`, rel ? [REL] : [], !rel, () => s.release())
  r.outcome = res.ok ? 'ok' : res.code
  if (res.ok) w.releaseStream(m)
}

// ---------------------------------------------------------------- factories

/** The spec text a factory's devices make (what decides whether a name is taken). */
function specOf(backend: string, devices: DeviceM[]): string {
  return `${backend}:${devices.map((d) => `${d.total}/${d.maxAlloc}`).join(',')}`
}

function execNewFactory(w: World, op: Op, r: Result): void {
  const copy = op.c ?? 0
  const idx = w.copies[copy] ?? skip()
  const options = resolve(w, op.args[0])
  const loggerKind = (op.args[1] as { s: string }).s
  const warnings: string[] = []
  const logger = (level: string, message: string): void => {
    if (loggerKind === 'throw') throw new Error('fuzz: logger throws')
    if (level === 'warning') warnings.push(message)
  }
  // Give the options a logger unless they are not an object or name one already.
  let given = options
  try {
    if (loggerKind !== 'none' && options !== null && typeof options === 'object' && !Array.isArray(options) && !Object.prototype.hasOwnProperty.call(options, 'logger')) {
      given = { ...(options as object), logger }
    }
  } catch {
    // A proxy whose traps throw goes to the API as it is.
  }
  const e = expectFactory(w, given)
  const res = call(w, `new AllocatorFactory(${showV(op.args[0])})`, e.codes, e.ok, () => new idx.AllocatorFactory(given as never))
  r.outcome = res.ok ? 'ok' : res.code
  if (!res.ok) return
  const { name, backend, devices } = e.spec!
  let fm = w.factoryModels.get(name)
  if (!fm) {
    const sh = w.shared && w.shared.name === name ? w.shared : null
    const forbidden = sh ? devices.map((_, i) => i).filter((i) => !sh.sharedDevices.includes(i) && !sh.ownDevices.includes(i)) : []
    fm = new FactoryM(name, backend as 'host' | 'virtual', devices, specOf(backend, devices), new Set(sh?.sharedDevices ?? []), new Set(forbidden))
    w.factoryModels.set(name, fm)
  }
  w.factories.set(op.out!, new FactoryRef(op.out!, fm, copy, res.value, warnings, loggerKind === 'throw'))
}

/** What `new AllocatorFactory(options)` must do. */
function expectFactory(w: World, options: unknown): { codes: string[]; ok: boolean; spec?: { name: string; backend: string; devices: DeviceM[] } } {
  const bad = { codes: [IA], ok: false }
  let o: Record<string, unknown>
  try {
    if (options === undefined) o = {}
    else if (typeof options !== 'object' || options === null || Array.isArray(options)) return bad
    else o = ownRecord(options)
  } catch {
    return bad
  }
  if (Object.keys(o).some((k) => !['name', 'backend', 'devices', 'logger'].includes(k))) return bad
  const name = o.name ?? 'default'
  const backend = o.backend ?? 'cuda'
  const devices = o.devices ?? 1
  const logger = o.logger
  if (typeof name !== 'string' || name === '') return bad
  if (typeof backend !== 'string' || !['cuda', 'host', 'virtual'].includes(backend)) return bad
  if (logger !== undefined && typeof logger !== 'function') return bad
  let list: DeviceM[]
  if (typeof devices === 'number') {
    if (!Number.isSafeInteger(devices) || devices < 1 || devices > 64) return bad
    list = Array.from({ length: devices }, () => ({ total: backend === 'host' ? DEFAULT_TOTAL.host : DEFAULT_TOTAL.virtual, maxAlloc: MAX_U64 }))
  } else {
    let arr: unknown[]
    try {
      if (!Array.isArray(devices)) return bad
      arr = Array.from(devices as unknown[])
    } catch {
      return bad
    }
    if (arr.length === 0 || arr.length > 64) return bad
    list = []
    for (const d of arr) {
      let entries: [string, unknown][]
      try {
        if (typeof d !== 'object' || d === null || Array.isArray(d)) return bad
        entries = Object.entries(d)
      } catch {
        return bad
      }
      const dm: DeviceM = { total: backend === 'host' ? DEFAULT_TOTAL.host : DEFAULT_TOTAL.virtual, maxAlloc: MAX_U64 }
      for (const [k, v] of entries) {
        if (k !== 'totalMemory' && k !== 'maxAllocation') return bad
        if (v === undefined) continue
        if (typeof v !== 'bigint' || v < 0n || v > MAX_U64) return bad
        if (k === 'totalMemory') dm.total = v
        else dm.maxAlloc = v
      }
      list.push(dm)
    }
  }
  if (backend === 'cuda') {
    // No GPU here: the cuda backend is refused. (On a GPU machine the fuzzer makes no cuda factory.)
    return w.copies[0].cudaAvailable() ? { codes: [NO_CUDA, IA], ok: true } : { codes: [NO_CUDA], ok: false }
  }
  const existing = w.factoryModels.get(name)
  if (existing && existing.spec !== specOf(backend, list)) return bad
  return { codes: [], ok: true, spec: { name, backend, devices: list } }
}

function factoryTarget(w: World, t: string | undefined): FactoryRef {
  const m = t === undefined ? undefined : refModel(w, t)
  return m instanceof FactoryRef ? m : skip()
}

/** A device id argument: its value when valid for `f`. */
function deviceArg(x: unknown, f: FactoryM): { codes: string[]; d: number | null } {
  if (typeof x !== 'number' || !Number.isSafeInteger(x) || x < 0 || x > 0xffff_ffff) return { codes: [IA], d: null }
  if (x >= f.devices.length) return { codes: [IA], d: null }
  return { codes: [], d: x }
}

function execFactory(w: World, op: Op, r: Result): void {
  const fr = factoryTarget(w, op.t)
  const f = fr.model
  const which = op.op.slice('factory.'.length)
  if (which === 'get') {
    if (fr.obj.name !== f.name || fr.obj.backend !== f.backend || fr.obj.deviceCount !== f.devices.length) {
      fail('factory-props', `${fr.id}: name ${fr.obj.name} backend ${fr.obj.backend} deviceCount ${fr.obj.deviceCount}`)
    }
    r.outcome = 'ok'
    return
  }
  if (which === 'deviceStats' || which === 'createStream') {
    const x = resolve(w, op.args[0])
    const dv = which === 'createStream' && x === undefined ? { codes: [], d: 0 } : deviceArg(x, f)
    const res = call(w, `${fr.id}.${which}(${showV(op.args[0])})`, dv.codes, dv.d !== null, () => (which === 'deviceStats' ? fr.obj.deviceStats(x as number) : fr.obj.createStream(x as number)))
    r.outcome = res.ok ? 'ok' : res.code
    if (!res.ok || which === 'deviceStats') return
    const s = res.value as Stream
    const id = s.id
    if (w.streamIds.has(id)) fail('stream-ids', `${fr.id}.createStream() gave id ${id} again`)
    w.streamIds.add(id)
    if (s.deviceId !== dv.d) fail('stream-props', `stream made on ${dv.d} has deviceId ${s.deviceId}`)
    w.streams.set(op.out!, new StreamM(op.out!, f.backend, dv.d!, fr.copy, id, s))
    return
  }
  if (which === 'releaseAllocator') {
    const x = resolve(w, op.args[0])
    const m = modelOf(w, op.args[0])
    const h = m instanceof HandleM ? m : m instanceof ViewM ? m.handle : null
    const codes: string[] = []
    if (!h || h.copy !== fr.copy) codes.push(IA)
    else if (h.released) codes.push(REL)
    else if (h.factory !== f) codes.push(IA)
    const res = call(w, `${fr.id}.releaseAllocator(${showRef(op.args[0])})`, codes, codes.length === 0, () => fr.obj.releaseAllocator(x as OrtAllocator))
    r.outcome = res.ok ? 'ok' : res.code
    if (res.ok) {
      w.releaseHandle(h!)
      touch(h!.arena, r)
    }
    return
  }
  execCreate(w, op, r, fr, which === 'createSharedAllocator')
}

const MEM_NAMES: MemName[] = ['Cuda', 'CudaPinned', 'Cpu']

/** What a create call's `info` argument is: its parts, or the invalid-argument code. */
function infoArg(x: unknown): { name: MemName; deviceId: number; type: 'device' | 'readonly' } | null {
  let o: Record<string, unknown>
  try {
    if (typeof x !== 'object' || x === null || Array.isArray(x)) return null
    o = ownRecord(x)
  } catch {
    return null
  }
  if (Object.keys(o).some((k) => !['name', 'deviceId', 'type'].includes(k))) return null
  const { name, deviceId = 0, type = 'device' } = o as { name?: unknown; deviceId?: unknown; type?: unknown }
  if (typeof name !== 'string' || !(MEM_NAMES as string[]).includes(name)) return null
  if (typeof deviceId !== 'number' || !Number.isSafeInteger(deviceId) || deviceId < 0 || deviceId > 0xffff_ffff) return null
  if (type !== 'device' && type !== 'readonly') return null
  return { name: name as MemName, deviceId, type }
}

function flagsArg(x: unknown): boolean | null {
  try {
    if (typeof x !== 'object' || x === null || Array.isArray(x)) return null
    const e = Object.entries(x)
    if (e.some(([k]) => k !== 'replace')) return null
    const v = Object.prototype.hasOwnProperty.call(x, 'replace') ? (x as { replace: unknown }).replace : undefined
    return typeof v === 'boolean' ? v : null
  } catch {
    return null
  }
}

function execCreate(w: World, op: Op, r: Result, fr: FactoryRef, sharedCall: boolean): void {
  const f = fr.model
  const info = resolve(w, op.args[0])
  const options = resolve(w, op.args[1])
  const flags = sharedCall ? resolve(w, op.args[2]) : undefined
  const codes: string[] = []
  const replace = sharedCall ? flagsArg(flags) : false
  if (replace === null) codes.push(IA)
  const i = infoArg(info)
  if (!i) codes.push(IA)
  const cfg = expectConfig(options)
  if ('code' in cfg) codes.push(cfg.code)
  else if ('pairs' in cfg && !cfg.valid) codes.push(IC)
  if (i && (i.name === 'Cpu' ? i.deviceId !== 0 : i.deviceId >= f.devices.length)) codes.push(IA)
  // The full config the allocator gets (its parse), when valid.
  let config: Record<string, string> | null = null
  if (codes.length === 0) config = expectParsed('pairs' in cfg ? cfg.pairs : [], w.defaults())
  let kind: Kind = 'arena'
  let existing: ArenaM | undefined
  let warn = false
  const device = i ? (i.name === 'Cpu' ? 0 : i.deviceId) : 0
  const shared = i ? f.sharedAllocator(i.name, device) : false
  if (config && i) {
    kind = i.type === 'readonly' ? 'plain' : i.name === 'Cpu' ? 'cpu' : i.name === 'CudaPinned' ? 'pinned' : config['arena.use_cuda_mempool'] === '1' ? 'pool' : 'arena'
    if (kind !== 'plain' && !replace && !shared) existing = f.current.get(`${kind}:${device}`)
    warn = existing !== undefined && !('none' in cfg) && !isDeepStrictEqual(existing.config, config)
    // A logger that throws while warning fails the call (which then changes nothing).
    if (warn && fr.loggerThrows) codes.push(IA)
  }
  const ok = codes.length === 0
  const before = fr.warnings.length
  const what = `${fr.id}.${sharedCall ? 'createSharedAllocator' : 'createAllocator'}(${op.args.map(showV).join(', ')})`
  const res = call(w, what, uniq(codes), ok, () => (sharedCall ? fr.obj.createSharedAllocator(info as never, options as never, flags as never) : fr.obj.createAllocator(info as never, options as never)))
  r.outcome = res.ok ? 'ok' : res.code
  if (!res.ok) return
  const got = fr.warnings.length - before
  if (!shared && got !== (warn ? 1 : 0)) fail('create-warning', `${what}: ${got} warnings, expected ${warn ? 1 : 0}: ${fr.warnings.slice(before).join(' / ')}`)
  let a = existing
  if (!a) {
    a = new ArenaM(w.id('A'), f, kind, i!.name, device, i!.type, config!, shared)
    f.arenas.add(a)
    if (kind !== 'plain' && !shared) f.current.set(`${kind}:${device}`, a)
  }
  a.users += 1
  const h = new HandleM(op.out!, a, f, fr.copy, res.value)
  a.handles.add(h)
  w.handles.set(h.id, h)
  touch(a, r)
  const obj = res.value
  if (obj.version !== 25) fail('version', `${h.id}.version ${obj.version}`)
  if ((obj.allocOnStream !== undefined) !== a.streamAware || (obj.resetChunksUsingStream !== undefined) !== a.streamAware || (obj.shrink !== undefined) !== a.canShrink) {
    fail('method-presence', `${h.id} (${a.kind}): allocOnStream ${obj.allocOnStream !== undefined} resetChunksUsingStream ${obj.resetChunksUsingStream !== undefined} shrink ${obj.shrink !== undefined}`)
  }
}

// ---------------------------------------------------------------- functions

function execConfigFn(w: World, op: Op, r: Result): void {
  const idx = w.copies[op.c ?? 0] ?? skip()
  const which = (op.args[1] as { s: string }).s
  const options = resolve(w, op.args[0])
  const cfg = expectConfig(options)
  if (which === 'toArenaPairs') {
    const codes = 'code' in cfg ? [cfg.code] : []
    const res = call(w, `toArenaPairs(${showV(op.args[0])})`, codes, codes.length === 0, () => idx.toArenaPairs(options as never))
    r.outcome = res.ok ? 'ok' : res.code
    if (!res.ok) return
    const want = 'none' in cfg ? null : Object.fromEntries((cfg as { pairs: [string, string][] }).pairs)
    if (!isDeepStrictEqual(res.value === null ? null : { ...res.value }, want)) fail('to-arena-pairs', `toArenaPairs gave ${JSON.stringify(res.value)}, expected ${JSON.stringify(want)}`)
    return
  }
  const codes = 'none' in cfg ? [IA] : 'code' in cfg ? [cfg.code] : cfg.valid ? [] : [IC]
  const res = call(w, `parseArenaConfig(${showV(op.args[0])})`, codes, codes.length === 0, () => idx.parseArenaConfig(options as never))
  r.outcome = res.ok ? 'ok' : res.code
  if (!res.ok) return
  const want = expectParsed((cfg as { pairs: [string, string][] }).pairs, w.defaults())
  if (!isDeepStrictEqual({ ...res.value }, want)) fail('parse-config', `parseArenaConfig gave ${JSON.stringify(res.value)}, expected ${JSON.stringify(want)}`)
  w.apiCalls += 1
  const again = idx.parseArenaConfig(res.value)
  if (!isDeepStrictEqual(again, res.value)) fail('parse-config', 'what parseArenaConfig returns does not parse back to itself')
}

function execNamespace(w: World, op: Op, r: Result): void {
  const idx = w.copies[op.c ?? 0] ?? skip()
  const options = resolve(w, op.args[0])
  const name = resolve(w, op.args[1])
  const which = (op.args[2] as { s: string }).s as 'env' | 'session'
  let entries: [string, unknown][] | null = null
  try {
    if (typeof options === 'object' && options !== null && !Array.isArray(options)) entries = Object.entries(options)
  } catch {
    entries = null
  }
  const ok = entries !== null && entries.every(([, v]) => typeof v === 'string') && typeof name === 'string'
  const fn = which === 'env' ? idx.envArenaOptions : idx.sessionArenaOptions
  const res = call(w, `${which}ArenaOptions(${showV(op.args[0])}, ${showV(op.args[1])})`, ok ? [] : [IA], ok, () => fn(options as never, name as never))
  r.outcome = res.ok ? 'ok' : res.code
  if (!res.ok) return
  const prefix = which === 'env' ? `ep_factory.${name as string}.` : `ep.${(name as string).toLowerCase()}.`
  const want: [string, string][] = []
  for (const [k, v] of entries!) if (k.startsWith(prefix) && k.slice(prefix.length).startsWith('arena.')) want.push([k.slice(prefix.length), v as string])
  if (!isDeepStrictEqual(Object.entries(res.value), want)) fail('namespaces', `${which}ArenaOptions gave ${JSON.stringify(res.value)}, expected ${JSON.stringify(Object.fromEntries(want))}`)
}

function execMisc(w: World, op: Op, r: Result): void {
  const idx = w.copies[op.c ?? 0] ?? skip()
  const v = resolve(w, op.args[0])
  w.apiCalls += 8
  if (!isDeepStrictEqual([...idx.ERROR_CODES], idx.nativeErrorCodes())) fail('error-codes', `ERROR_CODES ${idx.ERROR_CODES.join(',')} != native ${idx.nativeErrorCodes().join(',')}`)
  const devs = idx.devices()
  if (!Array.isArray(devs) || (!idx.cudaAvailable() && devs.length !== 0)) fail('devices', `devices() ${JSON.stringify(devs)} with cudaAvailable() ${idx.cudaAvailable()}`)
  if (idx.packageVersion() !== w.copies[0].packageVersion() || idx.platformId() !== w.copies[0].platformId()) fail('platform', 'packageVersion or platformId differ between calls')
  if (!Array.isArray(idx.prebuiltPlatforms())) fail('platform', 'prebuiltPlatforms() is no array')
  try {
    idx.cLibrary()
  } catch (e) {
    if ((e as { code?: string }).code !== 'ERR_NO_NATIVE_BINDING') fail('coded-error', `cLibrary() threw ${errText(e)}`)
  }
  const d = idx.describe(v)
  if (typeof d !== 'string' || d.length > 80) fail('describe', `describe() gave ${JSON.stringify(d)}`)
  if (idx.isArenaError(v)) fail('is-arena-error', `isArenaError(${d}) is true`)
  if (!idx.isArenaError(idx.invalidArgument('x', v, 'is fuzzed'))) fail('is-arena-error', 'isArenaError(invalidArgument(...)) is false')
  r.outcome = 'ok'
}

/** trace.ts's documented argument rules: an integer in `lo … hi`. */
const isInt = (v: unknown, lo: number, hi: number): boolean => typeof v === 'number' && Number.isSafeInteger(v) && v >= lo && v <= hi

/** What `mixedTrace(ops, options)` must do with these arguments: its options, or `null` for invalid. */
function mixedArgs(ops: unknown, o: unknown): { minSize: number; maxSize: number; maxLive: number } | null {
  if (!isInt(ops, 0, 10_000_000)) return null
  if (o === undefined) return { minSize: 256, maxSize: 64 * 2 ** 20, maxLive: 2000 }
  let r: Record<string, unknown>
  try {
    if (typeof o !== 'object' || o === null || Array.isArray(o)) return null
    r = ownRecord(o)
  } catch {
    return null
  }
  if (Object.keys(r).some((k) => !['minSize', 'maxSize', 'maxLive', 'seed'].includes(k))) return null
  // Only `undefined` means "the default" (null is a value, and not a valid one).
  const minSize = r.minSize === undefined ? 256 : r.minSize
  if (!isInt(minSize, 1, Number.MAX_SAFE_INTEGER)) return null
  const maxSize = r.maxSize === undefined ? Math.max(minSize as number, 64 * 2 ** 20) : r.maxSize
  if (!isInt(maxSize, minSize as number, Number.MAX_SAFE_INTEGER)) return null
  const maxLive = r.maxLive === undefined ? 2000 : r.maxLive
  if (!isInt(maxLive, 1, 0xffff_ffff)) return null
  if (r.seed !== undefined && !isInt(r.seed, 0, Number.MAX_SAFE_INTEGER)) return null
  return { minSize: minSize as number, maxSize: maxSize as number, maxLive: maxLive as number }
}

function execMixedTrace(w: World, op: Op, r: Result): void {
  const idx = w.copies[op.c ?? 0] ?? skip()
  const ops = resolve(w, op.args[0])
  const o = resolve(w, op.args[1])
  const want = mixedArgs(ops, o)
  const res = call(w, `mixedTrace(${op.args.map(showV).join(', ')})`, want ? [] : [IA], want !== null, () => idx.mixedTrace(ops as number, o as never))
  r.outcome = res.ok ? 'ok' : res.code
  if (!res.ok) return
  const t = res.value
  if (t.length !== ops) fail('mixed-trace', `mixedTrace(${String(ops)}) gave ${t.length} ops`)
  const live = new Set<number>()
  for (const x of t) {
    if (x.op === 'alloc') {
      if (x.size < want!.minSize || x.size > want!.maxSize || live.has(x.id)) fail('mixed-trace', `bad alloc ${JSON.stringify(x)}`)
      live.add(x.id)
      if (live.size > want!.maxLive) fail('mixed-trace', `more than ${want!.maxLive} live`)
    } else if (!live.delete(x.id)) fail('mixed-trace', `free of ${x.id}, not live`)
  }
}

function execReplay(w: World, op: Op, r: Result): void {
  const idx = w.copies[op.c ?? 0] ?? skip()
  const x = resolve(w, op.args[0])
  const m = modelOf(w, op.args[0])
  const h = m instanceof HandleM ? m : m instanceof ViewM ? m.handle : null
  const trace = JSON.parse((op.args[1] as { s: string }).s, (_, v: unknown) => (typeof v === 'string' && /^-?[0-9]+n$/.test(v) ? BigInt(v.slice(0, -1)) : v)) as import('../../ts/index').TraceInput[]
  const options = resolve(w, op.args[2])
  const streams = traceOptions(options)
  const usesStreams = trace.some((s) => typeof s === 'object' && s !== null && s.op === 'alloc' && typeof s.stream === 'number' && s.stream > 0)
  const codes: string[] = []
  if (!h || h.copy !== (op.c ?? 0)) codes.push(IA)
  if (streams === null || !traceValid(trace, streams)) codes.push(IA)
  if (h?.released) codes.push(REL)
  if (codes.length === 0 && usesStreams && !h!.arena.streamAware) codes.push(IA)
  const a = h?.arena
  if (a && !h!.released) logBefore(w, a, false)
  const res = call(w, `replayTrace(${showRef(op.args[0])}, ${trace.length} ops, ${showV(op.args[2])})`, uniq(codes), codes.length === 0, () => idx.replayTrace(x as OrtAllocator, trace, options as never))
  r.outcome = res.ok ? 'ok' : res.code
  if (!res.ok) {
    if (a && !h!.released) afterFailure(w, a, false, res.code, r)
    return
  }
  const allocs = trace.filter((s) => s.op === 'alloc' && BigInt(s.size) > 0n).length
  const rep = res.value
  if (rep.ops !== trace.length || rep.failedAllocs > allocs) fail('replay-report', `replayTrace report ${JSON.stringify(rep)} for ${trace.length} ops, ${allocs} allocations`)
  a!.numAllocs += BigInt(allocs - rep.failedAllocs)
  touch(a!, r)
}

/** `replayTrace`'s options: the number of streams, or `null` when invalid. */
function traceOptions(o: unknown): number | null {
  if (o === undefined) return 0
  let r: Record<string, unknown>
  try {
    if (typeof o !== 'object' || o === null || Array.isArray(o)) return null
    r = ownRecord(o)
  } catch {
    return null
  }
  if (Object.keys(r).some((k) => k !== 'streams' && k !== 'trackPeaks')) return null
  if (r.trackPeaks !== undefined && typeof r.trackPeaks !== 'boolean') return null
  if (r.streams === undefined) return 0
  return isInt(r.streams, 0, 1024) ? (r.streams as number) : null
}

/** Whether every operation of a trace is well formed (trace.ts's rules). */
function traceValid(trace: unknown[], streams: number): boolean {
  const u64 = (v: unknown): boolean => (typeof v === 'bigint' ? v >= 0n && v <= MAX_U64 : isInt(v, 0, Number.MAX_SAFE_INTEGER))
  return trace.every((t) => {
    if (typeof t !== 'object' || t === null || Array.isArray(t)) return false
    const o = t as Record<string, unknown>
    if (Object.keys(o).some((k) => !['op', 'id', 'size', 'stream'].includes(k))) return false
    if (o.op !== 'alloc' && o.op !== 'free') return false
    if (!u64(o.id)) return false
    if (o.op === 'alloc' && o.size === undefined) return false
    if (o.size !== undefined && !u64(o.size)) return false
    return o.stream === undefined || (isInt(o.stream, 0, 0xffff_ffff) && (o.stream as number) <= streams)
  })
}

function execPairNs(w: World, op: Op, r: Result): void {
  const idx = w.copies[op.c ?? 0] ?? skip()
  const x = resolve(w, op.args[0])
  const m = modelOf(w, op.args[0])
  const h = m instanceof HandleM ? m : m instanceof ViewM ? m.handle : null
  const size = resolve(w, op.args[1]) as number
  const iterations = resolve(w, op.args[2]) as number
  const codes: string[] = []
  if (!h || h.copy !== (op.c ?? 0)) codes.push(IA)
  if (!isInt(size, 0, Number.MAX_SAFE_INTEGER) || !isInt(iterations, 0, 0xffff_ffff)) codes.push(IA)
  if (h?.released) codes.push(REL)
  let ok = codes.length === 0
  const a = h?.arena
  if (ok && size > 0 && iterations > 0) {
    const o = allocOutlook(a!, BigInt(size), false, a!.shared ? null : w.outstanding(a!.factory, a!.ledger))
    if (o !== 'ok') codes.push(OOM)
    ok = o !== 'fail'
  }
  if (a && !h!.released) logBefore(w, a, false)
  const res = call(w, `nativePairNs(${op.args.map(showV).join(', ')})`, uniq(codes), ok, () => idx.nativePairNs(x as OrtAllocator, size, iterations))
  r.outcome = res.ok ? 'ok' : res.code
  if (!res.ok) {
    if (a && !h!.released) afterFailure(w, a, false, res.code, r)
    return
  }
  if (typeof res.value !== 'number' || !(res.value >= 0)) fail('pair-ns', `nativePairNs gave ${res.value}`)
  if (size > 0) a!.numAllocs += BigInt(iterations)
  if (iterations === 0) return
  touch(a!, r)
}

// ---------------------------------------------------------------- wrong `this`

/** Methods by class, with arguments that would be valid on their own object. */
const WRONG_THIS: Record<string, 'allocator' | 'factory' | 'stream' | 'event'> = {
  alloc: 'allocator', free: 'allocator', reserve: 'allocator', info: 'allocator', getStats: 'allocator', getStatsRaw: 'allocator',
  memoryLog: 'allocator', withStream: 'allocator', allocatedSize: 'allocator', requestedSize: 'allocator', write: 'allocator',
  read: 'allocator', fill: 'allocator', createAllocator: 'factory', createSharedAllocator: 'factory', releaseAllocator: 'factory',
  deviceStats: 'factory', createStream: 'factory', 'get name': 'factory', 'get backend': 'factory', 'get deviceCount': 'factory',
  record: 'stream', wait: 'stream', synchronize: 'stream', release: 'stream', 'get id': 'stream', 'get deviceId': 'stream', 'get syncId': 'event',
}

/** A method taken off its object and called on something else: a coded error, nothing changes. */
function execWrongThis(w: World, op: Op, r: Result): void {
  const name = (op.args[0] as { s: string }).s
  const owner = modelOf(w, op.args[1])
  if (!owner?.obj) return skip()
  const self = resolve(w, op.args[2])
  const args = op.args.slice(3).map((v) => resolve(w, v))
  const proto = Object.getPrototypeOf(owner.obj) as object
  const fn = name.startsWith('get ') ? Object.getOwnPropertyDescriptor(proto, name.slice(4))!.get! : (proto as Record<string, (...a: unknown[]) => unknown>)[name]
  const cls = owner instanceof FactoryRef ? 'AllocatorFactory' : owner instanceof StreamM ? 'Stream' : owner instanceof EventM ? 'StreamEvent' : 'OrtAllocator'
  const res = call(w, `${cls}.prototype.${name}.call(${showV(op.args[2])})`, [IA], false, () => fn.apply(self, args))
  r.outcome = res.ok ? 'ok' : res.code
}

function genWrongThis(w: World, g: Prng): Op | null {
  const name = g.pick(Object.keys(WRONG_THIS))
  const cls = WRONG_THIS[name]
  const byClass = {
    allocator: [...w.handles.values()].filter((h) => h.obj),
    factory: [...w.factories.values()],
    stream: [...w.streams.values()].filter((s) => s.obj),
    event: [...w.events.values()].filter((e) => e.obj),
  }
  const owners = byClass[cls]
  if (!owners.length) return null
  const owner = g.pick(owners as { id: string; copy: number }[])
  // Anything but an object of the owner's own class (and copy): the other classes, another copy's, a view, a weird value.
  const others = (Object.keys(byClass) as (keyof typeof byClass)[]).flatMap((k) =>
    (byClass[k] as { id: string; copy: number; obj?: unknown }[]).filter((o) => (k !== cls || o.copy !== owner.copy) && (o.obj ?? true)),
  )
  const views = cls === 'allocator' ? [...w.views.values()].filter((v) => v.obj) : []
  const self = g.weighted<V>([
    [2, UNDEF],
    [1, NULL],
    [1, { o: {} }],
    [others.length ? 4 : 0, others.length ? { ref: g.pick(others).id } : UNDEF],
    [views.length ? 2 : 0, views.length ? { ref: g.pick(views).id } : UNDEF],
    [2, anyWeird(g)],
  ])
  const args: V[] = cls === 'allocator' ? [num(256), NULL] : cls === 'factory' ? [{ o: { name: str('Cuda') } }] : []
  return { op: 'wrongThis', args: [str(name), { ref: owner.id }, self, ...args] }
}

// ---------------------------------------------------------------- lifetimes

/** Drops the run's references to an object (and to the views that hold it) without a release. */
function execDrop(w: World, op: Op, r: Result): void {
  const m = modelOf(w, op.args[0])
  if (!m || !m.obj) return skip()
  r.outcome = 'ok'
  if (m instanceof HandleM) {
    m.obj = null
    for (const v of w.views.values()) if (v.handle === m) v.obj = null
    if (!m.released) w.pendingHandles.push(m)
  } else if (m instanceof StreamM) {
    m.obj = null
    for (const v of w.views.values()) if (v.stream === m) v.obj = null
    if (!m.released) w.pendingStreams.push(m)
  } else {
    m.obj = null
  }
}

/** Collects until finalizers have had several turns of the event loop, then expects what they do. */
async function execCollect(w: World, op: Op, r: Result): Promise<void> {
  const gc = (globalThis as { gc?: () => void }).gc ?? skip()
  for (let i = 0; i < 10; i++) {
    gc()
    await new Promise((resolve) => setImmediate(resolve))
  }
  r.outcome = 'ok'
  for (const h of w.pendingHandles.splice(0)) {
    w.releaseHandle(h)
    touch(h.arena, r)
  }
  for (const s of w.pendingStreams.splice(0)) w.releaseStream(s)
}

// ---------------------------------------------------------------- the table

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

// ================================================================ generation

/** Choices that pick no object of the run. */
function anyWeird(g: Prng): V {
  return g.weighted<V>([
    [3, { w: g.pick(WEIRD_NAMES) }],
    [1, UNDEF],
    [1, NULL],
    [1, str('12')],
    [1, num(g.pick(EDGE_NUMBERS))],
    [1, big(g.pick(EDGE_BIGINTS))],
  ])
}

/** A size: mostly small and valid, sometimes near the devices' limits, sometimes of every other kind. */
function genSize(w: World, g: Prng, a: ArenaM | null): V {
  const asBig = g.chance(0.4)
  const valid = (n: bigint): V => (asBig || n > BigInt(Number.MAX_SAFE_INTEGER) ? big(n) : num(Number(n)))
  const lim = a?.limits()
  return g.weighted<V>([
    [40, valid(BigInt(g.logSize(1, 4096)))],
    [18, valid(BigInt(g.logSize(4096, 1 << 21)))],
    [8, valid(lim ? (lim.total / 4n) * BigInt(g.range(1, 6)) + BigInt(g.range(-300, 300)) : 1n << 22n)],
    [3, valid(lim && lim.maxAlloc < MAX_U64 ? lim.maxAlloc + BigInt(g.range(-256, 256)) : 1n << 24n)],
    [3, num(0)],
    [1, big(0n)],
    [10, num(g.pick(EDGE_NUMBERS))],
    [10, big(g.pick(EDGE_BIGINTS))],
    [5, anyWeird(g)],
  ])
}

function allLive(w: World): [Live, ArenaM][] {
  const out: [Live, ArenaM][] = []
  for (const a of w.reachable()) for (const l of a.live.values()) out.push([l, a])
  return out
}

/** A pointer for an op on `target`: its own, another allocator's, stale, interior, wrapped, or no pointer at all. */
function genPtr(w: World, g: Prng, target: ArenaM): V {
  const own = [...target.live.values()]
  const others = allLive(w).filter(([, b]) => b !== target && !(b.shared && target.shared))
  // Recent allocations that are no longer live (a bounded list: the run makes thousands).
  const stale = target.shared ? [] : w.recentAllocs.filter((id) => {
    const rec = w.allocs.get(id)!
    return rec.arena.retired || rec.arena.live.get(rec.addr)?.id !== id
  })
  const any = allLive(w)
  const choices: [number, () => V][] = [
    [own.length ? 40 : 0, () => ({ ptr: g.pick(own).id, off: '0' })],
    [others.length ? 8 : 0, () => ({ ptr: g.pick(others)[0].id, off: '0' })],
    [stale.length ? 10 : 0, () => ({ ptr: g.pick(stale), off: '0' })],
    [any.length ? 10 : 0, () => {
      // Strictly inside: past the end may be another thread's allocation in a shared allocator.
      const [l] = g.pick(any)
      const size = Number(l.size)
      const chunks = Math.floor((size - 1) / 256)
      return { ptr: l.id, off: String(chunks > 0 && g.chance(0.5) ? 256 * g.range(1, Math.min(chunks, 4)) : g.range(1, Math.max(1, size - 1))) }
    }],
    [any.length && !target.shared ? 3 : 0, () => {
      const [l] = g.pick(any)
      return { ptr: l.id, off: String(l.size) }
    }],
    [any.length ? 8 : 0, () => ({ ptr: g.pick(any)[0].id, off: String(g.pick(WIDE_OFFSETS)) })],
    [4, () => big(g.pick([0n, 1n, 255n, 256n, 4096n, 2n ** 63n, MAX_U64]))],
    [3, () => NULL],
    [any.length ? 2 : 0, () => num(Number(g.pick(any)[0].addr))],
    [4, () => anyWeird(g)],
  ]
  return g.weighted(choices.filter(([wt]) => wt > 0).map(([wt, f]) => [wt, f] as const))()
}

function liveStreams(w: World, copy: number): StreamM[] {
  return [...w.streams.values()].filter((s) => s.obj && s.copy === copy && !s.released)
}

/** A stream argument for an allocator of `a` (or any when `null`). */
function genStream(w: World, g: Prng, copy: number, a: ArenaM | null): V {
  const all = [...w.streams.values()].filter((s) => s.obj)
  const mine = liveStreams(w, copy)
  const fit = a ? mine.filter((s) => s.backend === a.factory.backend && s.device === a.device) : mine
  const released = all.filter((s) => s.released)
  const otherCopy = all.filter((s) => s.copy !== copy)
  const events = [...w.events.values()].filter((e) => e.obj)
  const handles = [...w.handles.values()].filter((h) => h.obj)
  const choices: [number, () => V][] = [
    [fit.length ? 60 : 0, () => ({ ref: g.pick(fit).id })],
    [mine.length ? 10 : 0, () => ({ ref: g.pick(mine).id })],
    [released.length ? 10 : 0, () => ({ ref: g.pick(released).id })],
    [otherCopy.length ? 5 : 0, () => ({ ref: g.pick(otherCopy).id })],
    [events.length ? 2 : 0, () => ({ ref: g.pick(events).id })],
    [handles.length ? 2 : 0, () => ({ ref: g.pick(handles).id })],
    [5, () => anyWeird(g)],
  ]
  return g.weighted(choices.filter(([wt]) => wt > 0))()
}

/** Devices of `f` this thread may make allocators on. */
function usableDevices(f: FactoryM): number[] {
  return f.devices.map((_, i) => i).filter((i) => !f.forbidden.has(i))
}

function genInfo(g: Prng, f: FactoryM): V {
  const devs = usableDevices(f)
  const name = g.weighted<MemName>([
    [6, 'Cuda'],
    [2, 'CudaPinned'],
    [f.sharedDevices.size > 0 ? 1 : 2, 'Cpu'],
  ])
  const o: Record<string, V> = { name: str(name) }
  if (name !== 'Cpu' || g.chance(0.3)) {
    if (devs.length && (name !== 'Cpu' || g.chance(0.5))) o.deviceId = num(name === 'Cpu' ? g.pick([0, -0]) : g.pick(devs))
  }
  if (g.chance(0.15)) o.type = str('readonly')
  else if (g.chance(0.1)) o.type = str('device')
  if (g.chance(0.88)) return { o }
  // Invalid: a bad name, device, type, an unknown key, or no object at all.
  return g.weighted<V>([
    [2, { o: { ...o, name: str(g.pick(['cuda', 'GPU', ''])) } }],
    [2, { o: { ...o, deviceId: num(g.pick([f.devices.length, -1, 0.5, 2 ** 32 + 1, Number.NaN])) } }],
    [1, { o: { ...o, deviceId: str('0') } }],
    [1, { o: { name: str('Cpu'), deviceId: num(1) } }],
    [1, { o: { ...o, type: str('shared') } }],
    [1, { o: { ...o, device: num(0) } }],
    [2, anyWeird(g)],
  ])
}

const TYPED_KEYS = Object.keys(TYPED)
const RAW_KEYS = Object.keys(RAW_RANGES)

/** A valid value of a raw key, as its string. */
function validRaw(g: Prng, key: string, f: FactoryM | null): string {
  const [lo, hi] = RAW_RANGES[key]
  if (key === 'arena.max_mem') {
    const total = f?.devices[0]?.total ?? 1n << 30n
    return g.pick(['0', String(total / 2n), String(total / 8n + 256n), String(BigInt(g.logSize(4096, 1 << 24))), String(hi)])
  }
  if (key === 'arena.initial_chunk_size_bytes' || key === 'arena.initial_growth_chunk_size_bytes') return String(g.logSize(256, 1 << 22))
  if (key === 'arena.max_power_of_two_extend_bytes') return g.pick([String(g.logSize(1, 1 << 26)), String(hi)])
  if (key === 'arena.max_dead_bytes_per_chunk') return String(g.logSize(256, Number(hi)))
  if (hi <= 1n) return String(g.range(Number(lo), Number(hi)))
  return g.pick([String(lo), String(BigInt(g.logSize(1, 1 << 30))), String(hi)])
}

/** Options: none, typed, raw, or invalid in one of many ways. */
function genOptions(g: Prng, f: FactoryM | null, mempool = true): V {
  const kind = g.weighted<string>([
    [40, 'none'],
    [20, 'typed'],
    [14, 'raw'],
    [4, 'null'],
    [14, 'badValue'],
    [8, 'badShape'],
  ])
  if (kind === 'none') return UNDEF
  if (kind === 'null') return NULL
  const keys = RAW_KEYS.filter((k) => mempool || k !== 'arena.use_cuda_mempool')
  const n = g.range(1, 3)
  const chosen = [...new Set(Array.from({ length: n }, () => g.pick(keys)))]
  if (kind === 'raw' || (kind === 'badValue' && g.chance(0.5))) {
    const o: Record<string, V> = {}
    for (const k of chosen) o[k] = str(validRaw(g, k, f))
    if (g.chance(0.2)) o['session.other'] = str('x')
    if (kind === 'badValue') {
      const k = g.pick(RAW_KEYS)
      const [lo, hi] = RAW_RANGES[k]
      o[k] = str(g.pick([' 1', '1e9', '-1', '4096abc', '', String(hi + 1n), lo > 0n ? '0' : '-0', '0x10', '1.5', '１']))
      if (g.chance(0.2)) o['arena.max_memm'] = str('1')
      if (g.chance(0.1)) o[k] = num(5)
    }
    return { o }
  }
  const typed: Record<string, V> = {}
  for (const raw of chosen) {
    const key = TYPED_KEYS.find((t) => TYPED[t] === raw)!
    const v = validRaw(g, raw, f)
    if (key === 'extendStrategy') typed[key] = str(v === '0' ? 'nextPowerOfTwo' : 'sameAsRequested')
    else if (key === 'useCudaMempool') typed[key] = { bool: v === '1' }
    else typed[key] = BigInt(v) > BigInt(Number.MAX_SAFE_INTEGER) || g.chance(0.4) ? big(BigInt(v)) : num(Number(v))
  }
  if (kind === 'badValue') {
    const key = g.pick(TYPED_KEYS)
    typed[key] = g.pick<V>([num(-1), num(1.5), num(Number.NaN), num(2 ** 60), str('12'), NULL, { w: 'valueOf12' }, big(-1n), big(2n ** 64n), { bool: true }, num(0)])
    if (g.chance(0.1)) typed[g.pick(['extendStratgy', 'toString', 'constructor', 'max_mem'])] = num(1)
  }
  if (kind === 'badShape') {
    return g.weighted<V>([
      [2, { o: { ...typed, 'arena.max_mem': str('0') } }],
      [2, anyWeird(g)],
      [1, { o: { __proto__: str('x') } }],
      [1, { o: { 'arena.extend_strategy': UNDEF } }],
    ])
  }
  return { o: typed }
}

/** Which factory, handle, view or stream an op is called on. */
function pickHandleTarget(w: World, g: Prng, streamAware = false): HandleM | ViewM | null {
  const hs = [...w.handles.values()].filter((h) => h.obj && (!streamAware || h.arena.streamAware))
  const vs = [...w.views.values()].filter((v) => v.obj)
  const live = hs.filter((h) => !h.released)
  const rel = hs.filter((h) => h.released)
  const choices: [number, () => HandleM | ViewM][] = [
    [live.length ? 75 : 0, () => g.pick(live)],
    [rel.length ? 12 : 0, () => g.pick(rel)],
    [vs.length ? 13 : 0, () => g.pick(vs)],
  ]
  const open = choices.filter(([wt]) => wt > 0)
  return open.length ? g.weighted(open)() : null
}

function nextFactoryName(w: World): string {
  return `${w.tag}-f${w.factoryModels.size + 1}`
}

function genDevices(g: Prng): V {
  if (g.chance(0.15)) return num(g.range(1, 3))
  // A list of small devices: out of memory comes often.
  return {
    arr: Array.from({ length: g.range(1, 3) }, () => {
      const d: Record<string, V> = { totalMemory: big(BigInt(g.pick([1 << 22, 1 << 24, 1 << 26, 3 << 24]))) }
      if (g.chance(0.4)) d.maxAllocation = big(BigInt(g.pick([1 << 20, 1 << 22, 3 << 21, 1 << 24])))
      if (g.chance(0.03)) d.totalMemory = big(0n)
      return { o: d } as V
    }),
  }
}

function genNewFactory(w: World, g: Prng): Op {
  const copy = g.int(w.copies.length)
  const existing = [...w.factoryModels.values()]
  const logger = g.weighted<string>([
    [8, 'collect'],
    [w.shared ? 0 : 1, 'throw'],
  ])
  const kind = g.weighted<string>([
    [existing.length < 3 ? 10 : 1, 'new'],
    // A factory of the other simulated backend: its streams fit none of this run's allocators.
    [1, 'otherBackend'],
    [existing.length ? 4 : 0, 'alias'],
    [existing.length ? 1 : 0, 'conflict'],
    [2, 'bad'],
    [1, 'cuda'],
  ])
  let options: V
  if (kind === 'alias' || kind === 'conflict') {
    const f = g.pick(existing)
    const devs: V = { arr: f.devices.map((d) => ({ o: { totalMemory: big(d.total), ...(d.maxAlloc < MAX_U64 ? { maxAllocation: big(d.maxAlloc) } : {}) } }) as V) }
    options = { o: { name: str(f.name), backend: str(kind === 'conflict' && g.chance(0.5) ? (f.backend === 'host' ? 'virtual' : 'host') : f.backend), devices: kind === 'conflict' ? num(f.devices.length + 1) : devs } }
  } else if (kind === 'new') {
    options = { o: { name: str(nextFactoryName(w)), backend: str(w.backend), devices: genDevices(g) } }
  } else if (kind === 'otherBackend') {
    options = { o: { name: str(nextFactoryName(w)), backend: str(w.backend === 'host' ? 'virtual' : 'host'), devices: genDevices(g) } }
  } else if (kind === 'cuda') {
    options = { o: { name: str(`${w.tag}-cuda`), backend: str('cuda') } }
  } else {
    options = g.pick<V>([
      { o: { name: str(''), backend: str(w.backend) } },
      { o: { name: str(nextFactoryName(w)), backend: str('gpu') } },
      { o: { name: str(nextFactoryName(w)), backend: str(w.backend), devices: num(0) } },
      { o: { name: str(nextFactoryName(w)), backend: str(w.backend), devices: num(65) } },
      { o: { name: str(nextFactoryName(w)), backend: str(w.backend), devices: num(1.5) } },
      { o: { name: str(nextFactoryName(w)), backend: str(w.backend), devices: { arr: [] } } },
      { o: { name: str(nextFactoryName(w)), backend: str(w.backend), devices: { o: { 0: { o: {} } } } } },
      { o: { name: str(nextFactoryName(w)), backend: str(w.backend), devices: { arr: [{ o: { totalMemory: big(-1n) } }] } } },
      { o: { name: str(nextFactoryName(w)), backend: str(w.backend), devices: { arr: [{ o: { totalMemory: num(1024) } }] } } },
      { o: { name: str(nextFactoryName(w)), backend: str(w.backend), devices: { arr: [{ o: { totalMemory: big(2n ** 64n) } }] } } },
      { o: { name: str(nextFactoryName(w)), backend: str(w.backend), devices: { arr: [{ o: { total: big(1n) } }] } } },
      { o: { name: str(nextFactoryName(w)), backend: str(w.backend), devices: { arr: [NULL] } } },
      { o: { name: str(nextFactoryName(w)), backend: str(w.backend), devices: { arr: Array.from({ length: 65 }, () => ({ o: {} }) as V) } } },
      { o: { name: str(nextFactoryName(w)), backnd: str(w.backend) } },
      { o: { name: num(5), backend: str(w.backend) } },
      anyWeird(g),
    ])
  }
  return { op: 'factory.new', c: copy, args: [options, str(logger)], out: w.id('f') }
}

/** Generates the next op from the model's state. */
export function generate(w: World, g: Prng, opts: { gc: boolean; exclude: ReadonlySet<string> }): Op {
  const queued = w.queue.shift()
  if (queued) return queued
  for (;;) {
    const op = generateOnce(w, g, opts)
    if (!op || opts.exclude.has(op.op)) continue
    if (POLLUTABLE.has(op.op) && g.chance(0.04)) op.p = genPollution(g)
    return op
  }
}

/** Ops whose options an inherited property could wrongly reach. */
const POLLUTABLE = new Set(['factory.new', 'factory.createAllocator', 'factory.createSharedAllocator', 'fn.config', 'fn.namespace', 'alloc', 'free'])

function genPollution(g: Prng): [string, V][] {
  const all: [string, V][] = [
    ['arena.max_mem', str('4096')],
    ['arena.extend_strategy', str('7')],
    ['maxMem', num(4096)],
    ['useCudaMempool', { bool: true }],
    ['name', str('Cpu')],
    ['deviceId', num(1)],
    ['type', str('readonly')],
    ['replace', { bool: true }],
    ['backend', num(42)],
    ['devices', str('many')],
    ['logger', num(1)],
    ['totalMemory', big(1n)],
    ['maxAllocation', big(1n)],
    ['ep_factory.CudaEP.arena.max_mem', str('1')],
    ['ep.cudaep.arena.max_mem', str('1')],
  ]
  return all.filter(() => g.chance(0.3))
}

function generateOnce(w: World, g: Prng, opts: { gc: boolean }): Op | null {
  const factories = [...w.factories.values()]
  const liveHandles = [...w.handles.values()].filter((h) => h.obj && !h.released)
  const liveCount = w.arenas().reduce((s, a) => s + a.live.size, 0)
  const streams = [...w.streams.values()].filter((s) => s.obj)
  if (factories.length < 2) return genNewFactory(w, g)
  const name = g.weighted<string>([
    [1, 'factory.new'],
    [0.5, 'factory.get'],
    // Creates and releases balance at about ten live handles: a rich state, and each call's
    // sweep over every allocator stays cheap.
    [liveHandles.length < 3 ? 14 : liveHandles.length < 10 ? 4 : 1, 'factory.createAllocator'],
    [liveHandles.length < 10 ? 1.5 : 0.5, 'factory.createSharedAllocator'],
    [liveHandles.length > 2 ? Math.max(2.5, liveHandles.length / 3) : 0.8, 'factory.releaseAllocator'],
    [1, 'factory.deviceStats'],
    [streams.length < 2 ? 4 : 1.2, 'factory.createStream'],
    [liveCount > 40 ? 6 : 14, 'alloc'],
    [3, 'reserve'],
    [6, 'allocOnStream'],
    [liveCount > 40 ? 24 : 11, 'free'],
    [2.5, 'allocatedSize'],
    [1.5, 'requestedSize'],
    [4, 'write'],
    [4, 'read'],
    [3, 'fill'],
    [2.5, 'query'],
    [1.2, 'shrink'],
    [1.2, 'resetChunksUsingStream'],
    [2, 'withStream'],
    [1.5, 'stream.record'],
    [1, 'stream.wait'],
    [0.4, 'stream.synchronize'],
    [1.2, 'stream.release'],
    [0.5, 'stream.props'],
    [0.3, 'stream.syncId'],
    [1.5, 'fn.config'],
    [0.8, 'fn.namespace'],
    [0.3, 'fn.misc'],
    [0.15, 'fn.mixedTrace'],
    [0.4, 'fn.replayTrace'],
    [0.2, 'fn.nativePairNs'],
    [1.2, 'scenario.handoff'],
    [0.6, 'wrongThis'],
    [opts.gc ? 1.5 : 0, 'gc.drop'],
    [opts.gc ? 0.6 : 0, 'gc.collect'],
  ])
  const fr = g.pick(factories)
  switch (name) {
    case 'factory.new':
      return factories.length < 7 ? genNewFactory(w, g) : null
    case 'factory.get':
      return { op: name, t: fr.id, args: [] }
    case 'factory.createAllocator':
    case 'factory.createSharedAllocator': {
      const args = [genInfo(g, fr.model), genOptions(g, fr.model)]
      if (name === 'factory.createSharedAllocator') {
        args.push(g.weighted<V>([
          [8, { o: { replace: { bool: true } } }],
          [2, { o: { replace: { bool: false } } }],
          [1, { o: {} }],
          [1, { o: { replace: num(1) } }],
          [1, { o: { replace: { bool: true }, force: { bool: true } } }],
          [1, anyWeird(g)],
        ]))
      }
      return { op: name, t: fr.id, args, out: w.id('h') }
    }
    case 'factory.releaseAllocator': {
      const t = pickHandleTarget(w, g)
      const sameFactory = factories.filter((f) => t && f.model === (t instanceof ViewM ? t.handle : t).factory)
      const via = t && sameFactory.length && g.chance(0.8) ? g.pick(sameFactory) : fr
      return { op: name, t: via.id, args: [t && g.chance(0.95) ? { ref: t.id } : g.chance(0.5) && streams.length ? { ref: g.pick(streams).id } : anyWeird(g)] }
    }
    case 'factory.deviceStats':
    case 'factory.createStream': {
      const devs = fr.model.devices.length
      const d = g.weighted<V>([
        [10, num(g.int(devs))],
        [1, num(-0)],
        [name === 'factory.createStream' ? 3 : 0, UNDEF],
        [1, num(devs)],
        [1, num(g.pick([-1, 0.5, 1.9, Number.NaN, 2 ** 32, 2 ** 32 + 1]))],
        [1, anyWeird(g)],
      ])
      return { op: name, t: fr.id, args: [d], out: name === 'factory.createStream' ? w.id('s') : undefined }
    }
    case 'alloc':
    case 'reserve':
    case 'allocOnStream': {
      const t = pickHandleTarget(w, g, name === 'allocOnStream')
      if (!t) return null
      const h = t instanceof ViewM ? t.handle : t
      const args = [genSize(w, g, h.arena)]
      if (name === 'allocOnStream') args.push(genStream(w, g, h.copy, h.arena))
      return { op: name, t: t.id, args, out: w.id('a') }
    }
    case 'free':
    case 'allocatedSize':
    case 'requestedSize': {
      const t = pickHandleTarget(w, g)
      if (!t) return null
      const h = t instanceof ViewM ? t.handle : t
      return { op: name, t: t.id, args: [genPtr(w, g, h.arena)] }
    }
    case 'write':
    case 'read':
    case 'fill':
      return genAccess(w, g, name)
    case 'query': {
      const t = pickHandleTarget(w, g)
      if (!t) return null
      return { op: name, t: t.id, args: [str(g.pick(['info', 'getStats', 'getStatsRaw', 'memoryLog', 'version']))] }
    }
    case 'shrink': {
      const t = pickHandleTarget(w, g)
      return t ? { op: name, t: t.id, args: [] } : null
    }
    case 'resetChunksUsingStream':
    case 'withStream': {
      const t = pickHandleTarget(w, g)
      if (!t) return null
      const h = t instanceof ViewM ? t.handle : t
      return { op: name, t: t.id, args: [genStream(w, g, h.copy, h.arena)], out: name === 'withStream' ? w.id('v') : undefined }
    }
    case 'stream.record':
    case 'stream.wait':
    case 'stream.synchronize':
    case 'stream.release':
    case 'stream.props': {
      if (!streams.length) return null
      const s = g.chance(0.85) ? g.pick(streams) : g.pick(streams)
      if (name === 'stream.wait') {
        const evs = [...w.events.values()].filter((e) => e.obj)
        const arg = evs.length && g.chance(0.85) ? { ref: g.pick(evs).id } : anyWeird(g)
        return { op: name, t: s.id, args: [arg] }
      }
      return { op: name, t: s.id, args: [], out: name === 'stream.record' ? w.id('e') : undefined }
    }
    case 'stream.syncId': {
      const evs = [...w.events.values()].filter((e) => e.obj)
      return evs.length ? { op: name, t: g.pick(evs).id, args: [] } : null
    }
    case 'fn.config':
      return { op: name, c: g.int(w.copies.length), args: [genOptions(g, null), str(g.pick(['parseArenaConfig', 'toArenaPairs']))] }
    case 'fn.namespace':
      return genNamespace(w, g)
    case 'fn.misc':
      return { op: name, c: g.int(w.copies.length), args: [anyWeird(g)] }
    case 'fn.mixedTrace': {
      const min = g.logSize(1, 1 << 16)
      const o: Record<string, V> = { minSize: num(min), maxSize: num(min + g.logSize(1, 1 << 20)), maxLive: num(g.range(1, 40)), seed: num(g.u32()) }
      let count = num(g.range(0, 300))
      if (g.chance(0.3)) {
        // One argument out of its range, of the wrong kind, or an unknown option.
        const bad = g.pick(['ops', 'minSize', 'maxSize', 'maxLive', 'seed', 'unknown', 'options'])
        const v = g.pick<V>([num(-1), num(1.5), num(Number.NaN), num(2 ** 32 + 3), num(2 ** 53), big(5n), str('12'), NULL, anyWeird(g)])
        if (bad === 'ops') count = v
        else if (bad === 'unknown') o.maxsize = num(5)
        else if (bad === 'options') return { op: name, c: g.int(w.copies.length), args: [count, anyWeird(g)] }
        else if (bad === 'maxSize') o.maxSize = num(min - 1)
        else o[bad] = v
      }
      return { op: name, c: g.int(w.copies.length), args: [count, { o }] }
    }
    case 'fn.replayTrace':
    case 'fn.nativePairNs': {
      const t = pickHandleTarget(w, g)
      const copy = t ? (t instanceof ViewM ? t.handle : t).copy : 0
      const target = t && g.chance(0.93) ? ({ ref: t.id } as V) : anyWeird(g)
      if (name === 'fn.nativePairNs') {
        const bad = g.chance(0.2)
        const size = bad && g.chance(0.5) ? g.pick<V>([num(-1), num(1.5), num(2 ** 53), big(256n), anyWeird(g)]) : num(g.logSize(0, 1 << 20))
        const iterations = bad && !('n' in size && Number.isSafeInteger(Number(size.n))) ? num(g.range(1, 30)) : bad ? g.pick<V>([num(-1), num(2 ** 32), num(0.5), NULL, anyWeird(g)]) : num(g.range(0, 30))
        return { op: name, c: copy, args: [target, size, iterations] }
      }
      // Open finding (trace.rs / replay.rs, reported): a replay that fails part way on a stream
      // the allocator cannot take keeps what it did. Left out unless asked for.
      const canStream = t && (t instanceof ViewM ? t.handle : t).arena.streamAware
      const streamsN = canStream || w.includeOpen ? g.range(0, 2) : 0
      const trace: unknown[] = genTrace(g, streamsN)
      if (trace.length && g.chance(0.1)) {
        // One operation malformed: every operation is checked before any is replayed.
        const i = g.int(trace.length)
        trace[i] = g.pick<unknown>([null, 5, [], { op: 'realloc', id: 1 }, { op: 'alloc', id: -1, size: 5 }, { op: 'alloc', id: 1 }, { op: 'alloc', id: 1, size: 1.5 }, { op: 'free', id: '1' }, { op: 'alloc', id: 1, size: 5, stream: streamsN + 1 }, { op: 'alloc', id: 1, size: 5, extra: 1 }])
      }
      const opts = g.weighted<V>([
        [10, { o: { streams: num(streamsN) } }],
        [2, { o: { streams: num(streamsN), trackPeaks: { bool: g.chance(0.5) } } }],
        [streamsN === 0 ? 2 : 0, UNDEF],
        [1, g.pick<V>([{ o: { streams: num(-1) } }, { o: { streams: num(1025) } }, { o: { trackPeaks: num(1) } }, { o: { stream: num(1) } }, anyWeird(g)])],
      ])
      return { op: name, c: copy, args: [target, str(JSON.stringify(trace, (_, v: unknown) => (typeof v === 'bigint' ? `${v}n` : v))), opts] }
    }
    case 'scenario.handoff':
      return genHandoff(w, g)
    case 'wrongThis':
      return genWrongThis(w, g)
    case 'gc.drop':
      return genDrop(w, g)
    case 'gc.collect':
      return { op: name, args: [] }
  }
  return null
}

function genAccess(w: World, g: Prng, name: 'write' | 'read' | 'fill'): Op | null {
  const t = pickHandleTarget(w, g)
  if (!t) return null
  const h = t instanceof ViewM ? t.handle : t
  const a = h.arena
  const own = [...a.live.values()]
  let ptr: V
  let len: number
  if (own.length && g.chance(0.8)) {
    const l = g.pick(own)
    const req = Number(l.req)
    // Inside a remembered window, across or past the end, or empty at an edge.
    const spot = g.weighted<string>([
      [5, 'head'],
      [4, 'tail'],
      [2, 'across'],
      [a.shared && name !== 'read' ? 0 : 1, 'past'],
      [1, 'empty-end'],
      [1, 'empty-start'],
    ])
    let off: number
    if (spot === 'head') {
      off = g.int(Math.min(req, WINDOW))
      len = g.range(1, Math.min(req, WINDOW) - off)
    } else if (spot === 'tail') {
      const s = Math.max(0, req - WINDOW)
      off = s + g.int(req - s)
      len = g.range(1, req - off)
    } else if (spot === 'across') {
      off = Math.max(0, req - g.range(1, 16))
      len = req - off + g.range(1, 300)
    } else if (spot === 'past') {
      off = req + g.range(0, 512)
      len = g.range(1, 64)
    } else {
      off = spot === 'empty-end' ? req : 0
      len = 0
    }
    ptr = { ptr: l.id, off: String(off) }
  } else {
    ptr = genPtr(w, g, a)
    len = g.range(0, 64)
  }
  const streams = [...w.streams.values()].filter((s) => s.obj)
  const stream: V = g.weighted<V>([
    [8, UNDEF],
    [streams.length ? 3 : 0, streams.length ? { ref: g.pick(streams).id } : UNDEF],
    [1, anyWeird(g)],
  ])
  if (name === 'fill') {
    const byte = g.weighted<V>([
      [12, num(g.int(256))],
      [1, num(g.pick([256, -1, 1.5, Number.NaN]))],
      [1, anyWeird(g)],
    ])
    const length = g.weighted<V>([
      [10, g.chance(0.5) ? num(len) : big(BigInt(len))],
      [1, big(g.pick([2n ** 64n, 2n ** 64n + 1n, 2n ** 63n, -1n]))],
      [1, num(g.pick([-1, 1.5, Number.NaN, 2 ** 53]))],
      [1, anyWeird(g)],
    ])
    return { op: name, t: t.id, args: [ptr, byte, length, stream] }
  }
  const kinds: BufKind[] = ['u8', 'u8', 'u8-offset', 'dv', 'buffer', ...(len % 8 === 0 ? ['f64' as const] : [])]
  const bk: BufKind = g.chance(0.9) ? g.pick(kinds) : g.pick<BufKind>(['sab', 'detached', 'array'])
  const data: V = g.chance(0.97) ? { buf: bk, len, seed: g.u32() } : anyWeird(g)
  return { op: name, t: t.id, args: [ptr, data, stream] }
}

function genNamespace(w: World, g: Prng): Op {
  const which = g.pick(['env', 'session'])
  const name = g.pick(['CudaEP', 'CUDAExecutionProvider', 'cuda', 'Ép', 'ΣΑΣ', 'İx', 'a.b', ''])
  const prefix = which === 'env' ? `ep_factory.${name}.` : `ep.${name.toLowerCase()}.`
  const o: Record<string, V> = {}
  const n = g.range(0, 4)
  for (let i = 0; i < n; i++) {
    const k = g.pick([`${prefix}arena.max_mem`, `${prefix}arena.extend_strategy`, `${prefix}other`, `ep_factory.${name.toUpperCase()}.arena.max_mem`, `ep.${name}.arena.max_mem`, 'arena.max_mem', `${prefix}arena.`])
    o[k] = str(String(g.int(1000)))
  }
  let options: V = { o }
  if (g.chance(0.08)) options = { o: { ...o, [`${prefix}arena.x`]: num(1) } }
  if (g.chance(0.05)) options = anyWeird(g)
  const nameV = g.chance(0.95) ? str(name) : anyWeird(g)
  return { op: 'fn.namespace', c: g.int(w.copies.length), args: [options, nameV, str(which)] }
}

/** A small valid trace: allocations of small sizes on `streams` streams (0: none), frees of live ones. */
function genTrace(g: Prng, streams: number): import('../../ts/index').TraceInput[] {
  const out: import('../../ts/index').TraceInput[] = []
  const live: number[] = []
  let id = 0
  const n = g.range(0, 60)
  for (let i = 0; i < n; i++) {
    if (live.length && g.chance(0.45)) {
      out.push({ op: 'free', id: live.splice(g.int(live.length), 1)[0] })
    } else {
      id += 1
      live.push(id)
      const size = g.chance(0.05) ? 0 : g.logSize(1, 1 << 20)
      out.push({ op: 'alloc', id, size: g.chance(0.2) ? BigInt(size) : size, stream: streams ? g.range(0, streams) : 0 })
    }
  }
  return out
}

/**
 * A chunk handed from one stream to another: allocate on S and free, S records, T waits (or,
 * through U, a chain of waits), T allocates the same size and may take S's chunk. Queued as
 * ordinary operations; without the wait, T must not take it.
 */
function genHandoff(w: World, g: Prng): Op | null {
  const hs = [...w.handles.values()].filter((h) => h.obj && !h.released && h.arena.streamAware && !h.arena.shared)
  if (!hs.length) return null
  const h = g.pick(hs)
  const fit = liveStreams(w, h.copy).filter((s) => s.backend === h.arena.factory.backend && s.device === h.arena.device)
  if (fit.length < 2) return null
  const [S, T] = [g.pick(fit), g.pick(fit)]
  if (S === T) return null
  const size = num(g.pick([256 * g.range(1, 64), g.logSize(1 << 16, 1 << 21)]))
  const first = w.id('a')
  const ev = w.id('e')
  const ops: Op[] = [
    { op: 'allocOnStream', t: h.id, args: [size, { ref: S.id }], out: first },
    { op: 'free', t: h.id, args: [{ ptr: first, off: '0' }] },
    { op: 'stream.record', t: S.id, args: [], out: ev },
  ]
  const U = fit.find((x) => x !== S && x !== T)
  if (U && g.chance(0.3)) {
    const ev2 = w.id('e')
    ops.push({ op: 'stream.wait', t: U.id, args: [{ ref: ev }] }, { op: 'stream.record', t: U.id, args: [], out: ev2 }, { op: 'stream.wait', t: T.id, args: [{ ref: ev2 }] })
  } else if (g.chance(0.85)) {
    ops.push({ op: 'stream.wait', t: T.id, args: [{ ref: ev }] })
  }
  ops.push({ op: 'allocOnStream', t: h.id, args: [size, { ref: g.chance(0.8) ? T.id : S.id }], out: w.id('a') })
  w.queue.push(...ops.slice(1))
  return ops[0]
}

function genDrop(w: World, g: Prng): Op | null {
  const refs = [
    ...[...w.handles.values()].filter((h) => h.obj).map((h) => h.id),
    ...[...w.views.values()].filter((v) => v.obj).map((v) => v.id),
    ...[...w.streams.values()].filter((s) => s.obj).map((s) => s.id),
    ...[...w.events.values()].filter((e) => e.obj).map((e) => e.id),
  ]
  return refs.length ? { op: 'gc.drop', args: [{ ref: g.pick(refs) }] } : null
}

export type { AllocRec }
