import test from 'ava'
import { parseArenaConfig, type ArenaConfig } from '../ts/index'
import { factory, throwsCode } from './helpers'

// Issue 14: the virtual-memory mode from TypeScript, typed config and end to end on the
// `host` (real memory) and `virtual` (counted pages) backends.

const MIB = 1n << 20n

test('the typed virtual-memory fields give the raw arena.vm_* pairs', (t) => {
  const typed: ArenaConfig = {
    useVirtualMemory: true,
    vmPageSizeBytes: 1n << 22n,
    vmReserveBytes: 1 << 30,
    vmUnmapThresholdBytes: 0,
    vmPeakHeadroomPercent: 5,
    vmChurnHeadroomPercent: 0,
    vmMapUnitBytes: 0n,
  }
  const raw = parseArenaConfig(typed)
  t.is(raw['arena.use_virtual_memory'], '1')
  t.is(raw['arena.vm_page_size_bytes'], '4194304')
  t.is(raw['arena.vm_reserve_bytes'], '1073741824')
  t.is(raw['arena.vm_unmap_threshold_bytes'], '0')
  t.is(raw['arena.vm_peak_headroom_percent'], '5')
  t.is(raw['arena.vm_churn_headroom_percent'], '0')
  t.is(raw['arena.vm_map_unit_bytes'], '0')
  const defaults = parseArenaConfig({})
  t.is(defaults['arena.use_virtual_memory'], '1', 'the default device arena maps pages (issue 25)')
  t.is(defaults['arena.vm_peak_headroom_percent'], '2')
  t.is(defaults['arena.vm_churn_headroom_percent'], '30')
  t.is(defaults['arena.vm_map_unit_bytes'], '67108864')
  t.false('arena.vm_unmap_threshold_bytes' in defaults, 'no threshold unless given')
})

test('bad virtual-memory values are refused with a code', (t) => {
  throwsCode(t, () => parseArenaConfig({ useVirtualMemory: 1 as unknown as boolean }), 'ERR_ARENA_INVALID_ARGUMENT')
  throwsCode(t, () => parseArenaConfig({ vmPageSizeBytes: 3000 }), 'ERR_ARENA_INVALID_CONFIG')
  throwsCode(t, () => parseArenaConfig({ vmPeakHeadroomPercent: 1001 }), 'ERR_ARENA_INVALID_CONFIG')
  throwsCode(t, () => parseArenaConfig({ vmChurnHeadroomPercent: 1001 }), 'ERR_ARENA_INVALID_CONFIG')
  throwsCode(t, () => parseArenaConfig({ vmMapUnitBytes: 2n ** 62n + 1n }), 'ERR_ARENA_INVALID_CONFIG')
  throwsCode(t, () => parseArenaConfig({ 'arena.vm_unmap_threshold_bytes': '-1' }), 'ERR_ARENA_INVALID_CONFIG')
  const f = factory('virtual')
  // 64 KiB pages on a device that maps 2 MiB at a time.
  throwsCode(t, () => f.createAllocator({ name: 'Cuda' }, { useVirtualMemory: true, vmPageSizeBytes: 65536 }), 'ERR_ARENA_INVALID_CONFIG')
})

test('on virtual, the device arena holds whole 2 MiB pages and gives them all back', (t) => {
  const f = factory('virtual')
  const a = f.createAllocator({ name: 'Cuda' }, { useVirtualMemory: true })
  const small = a.alloc(1000)!
  t.is(a.getStats().totalAllocated, 2n * MIB, 'one page for a small request')
  const big = a.alloc(5n * MIB + 1n)!
  t.is(a.getStats().totalAllocated, 2n * MIB + 6n * MIB, 'the pages the large request touches')
  t.is(f.deviceStats(0).rawBytesOutstanding, a.getStats().totalAllocated)
  const log = a.memoryLog()
  t.is(log.regions.length, Number(a.getStats().numArenaExtensions), 'mapped extents are the regions')
  a.free(big)
  a.free(small)
  t.is(a.getStats().totalAllocated, 8n * MIB, 'free pages stay mapped for reuse')
  a.shrink!()
  t.is(a.getStats().totalAllocated, 0n, 'shrink unmaps every free page')
  t.is(a.memoryLog().regions.length, 0)
  f.releaseAllocator(a)
  t.is(f.deviceStats(0).rawBytesOutstanding, 0n)
})

test('deviceStats counts the waits for the device: an unmap of pages used on no stream is one', (t) => {
  const f = factory('virtual')
  const a = f.createAllocator({ name: 'Cuda' })
  t.is(f.deviceStats(0).deviceWaits, 0n)
  const p = a.alloc(8n * MIB)!
  a.free(p)
  t.is(f.deviceStats(0).deviceWaits, 0n, 'a free keeps its pages mapped: nothing to wait for')
  a.shrink!()
  t.is(a.getStats().totalAllocated, 0n)
  t.is(f.deviceStats(0).deviceWaits, 1n, 'work on no stream may use the pages: the unmap waited')
  a.shrink!()
  t.is(f.deviceStats(0).deviceWaits, 1n, 'nothing left to unmap')
  t.is(f.deviceStats(0).streamWaits, 0n, 'no stream had work to wait for')
  f.releaseAllocator(a)
})

test('on host, written bytes read back while the pages around them are unmapped', (t) => {
  const f = factory('host')
  const a = f.createAllocator({ name: 'Cuda' }, {
    useVirtualMemory: true,
    vmUnmapThresholdBytes: 0,
    vmReserveBytes: 256n * MIB,
  })
  const blocks: [bigint, Uint8Array][] = []
  for (let i = 0; i < 12; i += 1) {
    const n = 3000 + i * 300_000
    const p = a.alloc(n)!
    const data = new Uint8Array(n).map((_, k) => (k * 7 + i) & 0xff)
    a.write(p, data)
    blocks.push([p, data])
  }
  const held = a.getStats().totalAllocated
  for (let i = 1; i < blocks.length; i += 2) a.free(blocks[i][0])
  t.true(a.getStats().totalAllocated < held, 'free pages went back at once')
  t.true(a.getStats().numArenaShrinkages > 0n)
  for (let i = 0; i < blocks.length; i += 2) {
    const [p, data] = blocks[i]
    const back = new Uint8Array(data.length)
    a.read(p, back)
    // Buffer's compare: ava's deep equality takes seconds on arrays of megabytes.
    t.true(Buffer.from(back).equals(Buffer.from(data)), `block ${i} reads back what was written`)
  }
  const fresh = a.alloc(2n * MIB)!
  a.fill(fresh, 0xee, 2n * MIB)
  throwsCode(t, () => a.write(fresh + 2n * MIB, new Uint8Array(1)), 'ERR_ARENA_UNKNOWN_POINTER')
  for (let i = 0; i < blocks.length; i += 2) a.free(blocks[i][0])
  a.free(fresh)
  t.is(a.getStats().totalAllocated, 0n)
  f.releaseAllocator(a)
})

test('past the headroom a stream takes another stream\'s free chunk after a wait for the device, mapping nothing', (t) => {
  const f = factory('virtual')
  const a = f.createAllocator({ name: 'Cuda' }, { useVirtualMemory: true })
  const s = f.createStream(0)
  const u = f.createStream(0)
  const p = a.allocOnStream!(2n * MIB, s)!
  a.free(p)
  const held = a.getStats().totalAllocated
  // Mapping 2 MiB more would pass the 2 % headroom: unmapping s's page would wait for the
  // device anyway, so the arena waits and hands the chunk over instead.
  const q = a.allocOnStream!(2n * MIB, u)!
  t.is(q, p)
  t.is(a.getStats().totalAllocated, held, 'no pages mapped')
  t.is(a.getStats().numArenaShrinkages, 0n, 'none unmapped')
  a.free(q)
  s.release()
  u.release()
  f.releaseAllocator(a)
})

test('a stream and no stream taking turns on one buffer move no pages once warm', (t) => {
  // An allocation on no stream takes only memory of no stream; past the headroom it once
  // unmapped the stream's free page and mapped another, every turn (issue 25).
  const f = factory('virtual')
  const a = f.createAllocator({ name: 'Cuda' }, { useVirtualMemory: true })
  const s = f.createStream(0)
  const turn = (i: number): void => {
    const p = i % 2 === 0 ? a.allocOnStream!(64n * MIB, s)! : a.alloc(64n * MIB)!
    a.free(p)
  }
  for (let i = 0; i < 10; i++) turn(i)
  const before = a.getStats()
  for (let i = 10; i < 400; i++) turn(i)
  const after = a.getStats()
  t.is(after.numArenaShrinkages, before.numArenaShrinkages, 'none unmapped')
  t.true(after.totalAllocated <= 66n * MIB, `the buffer once: ${after.totalAllocated} bytes mapped`)
  s.release()
  f.releaseAllocator(a)
})

test('streams keep their rule in virtual-memory mode', (t) => {
  const f = factory('virtual')
  // Headroom for both chunks: no reason to wait for the device.
  const a = f.createAllocator({ name: 'Cuda' }, { useVirtualMemory: true, vmPeakHeadroomPercent: 100 })
  const s = f.createStream(0)
  const u = f.createStream(0)
  // Whole 2 MiB pages, so no free remainder of a page competes with s's chunk.
  const p = a.allocOnStream!(2n * MIB, s)!
  a.free(p)
  const q = a.allocOnStream!(2n * MIB, u)!
  t.not(q, p, 'u has not waited on s')
  u.wait(s.record())
  const r = a.allocOnStream!(2n * MIB, u)!
  t.is(r, p, 'after the wait u takes it')
  a.free(q)
  a.free(r)
  s.release()
  u.release()
  f.releaseAllocator(a)
})
