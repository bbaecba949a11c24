/**
 * OrtAllocator operations (and `withStream` views): allocations and frees, sizes, memory access,
 * stats and logs, shrink and stream resets, and the streams' reuse rules.
 */
import { isDeepStrictEqual } from 'node:util'
import type { OrtAllocator, Stream } from '../../ts/index'
import { allocOutlook, ArenaM, ceil256, HandleM, type Live, StreamM, ViewM } from './model'
import { classifyPtr, classifySize, patternBytes, showV, type V, viewBytes } from './values'
import { fail, forgetStream, windows, type World } from './world'
import {
  call,
  IA,
  modelOf,
  OOM,
  type Op,
  REL,
  refModel,
  resolve,
  type Result,
  showRef,
  skip,
  uniq,
  UP,
} from './call'

// ---------------------------------------------------------------- targets

interface Target {
  h: HandleM
  view: ViewM | null
  obj: OrtAllocator
  id: string
}

export function allocTarget(w: World, t: string | undefined): Target {
  const m = t === undefined ? undefined : refModel(w, t)
  if (m instanceof HandleM) return { h: m, view: null, obj: m.obj ?? skip(), id: m.id }
  if (m instanceof ViewM) return { h: m.handle, view: m, obj: m.obj ?? skip(), id: m.id }
  return skip()
}

/** Whether `v` is a live stream of copy `copy`, and how it fits an allocator of `a`. */
export function streamClass(w: World, v: V, copy: number, a: ArenaM | null): 'fit' | 'misfit' | 'released' | 'invalid' {
  const m = modelOf(w, v)
  if (!(m instanceof StreamM) || m.copy !== copy) return 'invalid'
  if (m.released) return 'released'
  if (a && (m.backend !== a.factory.backend || m.device !== (a.memName === 'Cpu' ? 0 : a.device))) return 'misfit'
  return 'fit'
}

/** Before a call that may fail on `a`: its memory log as it is, to compare after. */
export function logBefore(w: World, a: ArenaM, released: boolean): void {
  if (released || a.shared || a.log || w.pendingStreams.length > 0) return
  const r = w.reader(a)
  if (!r) return
  w.apiCalls += 1
  a.log = r.memoryLog()
}

export function afterFailure(w: World, a: ArenaM, released: boolean, code: string, r: Result): void {
  if (code === OOM && !released) r.oom = a
  if (!released && a.log && w.pendingStreams.length === 0) w.checkLogUnchanged(a, a.log, code === OOM)
  if (code === OOM) a.log = null
}

export function touch(a: ArenaM, r: Result): void {
  r.touched.add(a)
  a.log = null
}

/** The live allocation of `a` whose requested range holds `[addr, addr+len)`: 'yes', 'no' or 'either'. */
export function rangeInside(a: ArenaM, addr: bigint, len: bigint): { v: 'yes' | 'no' | 'either'; live?: Live } {
  // (`v` is changed by the caller for shared allocators.) A zero-length range at the very
  // end of an allocation is inside it, whatever follows.
  for (const l of a.live.values()) {
    if (addr >= l.addr && addr + len <= l.addr + l.req) return { v: 'yes', live: l }
  }
  return { v: 'no' }
}

// ---------------------------------------------------------------- allocations

export function recordAlloc(w: World, a: ArenaM, obj: OrtAllocator, id: string, p: unknown, req: bigint, reserve: boolean, r: Result): void {
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
export function sizeCodes(x: unknown): { codes: string[]; v: bigint | null } {
  const c = classifySize(x)
  if (c.kind === 'invalid') return { codes: [IA], v: null }
  if (c.kind === 'tooLarge') return { codes: [OOM], v: null }
  return { codes: [], v: c.v }
}

export function allocLike(w: World, op: Op, r: Result, kind: 'alloc' | 'reserve' | 'allocOnStream'): void {
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
export function checkPoolRule(w: World, a: ArenaM, obj: OrtAllocator, p: bigint, consumer: StreamM | null, what: string): void {
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
export function tagLog(w: World, a: ArenaM): import('../../ts/index').MemoryLog | null {
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
export function checkStreamRule(w: World, a: ArenaM, before: import('../../ts/index').MemoryLog, p: bigint, consumer: StreamM | null, what: string): void {
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

export function ptrCodes(x: unknown): { codes: string[]; addr: bigint | null; isNull: boolean } {
  const c = classifyPtr(x)
  if (c.kind === 'invalid') return { codes: [IA], addr: null, isNull: false }
  // A bigint that is no 64-bit address is no address of this allocator (either code reads right).
  if (c.kind === 'wide') return { codes: [UP, IA], addr: null, isNull: false }
  if (c.kind === 'null') return { codes: [], addr: 0n, isNull: true }
  return { codes: [], addr: c.v, isNull: false }
}

export function execFree(w: World, op: Op, r: Result): void {
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

export function execSizeQuery(w: World, op: Op, r: Result, which: 'allocatedSize' | 'requestedSize'): void {
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
export function execAccess(w: World, op: Op, r: Result, which: 'write' | 'read' | 'fill'): void {
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

export function execQuery(w: World, op: Op, r: Result): void {
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

export function execShrink(w: World, op: Op, r: Result): void {
  const t = allocTarget(w, op.t)
  const a = t.h.arena
  if ((t.obj.shrink !== undefined) !== a.canShrink) fail('method-presence', `${t.id} (${a.kind}) shrink present: ${t.obj.shrink !== undefined}`)
  if (!a.canShrink) return
  const rel = t.h.released
  const res = call(w, `${t.id}.shrink()`, rel ? [REL] : [], !rel, () => t.obj.shrink!())
  r.outcome = res.ok ? 'ok' : res.code
  if (res.ok) touch(a, r)
}

export function execReset(w: World, op: Op, r: Result): void {
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

export function execWithStream(w: World, op: Op, r: Result): void {
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

