// The platforms cuda-arena ships prebuilt: package.json's napi.targets (Rust's names) and
// the npm platform package of each (napi-rs's names).
import { readFileSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

export const root = resolve(dirname(fileURLToPath(import.meta.url)), '..')
export const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'))

// Rust's architecture names → Node's, and the ELF e_machine of each.
const ARCH = { x86_64: { node: 'x64', elf: 62 }, aarch64: { node: 'arm64', elf: 183 } }

/** `x86_64-unknown-linux-gnu` → `{ id: 'linux-x64-gnu', elf: 62, name: 'cuda-arena-linux-x64-gnu' }`, or undefined. */
export function platformOf(triple) {
  const m = /^(\w+)-unknown-linux-(gnu|musl)$/.exec(triple)
  const arch = m && ARCH[m[1]]
  if (!arch) return undefined
  const id = `linux-${arch.node}-${m[2]}`
  return { id, elf: arch.elf, name: `${pkg.name}-${id}` }
}

/** The Rust target of this machine. */
export const hostTriple = { x64: 'x86_64-unknown-linux-gnu', arm64: 'aarch64-unknown-linux-gnu' }[process.arch]

/** The newest glibc a shipped binary may need: the release builds link against 2.17's. */
export const MAX_GLIBC = '2.17'

/**
 * napi-rs's cross toolchains (gcc with a glibc 2.17 sysroot, as npm packages), by the
 * machine building and the target. They make binaries that load on any glibc from 2.17.
 */
export const TOOLCHAINS = {
  x64: {
    'x86_64-unknown-linux-gnu': '@napi-rs/cross-toolchain-x64-target-x86_64@1.0.0',
    'aarch64-unknown-linux-gnu': '@napi-rs/cross-toolchain-x64-target-aarch64@1.0.3',
  },
}
