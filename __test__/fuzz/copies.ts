/** Copies of the package in one thread, as a cleared `require` cache or two installed versions give. */
import { join } from 'node:path'
import type { Index } from './model'

const root = join(__dirname, '..', '..')
const owned = [join(root, 'ts') + '/', join(root, 'native') + '/']

/** A fresh copy of the package's JS (and of the addon's exports): its own fast path, its own classes. */
export function freshCopy(): Index {
  for (const k of Object.keys(require.cache)) {
    if (owned.some((p) => k.startsWith(p))) delete require.cache[k]
  }
  return require('../../ts/index') as Index
}

/** This copy and, for `n` of 2 or more, fresh ones. */
export function copies(n: number): Index[] {
  const first = require('../../ts/index') as Index
  const out = [first]
  for (let i = 1; i < n; i++) out.push(freshCopy())
  return out
}
