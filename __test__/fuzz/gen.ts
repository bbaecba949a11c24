/**
 * Generating operations from the model's state: which method, on which object, with which
 * arguments (valid ones mostly, and values of every kind and range), and scenarios queued as
 * several operations.
 */
import { POWER_OF_TWO_KEYS, RAW_RANGES, TYPED } from './config-oracle'
import {
  type AllocRec,
  ArenaM,
  FactoryM,
  HandleM,
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
  EDGE_BIGINTS,
  EDGE_NUMBERS,
  NULL,
  num,
  str,
  UNDEF,
  type BufKind,
  type V,
  WEIRD_NAMES,
  WIDE_OFFSETS,
} from './values'
import { type World } from './world'
import type { Op } from './call'
import { WRONG_THIS } from './exec-api'


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
  if (POWER_OF_TWO_KEYS.has(key)) return g.pick(['0', String(lo), String(1n << BigInt(g.range(8, 30))), String(hi)])
  if (key === 'arena.vm_peak_headroom_percent' || key === 'arena.vm_churn_headroom_percent') return String(g.pick([0, 2, g.range(0, 1000), 1000]))
  if (hi <= 1n) return String(g.range(Number(lo), Number(hi)))
  return g.pick([String(lo), String(BigInt(g.logSize(1, 1 << 30))), String(hi)])
}

/**
 * `v` with the region arena named (`arena.use_virtual_memory=0` in its own form), for
 * allocators: this model is the region arena's, and the default device arena maps pages
 * (issue 25), which the Rust model and fuzz targets cover. A key the options already give (a bad
 * value) is kept; options that mix the forms still fail.
 */
function regionArena(v: V): V {
  // None, or a weird value, some of which parse as no options (`config` ops fuzz those).
  if (!('o' in v)) return { o: { useVirtualMemory: { bool: false } } }
  if (Object.keys(v.o).some((k) => k.includes('.'))) return { o: { 'arena.use_virtual_memory': str('0'), ...v.o } }
  return { o: { useVirtualMemory: { bool: false }, ...v.o } }
}

/**
 * Options: none, typed, raw, or invalid in one of many ways. `vm`: whether the virtual-memory
 * mode may be turned on (not for allocators, whose model is the region arena's).
 */
function genOptions(g: Prng, f: FactoryM | null, mempool = true, vm = true): V {
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
  const keys = RAW_KEYS.filter((k) => (mempool || k !== 'arena.use_cuda_mempool') && (vm || k !== 'arena.use_virtual_memory'))
  const n = g.range(1, 3)
  const chosen = [...new Set(Array.from({ length: n }, () => g.pick(keys)))]
  if (kind === 'raw' || (kind === 'badValue' && g.chance(0.5))) {
    const o: Record<string, V> = {}
    for (const k of chosen) o[k] = str(validRaw(g, k, f))
    if (g.chance(0.2)) o['session.other'] = str('x')
    if (kind === 'badValue') {
      const k = g.pick(RAW_KEYS)
      const [lo, hi] = RAW_RANGES[k]
      o[k] = str(g.pick([' 1', '1e9', '-1', '4096abc', '', String(hi + 1n), lo > 0n && !POWER_OF_TWO_KEYS.has(k) ? '0' : '-0', '0x10', '1.5', '１']))
      if (POWER_OF_TWO_KEYS.has(k) && g.chance(0.5)) o[k] = str(g.pick(['128', '768', String(lo + 1n), String(hi * 2n)]))
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
    else if (key === 'useCudaMempool' || key === 'useVirtualMemory') typed[key] = { bool: v === '1' }
    else typed[key] = BigInt(v) > BigInt(Number.MAX_SAFE_INTEGER) || g.chance(0.4) ? big(BigInt(v)) : num(Number(v))
  }
  if (kind === 'badValue') {
    // A boolean is valid for useVirtualMemory: where the mode may not be on, bad values go elsewhere.
    const key = g.pick(TYPED_KEYS.filter((k) => vm || k !== 'useVirtualMemory'))
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
      const args = [genInfo(g, fr.model), regionArena(genOptions(g, fr.model, true, false))]
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
