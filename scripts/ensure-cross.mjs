#!/usr/bin/env node
// `npm run build:linux-arm64-gnu` runs this first: cross-building needs Rust's standard
// library for aarch64 (rustup) and Debian's cross gcc to link; the arm64 test also runs the
// C library under qemu-user. Installs what is missing where it can, else says what.
import { spawnSync } from 'node:child_process'
import { aptInstall, has } from './apt.mjs'

const TARGET = 'aarch64-unknown-linux-gnu'
const TAG = 'ensure-cross'

const installed = spawnSync('rustup', ['target', 'list', '--installed'], { encoding: 'utf8' })
if (installed.status !== 0) {
  console.error(`${TAG}: rustup is needed to add the ${TARGET} target: ${installed.stderr || installed.error}`)
  process.exit(1)
}
if (!installed.stdout.split('\n').includes(TARGET)) {
  console.error(`${TAG}: adding Rust's ${TARGET} target`)
  if (spawnSync('rustup', ['target', 'add', TARGET], { stdio: 'inherit' }).status !== 0) process.exit(1)
}
const missing = [
  ['aarch64-linux-gnu-gcc', 'gcc-aarch64-linux-gnu'],
  ['aarch64-linux-gnu-gcc', 'libc6-dev-arm64-cross'],
  ['qemu-aarch64', 'qemu-user'],
].filter(([command]) => !has(command))
if (missing.length > 0 && !aptInstall([...new Set(missing.map(([, pkg]) => pkg))], `to cross-build and run ${TARGET}`, TAG)) process.exit(1)
