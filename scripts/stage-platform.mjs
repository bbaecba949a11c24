#!/usr/bin/env node
// Copies one target's build into its platform package: the Node addon, the C library, the C
// header and the licenses. `npm run build` stages the host's; `npm run build:linux-arm64-gnu` stages arm64's.
//
//   node scripts/stage-platform.mjs [--target TRIPLE] [--out DIR]
//
// --target defaults to this machine's; --out defaults to npm/<platform>/ (with --out, the
// package.json and README.md are copied too, so DIR is a complete package to `npm pack`).
// Each binary is checked to be an ELF shared object for the target's machine, and the
// package's version to be the root's.
import { copyFileSync, existsSync, mkdirSync, openSync, readFileSync, readSync, closeSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..')
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'))

// Rust's names for a target → napi-rs's platform names, and the ELF e_machine of each arch.
const ARCH = { x86_64: { node: 'x64', elf: 62 }, aarch64: { node: 'arm64', elf: 183 } }
const HOST = { x64: 'x86_64-unknown-linux-gnu', arm64: 'aarch64-unknown-linux-gnu' }

function fail(message) {
  console.error(`stage-platform: ${message}`)
  process.exit(1)
}

function args(argv) {
  const out = {}
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]
    if ((a === '--target' || a === '--out') && i + 1 < argv.length) out[a.slice(2)] = argv[++i]
    else fail(`unknown or incomplete argument ${JSON.stringify(a)}; usage: [--target TRIPLE] [--out DIR]`)
  }
  return out
}

/** `x86_64-unknown-linux-gnu` → `{ id: 'linux-x64-gnu', elf: 62 }`. */
function platformOf(triple) {
  const m = /^(\w+)-unknown-linux-(gnu|musl)$/.exec(triple)
  const arch = m && ARCH[m[1]]
  if (!arch) fail(`unsupported target ${triple}; napi.targets lists ${pkg.napi.targets.join(', ')}`)
  return { id: `linux-${arch.node}-${m[2]}`, elf: arch.elf }
}

function checkElf(file, machine) {
  const fd = openSync(file, 'r')
  const head = Buffer.alloc(20)
  readSync(fd, head, 0, 20, 0)
  closeSync(fd)
  const isElf = head.readUInt32BE(0) === 0x7f454c46
  const isSharedObject = head.readUInt16LE(16) === 3
  const found = head.readUInt16LE(18)
  if (!isElf || !isSharedObject || found !== machine) {
    fail(`${file} is not an ELF shared object for machine ${machine} (found ${isElf ? `type ${head.readUInt16LE(16)}, machine ${found}` : 'no ELF header'})`)
  }
}

const opts = args(process.argv.slice(2))
const triple = opts.target ?? HOST[process.arch]
if (!pkg.napi.targets.includes(triple)) fail(`${triple} is not in package.json napi.targets (${pkg.napi.targets.join(', ')})`)
const { id, elf } = platformOf(triple)
const template = join(root, 'npm', id)
const out = resolve(opts.out ?? template)
const manifest = JSON.parse(readFileSync(join(template, 'package.json'), 'utf8'))
if (manifest.version !== pkg.version) fail(`npm/${id}/package.json is version ${manifest.version}, the root ${pkg.version}: run npm version`)

const hostBuild = triple === HOST[process.arch]
const sources = {
  [manifest.main]: join(root, 'native', manifest.main),
  'lib/libcuda_arena.so': join(root, 'target', ...(hostBuild ? [] : [triple]), 'release', 'libcuda_arena.so'),
  'include/cuda_arena.h': join(root, 'bindings', 'c', 'include', 'cuda_arena.h'),
  'LICENSE-MIT': join(root, 'LICENSE-MIT'),
  'LICENSE-APACHE': join(root, 'LICENSE-APACHE'),
}
for (const file of manifest.files) {
  if (!(file in sources)) fail(`npm/${id}/package.json lists ${file}, which this script does not stage`)
}
for (const [name, from] of Object.entries(sources)) {
  if (!existsSync(from)) fail(`${from} is missing: build ${triple} first (npm run build${hostBuild ? '' : `:${id}`})`)
  if (name.endsWith('.node') || name.endsWith('.so')) checkElf(from, elf)
  mkdirSync(dirname(join(out, name)), { recursive: true })
  copyFileSync(from, join(out, name))
}
if (out !== template) {
  for (const f of ['package.json', 'README.md']) copyFileSync(join(template, f), join(out, f))
}
console.log(`staged ${triple} into ${out}`)
