#!/usr/bin/env node
// `npm test` runs this first (pretest): the HTML test drives Debian's chromium headless. When
// it is missing and we are root with apt-get (the project's machines and CI), install it;
// otherwise say how, and let the test report it.
import { existsSync } from 'node:fs'
import { aptInstall } from './apt.mjs'

const CHROMIUM = '/usr/bin/chromium'
if (!existsSync(CHROMIUM) && !aptInstall(['chromium'], 'for the HTML test', 'pretest')) {
  console.error('pretest: without chromium the HTML test will say so')
}
