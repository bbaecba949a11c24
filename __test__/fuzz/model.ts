/**
 * The fuzzer's model: what the public API must show after every call, built from README.md
 * and DESIGN.md alone. Per factory (process-wide by name) its devices' limits and its shared
 * allocators; per allocator its users, its live allocations {address → requested size,
 * allocated size, bytes written}, and the counters the stats must equal; per handle whether
 * it was released; per stream whether it was released.
 *
 * An allocator on a device that other threads use too (worker runs) is `shared`: its stats
 * and the device's counters are not this thread's to predict, so only what holds per
 * allocation is checked there (read-back, sizes, no overlap, error codes).
 */
import type { AllocatorStats, MemoryLog, OrtAllocator, Stream, StreamEvent } from '../../ts/index'

export type Index = typeof import('../../ts/index')
export type Factory = InstanceType<Index['AllocatorFactory']>

/** Which allocator a create call gives (DESIGN "Memory infos and allocator kinds"). */
export type Kind = 'arena' | 'pinned' | 'cpu' | 'pool' | 'plain'
export type MemName = 'Cuda' | 'CudaPinned' | 'Cpu'

export const MAX_U64 = 2n ** 64n - 1n
export const DEFAULT_TOTAL = { host: 4n << 30n, virtual: 80n << 30n } as const
/** The arena's back-off (ORT's 0.9) stops below this many bytes (arena/bfc.rs). */
export const BACKOFF_MIN_BYTES = 8192n
/** Bytes of an allocation's start and end the model remembers and checks (host only). */
export const WINDOW = 128

/** One simulated device's limits. */
export interface DeviceM {
  total: bigint
  maxAlloc: bigint
}

/** A factory as the native side keeps it: one per name in the process. */
export class FactoryM {
  /** Allocators handed out and not yet released by all their users. */
  readonly arenas = new Set<ArenaM>()
  /** The current shared allocator per `kind:device`. */
  readonly current = new Map<string, ArenaM>()
  readonly cpu: DeviceM

  constructor(
    readonly name: string,
    readonly backend: 'host' | 'virtual',
    readonly devices: DeviceM[],
    /** `backend` and limits as text: another factory of this name must give the same. */
    readonly spec: string,
    /** Devices other threads allocate on too (worker runs); the rest are this thread's. */
    readonly sharedDevices: ReadonlySet<number>,
    /** Devices only other threads allocate on: this thread makes no allocator there. */
    readonly forbidden: ReadonlySet<number>,
  ) {
    this.cpu = { total: DEFAULT_TOTAL[backend], maxAlloc: MAX_U64 }
  }

  /** Whether device `d`'s raw counters are this thread's alone to predict. */
  exactDevice(d: number): boolean {
    return !this.sharedDevices.has(d) && !this.forbidden.has(d)
  }

  /** Whether an allocator of `memName` on device `d` is used by other threads too. */
  sharedAllocator(memName: MemName, d: number): boolean {
    return memName === 'Cpu' ? this.sharedDevices.size > 0 : this.sharedDevices.has(d)
  }
}

/** One live allocation. */
export interface Live {
  id: string
  addr: bigint
  req: bigint
  /** `allocatedSize` when it was made: it must not change while it lives. */
  size: bigint
  reserve: boolean
  /** The stream it was allocated on (its id; 0: none). */
  stream: bigint
  /** Bytes written at known offsets (host): what reads must give back. */
  bytes: Map<number, number> | null
}

/** An allocator (shared arena, memory pool, or a plain read-only one). */
export class ArenaM {
  readonly live = new Map<bigint, Live>()
  /** Handles not released yet (each one user). */
  readonly handles = new Set<HandleM>()
  users = 0
  retired = false
  numAllocs = 0n
  numReserves = 0n
  /** The stats as last read: what they must still be until something touches this allocator. */
  last: AllocatorStats | null = null
  /** The memory log as last read, while nothing touched it since. */
  log: MemoryLog | null = null
  /** Whether a chunk may carry a stream tag (an allocation on a stream was made). */
  streamTagged = false
  /** A memory pool's freed blocks, by address: the stream each was used on (0: none). */
  readonly cached = new Map<bigint, bigint>()

  constructor(
    readonly id: string,
    readonly factory: FactoryM,
    readonly kind: Kind,
    readonly memName: MemName,
    readonly device: number,
    readonly type: 'device' | 'readonly',
    /** The full config, as `parseArenaConfig` gives it. */
    readonly config: Record<string, string>,
    readonly shared: boolean,
  ) {}

  get streamAware(): boolean {
    return this.kind === 'arena' || this.kind === 'pool'
  }
  get canShrink(): boolean {
    return this.kind !== 'plain'
  }
  get isArena(): boolean {
    return this.kind === 'arena' || this.kind === 'pinned' || this.kind === 'cpu'
  }
  /** `arena.max_mem`, 0 for none. */
  get maxMem(): bigint {
    return this.isArena ? BigInt(this.config['arena.max_mem'] ?? '0') : 0n
  }
  get sameAsRequested(): boolean {
    return this.config['arena.extend_strategy'] === '1'
  }
  /** The raw device it draws on: device and pinned memory of a device share one (backend.rs). */
  get ledger(): string {
    return this.memName === 'Cpu' ? 'cpu' : `d${this.device}`
  }
  limits(): DeviceM {
    return this.memName === 'Cpu' ? this.factory.cpu : this.factory.devices[this.device]
  }
  inUse(): bigint {
    let s = 0n
    for (const l of this.live.values()) s += l.size
    return s
  }
  requested(): bigint {
    let s = 0n
    for (const l of this.live.values()) s += l.req
    return s
  }
  reserved(): bigint {
    let s = 0n
    for (const l of this.live.values()) if (l.reserve) s += l.req
    return s
  }
  /** The stats' `Limit`: `max_mem` (at most 2^63−1, an i64) or -1 for an arena, 0 for a pool, -1 for a plain one. */
  limit(): bigint {
    if (this.kind === 'pool') return 0n
    const m = this.maxMem
    if (m === 0n) return -1n
    return m > 2n ** 63n - 1n ? 2n ** 63n - 1n : m
  }
}

/** A JS allocator object: one user of an allocator. */
export class HandleM {
  released = false
  constructor(
    readonly id: string,
    readonly arena: ArenaM,
    readonly factory: FactoryM,
    readonly copy: number,
    public obj: OrtAllocator | null,
  ) {}
}

/** A `withStream` view: the handle's methods, `alloc` on `stream`. */
export class ViewM {
  constructor(
    readonly id: string,
    readonly handle: HandleM,
    readonly stream: StreamM,
    public obj: OrtAllocator | null,
  ) {}
}

export class StreamM {
  released = false
  /** The last event's sync id: each record must give a larger one. */
  lastSync = -1n
  /** This stream's sync id: events recorded so far. */
  sync = 0n
  /** What it has waited on, by stream id (through chains of events too): the largest sync id. */
  readonly knows = new Map<bigint, bigint>()
  constructor(
    readonly id: string,
    readonly backend: string,
    readonly device: number,
    readonly copy: number,
    /** The stream's `id` (what chunk logs show). */
    readonly nativeId: bigint,
    public obj: Stream | null,
  ) {}
}

export class EventM {
  constructor(
    readonly id: string,
    readonly stream: StreamM,
    readonly copy: number,
    public obj: StreamEvent | null,
    /** The sync ids it carries: its producer's at the event, and what the producer knew. */
    readonly carries: ReadonlyMap<bigint, bigint>,
  ) {}
}

/** A JS factory object (several may name one factory). */
export class FactoryRef {
  constructor(
    readonly id: string,
    readonly model: FactoryM,
    readonly copy: number,
    public obj: Factory,
    /** What its logger got. */
    readonly warnings: string[],
    readonly loggerThrows: boolean,
  ) {}
}

/** An allocation ever made, by id: live or not, its address stays usable as a stale pointer. */
export interface AllocRec {
  addr: bigint
  arena: ArenaM
  req: bigint
}

export function ceil256(n: bigint): bigint {
  return (n + 255n) & ~255n
}

/**
 * Whether an allocation of `size` (> 0) bytes on `arena` must fail, must succeed, or may do
 * either, from the limits alone: the device's `totalMemory` and `maxAllocation`, `max_mem`,
 * and the arena's growth rule (a region of at least the rounded size, backing off by 0.9 down
 * to 8 KiB). `outstanding` is the device's raw bytes held now (exact runs only).
 */
export function allocOutlook(arena: ArenaM, size: bigint, reserve: boolean, outstanding: bigint | null): 'fail' | 'ok' | 'either' {
  const lim = arena.limits()
  const cap = lim.maxAlloc < lim.total ? lim.maxAlloc : lim.total
  const headroom = outstanding === null ? null : min(lim.maxAlloc, lim.total - outstanding)
  if (arena.kind === 'plain') {
    if (size > cap) return 'fail'
    if (headroom === null) return 'either'
    return size <= headroom ? 'ok' : 'fail'
  }
  if (arena.kind === 'pool') {
    if (size > cap) return 'fail'
    return headroom !== null && size <= headroom ? 'ok' : 'either'
  }
  // A shared allocator may be another thread's, made with another config: only the device's
  // limits are known.
  if (arena.shared) return size > cap || (!reserve && ceil256(size) > MAX_U64) ? 'fail' : 'either'
  const maxMem = arena.maxMem
  const held = arena.last?.totalAllocated ?? 0n
  if (reserve) {
    if (size > cap || (maxMem > 0n && size > maxMem)) return 'fail'
    const budget = maxMem === 0n ? MAX_U64 : maxMem - held
    return headroom !== null && size <= headroom && size <= budget ? 'ok' : 'either'
  }
  const rounded = ceil256(size)
  if (rounded > MAX_U64) return 'fail'
  if (maxMem > 0n && rounded > maxMem) return 'fail'
  if (rounded > cap) return 'fail'
  if (headroom === null) return 'either'
  const available = maxMem === 0n ? MAX_U64 : (maxMem - held) & ~255n
  if (rounded > available) return 'either'
  if (arena.sameAsRequested) return rounded <= headroom ? 'ok' : 'either'
  // Power-of-two growth asks for a region of unknown size and backs off by 0.9 while the
  // smaller size stays at least the rounded one and 8 KiB: some step lands under the headroom.
  const need = rounded > BACKOFF_MIN_BYTES ? rounded : BACKOFF_MIN_BYTES
  return (headroom * 9n) / 10n - 512n >= need ? 'ok' : 'either'
}

function min(a: bigint, b: bigint): bigint {
  return a < b ? a : b
}
