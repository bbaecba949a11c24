import type { ExecutionContext } from 'ava'
import { AllocatorFactory, type OrtAllocator } from '../ts/index'

let n = 0
/** A factory with a name no other test uses. */
export function factory(backend: 'host' | 'virtual' = 'host', devices: number | { totalMemory?: bigint; maxAllocation?: bigint }[] = 1, warnings?: string[]): AllocatorFactory {
  n += 1
  return new AllocatorFactory({
    name: `test-${process.pid}-${n}`,
    backend,
    devices,
    logger: (level, message) => {
      if (level === 'warning') warnings?.push(message)
    },
  })
}

/** Asserts `fn` throws an error with `code`. */
export function throwsCode(t: ExecutionContext, fn: () => unknown, code: string, what?: string): void {
  const err = t.throws(fn, undefined, what)
  t.is((err as { code?: string } | undefined)?.code, code, what)
}

/** Everything observable about an allocator. */
export function snapshot(a: OrtAllocator): unknown {
  return { stats: a.getStats(), log: a.memoryLog() }
}
