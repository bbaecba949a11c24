/**
 * Operations on factories, streams and events, the exported functions (config, option
 * namespaces, traces, platform), methods called on the wrong object, and the lifetime
 * operations of garbage-collection runs.
 */
import { isDeepStrictEqual } from 'node:util'
import type { OrtAllocator, Stream } from '../../ts/index'
import { expectConfig, expectParsed } from './config-oracle'
import {
  allocOutlook,
  ArenaM,
  DEFAULT_TOTAL,
  type DeviceM,
  EventM,
  FactoryM,
  FactoryRef,
  HandleM,
  type Kind,
  MAX_U64,
  type MemName,
  StreamM,
  ViewM,
} from './model'
import { showV } from './values'
import { fail, type World } from './world'
import {
  call,
  IA,
  IC,
  modelOf,
  NO_CUDA,
  OOM,
  type Op,
  REL,
  refModel,
  resolve,
  type Result,
  showRef,
  skip,
  uniq,
  ownRecord,
  errText,
} from './call'
import { afterFailure, logBefore, touch } from './exec-allocator'

// ---------------------------------------------------------------- streams

export function execStream(w: World, op: Op, r: Result): void {
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
export function specOf(backend: string, devices: DeviceM[]): string {
  return `${backend}:${devices.map((d) => `${d.total}/${d.maxAlloc}`).join(',')}`
}

export function execNewFactory(w: World, op: Op, r: Result): void {
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
export function expectFactory(w: World, options: unknown): { codes: string[]; ok: boolean; spec?: { name: string; backend: string; devices: DeviceM[] } } {
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

export function factoryTarget(w: World, t: string | undefined): FactoryRef {
  const m = t === undefined ? undefined : refModel(w, t)
  return m instanceof FactoryRef ? m : skip()
}

/** A device id argument: its value when valid for `f`. */
export function deviceArg(x: unknown, f: FactoryM): { codes: string[]; d: number | null } {
  if (typeof x !== 'number' || !Number.isSafeInteger(x) || x < 0 || x > 0xffff_ffff) return { codes: [IA], d: null }
  if (x >= f.devices.length) return { codes: [IA], d: null }
  return { codes: [], d: x }
}

export function execFactory(w: World, op: Op, r: Result): void {
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

export const MEM_NAMES: MemName[] = ['Cuda', 'CudaPinned', 'Cpu']

/** What a create call's `info` argument is: its parts, or the invalid-argument code. */
export function infoArg(x: unknown): { name: MemName; deviceId: number; type: 'device' | 'readonly' } | null {
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

export function flagsArg(x: unknown): boolean | null {
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

export function execCreate(w: World, op: Op, r: Result, fr: FactoryRef, sharedCall: boolean): void {
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

export function execConfigFn(w: World, op: Op, r: Result): void {
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

export function execNamespace(w: World, op: Op, r: Result): void {
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

export function execMisc(w: World, op: Op, r: Result): void {
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
export const isInt = (v: unknown, lo: number, hi: number): boolean => typeof v === 'number' && Number.isSafeInteger(v) && v >= lo && v <= hi

/** What `mixedTrace(ops, options)` must do with these arguments: its options, or `null` for invalid. */
export function mixedArgs(ops: unknown, o: unknown): { minSize: number; maxSize: number; maxLive: number } | null {
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

export function execMixedTrace(w: World, op: Op, r: Result): void {
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

export function execReplay(w: World, op: Op, r: Result): void {
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
export function traceOptions(o: unknown): number | null {
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
export function traceValid(trace: unknown[], streams: number): boolean {
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

export function execPairNs(w: World, op: Op, r: Result): void {
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
export const WRONG_THIS: Record<string, 'allocator' | 'factory' | 'stream' | 'event'> = {
  alloc: 'allocator', free: 'allocator', reserve: 'allocator', info: 'allocator', getStats: 'allocator', getStatsRaw: 'allocator',
  memoryLog: 'allocator', withStream: 'allocator', allocatedSize: 'allocator', requestedSize: 'allocator', write: 'allocator',
  read: 'allocator', fill: 'allocator', createAllocator: 'factory', createSharedAllocator: 'factory', releaseAllocator: 'factory',
  deviceStats: 'factory', createStream: 'factory', 'get name': 'factory', 'get backend': 'factory', 'get deviceCount': 'factory',
  record: 'stream', wait: 'stream', synchronize: 'stream', release: 'stream', 'get id': 'stream', 'get deviceId': 'stream', 'get syncId': 'event',
}

/** A method taken off its object and called on something else: a coded error, nothing changes. */
export function execWrongThis(w: World, op: Op, r: Result): void {
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


// ---------------------------------------------------------------- lifetimes

/** Drops the run's references to an object (and to the views that hold it) without a release. */
export function execDrop(w: World, op: Op, r: Result): void {
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
export async function execCollect(w: World, op: Op, r: Result): Promise<void> {
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
