#!/usr/bin/env node
// `npm test` runs this first (pretest). The HTML test drives Debian's chromium headless, and
// the platform-package test runs the arm64 C library under qemu-user. When either is missing
// and we are root with apt-get (the project's machines and CI), install it; otherwise say how,
// and let the test report it.
import { existsSync } from 'node:fs'
import { aptInstall, has } from './apt.mjs'

const missing = [
  ['chromium', !existsSync('/usr/bin/chromium'), 'the HTML test'],
  ['qemu-user', !has('qemu-aarch64'), 'the arm64 package test'],
].filter(([, absent]) => absent)
if (missing.length > 0 && !aptInstall(missing.map(([pkg]) => pkg), `for ${missing.map(([, , why]) => why).join(' and ')}`, 'pretest')) {
  console.error('pretest: the tests that need them will say so')
}
