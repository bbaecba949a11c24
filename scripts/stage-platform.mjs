#!/usr/bin/env node
// Copies one target's build into its platform package: the Node addon, the C library, the C
// header and the licenses. scripts/build-target.mjs builds a target and runs this.
//
//   node scripts/stage-platform.mjs [--target TRIPLE] [--out DIR]
//
// --target defaults to this machine's; --out defaults to npm/<platform>/ (with --out, the
// package.json and README.md are copied too, so DIR is a complete package to `npm pack`).
// Each binary is checked to be an ELF shared object for the target's machine that needs no
// glibc newer than 2.17, and the package's version to be the root's.
import { closeSync, copyFileSync, existsSync, mkdirSync, openSync, readFileSync, readSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { spawnSync } from 'node:child_process'
import { hostTriple, MAX_GLIBC, pkg, platformOf, root } from './targets.mjs'

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

/** Fails when `file` needs a glibc newer than MAX_GLIBC (its GLIBC_x.y symbol versions). */
function checkGlibc(file) {
  const r = spawnSync('readelf', ['-V', '-W', file], { encoding: 'utf8' })
  if (r.status !== 0) fail(`readelf -V ${file}: ${r.stderr || r.error}`)
  const newer = (v) => {
    const [a, b] = v.split('.').map(Number)
    const [x, y] = MAX_GLIBC.split('.').map(Number)
    return a > x || (a === x && b > y)
  }
  const needed = [...new Set([...r.stdout.matchAll(/GLIBC_(\d+\.\d+)/g)].map((m) => m[1]))].filter(newer)
  if (needed.length > 0) fail(`${file} needs glibc ${needed.join(', ')}, newer than ${MAX_GLIBC}: build it with scripts/build-target.mjs`)
}

const opts = args(process.argv.slice(2))
const triple = opts.target ?? hostTriple
if (!pkg.napi.targets.includes(triple)) fail(`${triple} is not in package.json napi.targets (${pkg.napi.targets.join(', ')})`)
const { id, elf } = platformOf(triple)
const template = join(root, 'npm', id)
const out = resolve(opts.out ?? template)
const manifest = JSON.parse(readFileSync(join(template, 'package.json'), 'utf8'))
if (manifest.version !== pkg.version) fail(`npm/${id}/package.json is version ${manifest.version}, the root ${pkg.version}: run npm version`)

const sources = {
  [manifest.main]: join(root, 'native', manifest.main),
  'lib/libcuda_arena.so': join(root, 'target', triple, 'release', 'libcuda_arena.so'),
  'include/cuda_arena.h': join(root, 'bindings', 'c', 'include', 'cuda_arena.h'),
  'LICENSE-MIT': join(root, 'LICENSE-MIT'),
  'LICENSE-APACHE': join(root, 'LICENSE-APACHE'),
}
for (const file of manifest.files) {
  if (!(file in sources)) fail(`npm/${id}/package.json lists ${file}, which this script does not stage`)
}
for (const [name, from] of Object.entries(sources)) {
  if (!existsSync(from)) fail(`${from} is missing: build it first (node scripts/build-target.mjs ${triple})`)
  if (name.endsWith('.node') || name.endsWith('.so')) {
    checkElf(from, elf)
    checkGlibc(from)
  }
  mkdirSync(dirname(join(out, name)), { recursive: true })
  copyFileSync(from, join(out, name))
}
if (out !== template) {
  for (const f of ['package.json', 'README.md']) copyFileSync(join(template, f), join(out, f))
}
console.log(`staged ${triple} into ${out}`)
