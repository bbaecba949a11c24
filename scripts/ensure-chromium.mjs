#!/usr/bin/env node
// `npm test` runs this first (pretest): the HTML test drives Debian's chromium headless. When
// it is missing and we are root with apt-get (the project's machines and CI), install it;
// otherwise say how, and let the test report it.
import { existsSync } from 'node:fs'
import { spawnSync } from 'node:child_process'

const CHROMIUM = '/usr/bin/chromium'
if (!existsSync(CHROMIUM)) {
  const root = typeof process.getuid === 'function' && process.getuid() === 0
  const apt = spawnSync('sh', ['-c', 'command -v apt-get'], { encoding: 'utf8' }).status === 0
  if (root && apt) {
    console.error(`pretest: ${CHROMIUM} is missing; installing Debian's chromium for the HTML test`)
    const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' }
    const update = spawnSync('apt-get', ['update', '-qq'], { stdio: 'inherit', env })
    const install = update.status === 0 ? spawnSync('apt-get', ['install', '-y', '-qq', 'chromium'], { stdio: 'inherit', env }) : update
    if (install.status !== 0) console.error('pretest: installing chromium failed; the HTML test will say so')
  } else {
    console.error(`pretest: ${CHROMIUM} is missing; install Debian's chromium (apt-get install chromium) for the HTML test`)
  }
}
