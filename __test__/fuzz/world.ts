/**
 * A fuzz run's state: the package copies, every object the run made (by id), the model of each,
 * and the invariant checks that read the public API and compare it with the model.
 */
import { isDeepStrictEqual } from 'node:util'
import type { AllocatorStats, MemoryLog, OrtAllocator } from '../../ts/index'
import {
  type AllocRec,
  ArenaM,
  EventM,
  FactoryM,
  FactoryRef,
  HandleM,
  type Index,
  type Live,
  StreamM,
  ViewM,
  WINDOW,
} from './model'

/** A broken promise: which check, and what was seen. */
export class FuzzFailure extends Error {
  constructor(
    readonly check: string,
    message: string,
  ) {
    super(`${check}: ${message}`)
  }
}

export function fail(check: string, message: string): never {
  throw new FuzzFailure(check, message)
}

const STAT_KEYS: [keyof AllocatorStats, string][] = [
  ['limit', 'Limit'],
  ['inUse', 'InUse'],
  ['totalAllocated', 'TotalAllocated'],
  ['maxInUse', 'MaxInUse'],
  ['numAllocs', 'NumAllocs'],
  ['numReserves', 'NumReserves'],
  ['numArenaExtensions', 'NumArenaExtensions'],
  ['numArenaShrinkages', 'NumArenaShrinkages'],
  ['maxAllocSize', 'MaxAllocSize'],
  ['requestedInUse', 'RequestedInUse'],
  ['reservedBytes', 'ReservedBytes'],
]

const show = (v: unknown): string => JSON.stringify(v, (_, x: unknown) => (typeof x === 'bigint' ? `${x}n` : x))

/** Worker runs: which devices of the shared factory are whose. */
export interface SharedSpec {
  /** The shared factory's name and devices (every thread gives the same). */
  name: string
  devices: { totalMemory: bigint; maxAllocation?: bigint }[]
  /** Devices every thread uses. */
  sharedDevices: number[]
  /** Devices only this thread uses. */
  ownDevices: number[]
}

export class World {
  readonly factoryModels = new Map<string, FactoryM>()
  readonly factories = new Map<string, FactoryRef>()
  /**
   * Each factory object's device counters as last read, by device. Keyed by the object, not
   * the name: a factory made again under a name no one holds any more starts from zero.
   */
  readonly deviceCounters = new WeakMap<object, Map<number, bigint[]>>()
  readonly handles = new Map<string, HandleM>()
  readonly views = new Map<string, ViewM>()
  readonly streams = new Map<string, StreamM>()
  readonly events = new Map<string, EventM>()
  readonly allocs = new Map<string, AllocRec>()
  /** Operations a scenario queued, run before any new one is generated. */
  readonly queue: import('./ops').Op[] = []
  /** The last allocations made, newest last (stale pointers come from here). */
  readonly recentAllocs: string[] = []
  /** Every stream id handed out: ids never repeat. */
  readonly streamIds = new Set<bigint>()
  /** Objects dropped without a release: released when the collector gets to them. */
  readonly pendingHandles: HandleM[] = []
  readonly pendingStreams: StreamM[] = []
  #next = 0
  /** Calls made on the API, the operations' own and the checks'. */
  apiCalls = 0
  /** Generate the cases of open findings too (in files this fuzzer's owner does not fix). */
  includeOpen = false
  /** Keys the current call runs with on `Object.prototype`. */
  pollution: [string, unknown][] | null = null

  constructor(
    readonly copies: Index[],
    readonly backend: 'host' | 'virtual',
    /** Unique per run: factory names start with it. */
    readonly tag: string,
    readonly shared: SharedSpec | null,
  ) {}

  id(prefix: string): string {
    this.#next += 1
    return `${prefix}${this.#next}`
  }

  /** Allocators not yet released by all their users. */
  arenas(): ArenaM[] {
    const out: ArenaM[] = []
    for (const f of this.factoryModels.values()) for (const a of f.arenas) out.push(a)
    return out
  }

  /** Allocators some object of this run still reaches (the others may be retired by a finalizer at any time). */
  reachable(): ArenaM[] {
    return this.arenas().filter((a) => this.reader(a) !== null)
  }

  /** The full config of no options, as `parseArenaConfig` gives it. */
  defaults(): Record<string, string> {
    this.#defaults ??= { ...this.copies[0].parseArenaConfig({}) }
    return this.#defaults
  }
  #defaults: Record<string, string> | undefined

  /** A JS object of `arena` to read it through (`null` while none is reachable). */
  reader(arena: ArenaM): OrtAllocator | null {
    for (const h of arena.handles) if (h.obj) return h.obj
    return null
  }

  /** A JS factory object of `f`. */
  factoryObj(f: FactoryM): FactoryRef | null {
    for (const r of this.factories.values()) if (r.model === f) return r
    return null
  }

  /** Raw bytes held on `ledger` of `f` by the allocators this thread knows of (`null`: not predictable). */
  outstanding(f: FactoryM, ledger: string): bigint | null {
    let sum = 0n
    for (const a of f.arenas) {
      if (a.ledger !== ledger) continue
      // An allocator no object of this run reaches any more may be retired by its finalizer now.
      if (a.shared || a.last === null || !this.reader(a)) return null
      sum += a.last.totalAllocated
    }
    return sum
  }

  /** One user fewer of `h`'s allocator; the last one retires it and every allocation in it. */
  releaseHandle(h: HandleM): void {
    h.released = true
    const a = h.arena
    a.handles.delete(h)
    a.users -= 1
    if (a.users > 0) return
    a.retired = true
    a.live.clear()
    a.factory.arenas.delete(a)
    for (const [k, v] of a.factory.current) if (v === a) a.factory.current.delete(k)
  }

  /** A stream released: its chunks are reset in every arena (their logs change). */
  releaseStream(s: StreamM): void {
    s.released = true
    for (const a of this.arenas()) {
      a.log = null
      forgetStream(a, s.nativeId)
    }
  }

  /** Live stream ids: the only ones a chunk may still be tagged with. */
  liveStreamIds(): Set<bigint> {
    const ids = new Set<bigint>()
    for (const s of this.streams.values()) if (!s.released) ids.add(s.nativeId)
    return ids
  }

  /**
   * After every call: each allocator's stats are what the model says (exact ones), the ones no
   * call touched are as they were, and each device's raw bytes are what its allocators hold.
   * `touched`: allocators the call changed; `oom`: the allocator whose allocation ran out of
   * memory (it may have released wholly free regions first, DESIGN decision 7).
   */
  checkStats(touched: ReadonlySet<ArenaM>, oom: ArenaM | null): void {
    for (const a of this.arenas()) {
      const r = this.reader(a)
      if (!r) continue
      let s: AllocatorStats
      try {
        this.apiCalls += 1
        s = r.getStats()
      } catch (e) {
        fail('stats-readable', `getStats of live allocator ${a.id} threw ${String((e as { code?: string }).code)} ${(e as Error).message}`)
      }
      if (!a.shared) this.#checkStats(a, s, touched.has(a), a === oom)
      a.last = s
    }
    // Raw bytes move only with an allocator's: when none was touched (and none changed, just
    // checked), the devices are as they were. The full sweeps check them every time.
    if (touched.size > 0 || oom) this.checkDevices()
  }

  #checkStats(a: ArenaM, s: AllocatorStats, touched: boolean, oom: boolean): void {
    const want: Partial<AllocatorStats> = {
      inUse: a.inUse(),
      requestedInUse: a.requested(),
      reservedBytes: a.reserved(),
      numAllocs: a.numAllocs,
      numReserves: a.numReserves,
      limit: a.limit(),
    }
    for (const [k, v] of Object.entries(want) as [keyof AllocatorStats, bigint][]) {
      if (s[k] !== v) fail('stats-model', `${a.id} (${a.kind}) ${k} is ${s[k]}, the live allocations say ${v}; stats ${show(s)}`)
    }
    if (s.maxInUse < s.inUse) fail('stats-consistent', `${a.id} maxInUse ${s.maxInUse} < inUse ${s.inUse}`)
    if (s.totalAllocated < s.inUse) fail('stats-consistent', `${a.id} totalAllocated ${s.totalAllocated} < inUse ${s.inUse}`)
    if (a.kind === 'plain' && s.totalAllocated !== s.inUse) fail('stats-consistent', `${a.id} (plain) totalAllocated ${s.totalAllocated} != inUse ${s.inUse}`)
    const p = a.last
    if (!p) return
    if (touched) {
      for (const k of ['maxInUse', 'maxAllocSize', 'numArenaShrinkages'] as const) {
        if (s[k] < p[k]) fail('stats-monotonic', `${a.id} ${k} went down from ${p[k]} to ${s[k]}`)
      }
      return
    }
    if (oom) {
      // Decision 7: wholly free regions may have gone back, nothing else.
      const gone = p.numArenaExtensions - s.numArenaExtensions
      const same = { ...s, totalAllocated: p.totalAllocated, numArenaExtensions: p.numArenaExtensions, numArenaShrinkages: p.numArenaShrinkages }
      if (!isDeepStrictEqual(same, p) || gone < 0n || s.numArenaShrinkages - p.numArenaShrinkages !== gone || s.totalAllocated > p.totalAllocated) {
        fail('failed-call-changes-nothing', `${a.id} out of memory changed more than free regions: before ${show(p)} after ${show(s)}`)
      }
      return
    }
    if (!isDeepStrictEqual(s, p)) fail('untouched-unchanged', `${a.id} (${a.kind}) changed though the call did not touch it: before ${show(p)} after ${show(s)}`)
  }

  /** Each exact device's raw bytes are what this thread's allocators on it hold, within its total. */
  checkDevices(): void {
    for (const f of this.factoryModels.values()) {
      const ref = this.factoryObj(f)
      if (!ref) continue
      f.devices.forEach((d, i) => {
        this.apiCalls += 1
        const ds = ref.obj.deviceStats(i)
        if (ds.rawBytesOutstanding > d.total) fail('device-within-total', `${f.name} device ${i} holds ${ds.rawBytesOutstanding} of ${d.total}`)
        if (ds.total !== d.total || ds.free !== d.total - ds.rawBytesOutstanding) {
          fail('device-stats', `${f.name} device ${i}: total ${ds.total} free ${ds.free} outstanding ${ds.rawBytesOutstanding}, limit ${d.total}`)
        }
        // Counters of calls never go down, whoever else uses the device.
        const now = [ds.rawAllocs, ds.rawFrees, ds.rawFailures, ds.deviceWaits, ds.streamWaits]
        let seen = this.deviceCounters.get(ref.obj)
        if (!seen) this.deviceCounters.set(ref.obj, (seen = new Map()))
        const before = seen.get(i)
        if (before && now.some((v, k) => v < before[k])) {
          fail('device-counters-monotonic', `${f.name} device ${i}: ${before.join('/')} then ${now.join('/')}`)
        }
        seen.set(i, now)
        if (!f.exactDevice(i)) return
        const held = this.outstanding(f, `d${i}`)
        if (held !== null && held !== ds.rawBytesOutstanding) {
          const who = [...f.arenas].filter((a) => a.ledger === `d${i}`).map((a) => `${a.id}(${a.kind}) ${a.last?.totalAllocated}`)
          fail('raw-bytes-conserved', `${f.name} device ${i}: raw bytes outstanding ${ds.rawBytesOutstanding}, its allocators hold ${held}: ${who.join(', ')}`)
        }
      })
    }
  }

  /** A failed call on `a` left its memory log as it was (free regions may go on out of memory). */
  checkLogUnchanged(a: ArenaM, before: MemoryLog, oom: boolean): void {
    const r = this.reader(a)
    if (!r || a.shared) return
    this.apiCalls += 1
    const after = r.memoryLog()
    if (!oom) {
      if (!isDeepStrictEqual(after, before)) fail('failed-call-changes-nothing', `${a.id} memory log changed by a failed call: ${logDiff(before, after)}`)
      return
    }
    const ids = new Set(after.regions.map((g) => g.id))
    for (const g of before.regions) {
      if (ids.has(g.id)) continue
      if (g.chunks.some((c) => c.inUse)) fail('failed-call-changes-nothing', `${a.id} out of memory released region ${g.id}, which had chunks in use`)
    }
    const kept = before.regions.filter((g) => ids.has(g.id))
    if (!isDeepStrictEqual(after.regions, kept) || !isDeepStrictEqual(after.reserves, before.reserves)) {
      fail('failed-call-changes-nothing', `${a.id} out of memory changed regions or reserves beyond releasing free ones`)
    }
  }

  /** Every live allocation in the process: none overlaps another, each is 256-byte aligned. */
  checkNoOverlap(): void {
    const all: [Live, ArenaM][] = []
    for (const a of this.reachable()) for (const l of a.live.values()) all.push([l, a])
    all.sort((x, y) => (x[0].addr < y[0].addr ? -1 : x[0].addr > y[0].addr ? 1 : 0))
    for (let i = 0; i < all.length; i++) {
      const [l, a] = all[i]
      if (l.addr % 256n !== 0n) fail('aligned', `${l.id} at ${l.addr} in ${a.id} is not 256-byte aligned`)
      if (i + 1 < all.length) {
        const [m, b] = all[i + 1]
        if (l.addr + l.size > m.addr) fail('no-overlap', `${l.id} [${l.addr}, +${l.size}) in ${a.id} overlaps ${m.id} at ${m.addr} in ${b.id}`)
      }
    }
  }

  /** Host memory: the bytes the model remembers for `l` read back unchanged. */
  checkBytes(a: ArenaM, l: Live, through: OrtAllocator, what: string): void {
    if (!l.bytes || l.bytes.size === 0) return
    const req = Number(l.req)
    for (const [start, end] of windows(req)) {
      const out = new Uint8Array(end - start)
      this.apiCalls += 1
      through.read(l.addr + BigInt(start), out)
      for (let i = start; i < end; i++) {
        const want = l.bytes.get(i)
        if (want !== undefined && out[i - start] !== want) {
          fail('read-back', `${l.id} in ${a.id} byte ${i} is ${out[i - start]}, was written ${want} (${what})`)
        }
      }
    }
  }

  /**
   * Every so often and at the end: each allocator's memory log agrees with its stats and with
   * the model (chunks tile regions, in-use chunks and reserves are the live allocations, held
   * bytes are regions plus reserves, no chunk tagged with a released stream), raw stats and
   * info agree, every live allocation answers its sizes and reads back, nothing overlaps.
   */
  fullCheck(): void {
    const streams = this.liveStreamIds()
    for (const a of this.arenas()) {
      const r = this.reader(a)
      if (!r) continue
      this.apiCalls += 4
      const log = r.memoryLog()
      const stats = r.getStats()
      const raw = r.getStatsRaw()
      const info = r.info()
      // Other threads change a shared allocator between any two reads: only what is this
      // thread's (its allocations) can be compared there.
      if (a.shared) {
        this.#checkShared(a, log, r)
        continue
      }
      if (!isDeepStrictEqual(log.stats, stats)) fail('log-stats', `${a.id} memoryLog().stats ${show(log.stats)} != getStats() ${show(stats)}`)
      for (const [k, rk] of STAT_KEYS) {
        if (raw[rk] !== stats[k].toString()) fail('raw-stats', `${a.id} getStatsRaw().${rk} is ${raw[rk]}, getStats().${k} is ${stats[k]}`)
      }
      if (Object.keys(raw).length !== STAT_KEYS.length) fail('raw-stats', `${a.id} getStatsRaw() has keys ${Object.keys(raw).join(',')}`)
      if (!isDeepStrictEqual(info, { name: a.memName, deviceId: a.memName === 'Cpu' ? 0 : a.device, type: a.type })) {
        fail('info', `${a.id} info() ${show(info)}, created as ${a.memName} ${a.device} ${a.type}`)
      }
      this.#checkLog(a, log, stats, streams)
      for (const l of a.live.values()) {
        this.apiCalls += 2
        const size = r.allocatedSize(l.addr)
        const req = r.requestedSize(l.addr)
        if (size !== l.size || req !== l.req) fail('sizes-stable', `${l.id} in ${a.id}: allocatedSize ${size} requestedSize ${req}, were ${l.size} ${l.req}`)
        this.checkBytes(a, l, r, 'full check')
      }
      a.log = log
    }
    this.checkNoOverlap()
    this.checkDevices()
  }

  #checkShared(a: ArenaM, log: MemoryLog, r: OrtAllocator): void {
    const shown = new Set<bigint>([...log.reserves.map((x) => x.addr), ...log.regions.flatMap((g) => g.chunks.filter((c) => c.inUse).map((c) => c.addr))])
    for (const l of a.live.values()) {
      if (!shown.has(l.addr)) fail('log-live', `shared ${a.id}: the memory log does not show ${l.id} at ${l.addr}`)
      this.apiCalls += 2
      const size = r.allocatedSize(l.addr)
      const req = r.requestedSize(l.addr)
      if (size !== l.size || req !== l.req) fail('sizes-stable', `${l.id} in shared ${a.id}: allocatedSize ${size} requestedSize ${req}, were ${l.size} ${l.req}`)
      this.checkBytes(a, l, r, 'full check')
    }
  }

  #checkLog(a: ArenaM, log: MemoryLog, stats: AllocatorStats, streams: Set<bigint>): void {
    const chunks = new Map<bigint, { size: bigint; req: bigint }>()
    if (a.isArena) {
      let held = 0n
      for (const g of log.regions) {
        held += g.size
        let at = g.base
        for (const c of g.chunks) {
          if (c.addr !== at) fail('log-tiles', `${a.id} region ${g.id}: chunk at ${c.addr}, expected ${at}`)
          if (c.addr % 256n !== 0n || c.size % 256n !== 0n || c.size === 0n) fail('log-tiles', `${a.id} chunk ${c.addr} size ${c.size} not whole 256-byte units`)
          at += c.size
          if (c.inUse) chunks.set(c.addr, { size: c.size, req: c.requestedSize })
          if (!a.shared && c.stream !== undefined && c.stream !== 0n && !streams.has(c.stream)) {
            fail('stream-reset', `${a.id} chunk ${c.addr} is still tagged with stream ${c.stream}, which was released`)
          }
        }
        if (at !== g.base + g.size) fail('log-tiles', `${a.id} region ${g.id} chunks end at ${at}, region ends at ${g.base + g.size}`)
      }
      for (const res of log.reserves) held += res.size
      if (held !== stats.totalAllocated) fail('log-held', `${a.id} regions and reserves hold ${held}, totalAllocated is ${stats.totalAllocated}`)
      if (BigInt(log.regions.length) !== stats.numArenaExtensions) fail('log-held', `${a.id} has ${log.regions.length} regions, numArenaExtensions ${stats.numArenaExtensions}`)
    }
    const reserves = new Map(log.reserves.map((r) => [r.addr, r.size]))
    for (const l of a.live.values()) {
      const inChunks = !(a.isArena && l.reserve) && a.isArena
      const got = inChunks ? chunks.get(l.addr) : reserves.has(l.addr) ? { size: reserves.get(l.addr)!, req: l.req } : undefined
      if (!got || got.size !== l.size || got.req !== l.req) fail('log-live', `${a.id} memory log does not show ${l.id} at ${l.addr} (${l.req} of ${l.size}): ${show(got)}`)
    }
    if (!a.shared) {
      const live = a.live.size
      const shown = a.isArena ? chunks.size + log.reserves.length : log.reserves.length
      if (shown !== live) fail('log-live', `${a.id} memory log shows ${shown} live allocations, the model has ${live}`)
    }
  }
}

/** The byte ranges of an allocation of `req` bytes the model remembers: its start and end. */
export function windows(req: number): [number, number][] {
  if (req <= 2 * WINDOW) return req === 0 ? [] : [[0, req]]
  return [
    [0, WINDOW],
    [req - WINDOW, req],
  ]
}

/** The first difference between two memory logs, as text. */
export function logDiff(before: MemoryLog, after: MemoryLog): string {
  if (!isDeepStrictEqual(before.stats, after.stats)) return `stats ${show(before.stats)} → ${show(after.stats)}`
  if (!isDeepStrictEqual(before.reserves, after.reserves)) return `reserves ${show(before.reserves)} → ${show(after.reserves)}`
  if (before.regions.length !== after.regions.length) return `${before.regions.length} regions → ${after.regions.length}`
  for (let i = 0; i < before.regions.length; i++) {
    const [x, y] = [before.regions[i], after.regions[i]]
    if (x.id !== y.id || x.base !== y.base || x.size !== y.size) return `region ${show({ ...x, chunks: undefined })} → ${show({ ...y, chunks: undefined })}`
    for (let j = 0; j < Math.max(x.chunks.length, y.chunks.length); j++) {
      if (!isDeepStrictEqual(x.chunks[j], y.chunks[j])) return `region ${x.id} chunk ${j}: ${show(x.chunks[j])} → ${show(y.chunks[j])}`
    }
  }
  return `bins ${show(before.bins)} → ${show(after.bins)}`
}

/** A pool's blocks used on stream `id` become anyone's (a stream released or reset there). */
export function forgetStream(a: ArenaM, id: bigint): void {
  if (a.kind !== 'pool') return
  for (const [addr, s] of a.cached) if (s === id) a.cached.set(addr, 0n)
  for (const l of a.live.values()) if (l.stream === id) l.stream = 0n
}
