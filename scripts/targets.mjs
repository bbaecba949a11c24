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
