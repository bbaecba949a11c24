#!/usr/bin/env node
// Builds one target's binaries, as they are published, and stages its platform package:
// the Node addon (napi build) and the C library, linked with napi-rs's cross toolchain for
// that target, so they need nothing newer than glibc 2.17 (scripts/targets.mjs).
//
//   node scripts/build-target.mjs [TRIPLE]      (default: this machine's)
//
// The toolchain (an npm package, about 45 MB) is fetched once into target/cross-toolchain/
// (target/cross-toolchain/<triple> links to it);
// another target's Rust standard library is added with rustup. The host build also writes
// the generated loader (native/index.js, index.d.ts).
import { spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, readdirSync, renameSync, rmSync, symlinkSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { hostTriple, pkg, root, TOOLCHAINS } from './targets.mjs'

const TAG = 'build-target'
const triple = process.argv[2] ?? hostTriple

function fail(message) {
  console.error(`${TAG}: ${message}`)
  process.exit(1)
}

function run(cmd, args, env = {}, cwd = root) {
  const r = spawnSync(cmd, args, { cwd, stdio: 'inherit', env: { ...process.env, ...env } })
  if (r.status !== 0) fail(`${cmd} ${args.join(' ')} failed (${r.status ?? r.error})`)
}

if (!pkg.napi.targets.includes(triple)) fail(`${triple} is not in package.json napi.targets (${pkg.napi.targets.join(', ')})`)

// Rust's standard library for the target.
const installed = spawnSync('rustup', ['target', 'list', '--installed'], { encoding: 'utf8' })
if (installed.status !== 0) fail(`rustup is needed to check the ${triple} target: ${installed.stderr || installed.error}`)
if (!installed.stdout.split('\n').includes(triple)) run('rustup', ['target', 'add', triple])

// The cross toolchain: target/cross-toolchain/<package@version>/bin/<triple>-gcc.
const spec = TOOLCHAINS[process.arch]?.[triple]
if (!spec) fail(`no cross toolchain is known for building ${triple} on ${process.arch}`)
const dir = join(root, 'target', 'cross-toolchain', spec.replace('@napi-rs/', '').replace('@', '-'))
const gcc = join(dir, 'bin', `${triple}-gcc`)
if (!existsSync(gcc)) {
  console.error(`${TAG}: fetching the ${triple} toolchain (${spec})`)
  const tmp = mkdtempSync(join(tmpdir(), 'cuda-arena-toolchain-'))
  run('npm', ['pack', spec, '--pack-destination', tmp], { npm_config_update_notifier: 'false' }, tmp)
  const tgz = readdirSync(tmp).find((f) => f.endsWith('.tgz'))
  if (!tgz) fail(`npm pack ${spec} wrote no tarball`)
  run('tar', ['xzf', join(tmp, tgz), '-C', tmp])
  const xz = readdirSync(join(tmp, 'package')).find((f) => f.endsWith('.tar.xz'))
  if (!xz) fail(`${spec} holds no .tar.xz toolchain`)
  const partial = `${dir}.partial`
  rmSync(partial, { recursive: true, force: true })
  mkdirSync(partial, { recursive: true })
  run('tar', ['xJf', join(tmp, 'package', xz), '-C', partial])
  rmSync(tmp, { recursive: true, force: true })
  if (!existsSync(join(partial, 'bin', `${triple}-gcc`))) fail(`${spec} has no bin/${triple}-gcc`)
  renameSync(partial, dir)
}
// target/cross-toolchain/<triple> names the one in use (the tests compile and run C with it).
const current = join(root, 'target', 'cross-toolchain', triple)
rmSync(current, { force: true })
symlinkSync(dir, current)

const env = { [`CARGO_TARGET_${triple.toUpperCase().replaceAll('-', '_')}_LINKER`]: gcc }
const loader = triple === hostTriple ? ['--js', 'index.js'] : ['--no-js']
run('npx', ['napi', 'build', '--platform', '--release', '--manifest-path', 'bindings/node/Cargo.toml', '--output-dir', 'native', '--target', triple, ...loader, '--dts', 'index.d.ts'], env)
run('cargo', ['build', '--release', '--locked', '-p', 'cuda-arena-c', '--target', triple], env)
run(process.execPath, [join(root, 'scripts', 'stage-platform.mjs'), '--target', triple])
