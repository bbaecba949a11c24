#!/usr/bin/env node
// The root package's optionalDependencies on its platform packages exist only in what is
// packed and published: npm's prepack adds them (one per napi.targets entry, at the root's
// version) and postpack takes them out again. They are not committed because `npm ci` needs
// every dependency in package-lock.json, and a version's platform packages are not on the
// registry until it is published.
//
//   node scripts/publish-manifest.mjs add|remove
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { pkg, platformOf, root } from './targets.mjs'

const action = process.argv[2]
const names = pkg.napi.targets.map((t) => {
  const p = platformOf(t)
  if (!p) {
    console.error(`publish-manifest: napi.targets has ${t}, which has no platform package name`)
    process.exit(1)
  }
  return p.name
})
if (action === 'add') {
  pkg.optionalDependencies = { ...pkg.optionalDependencies, ...Object.fromEntries(names.map((n) => [n, pkg.version])) }
} else if (action === 'remove') {
  for (const n of names) delete pkg.optionalDependencies?.[n]
  if (pkg.optionalDependencies && Object.keys(pkg.optionalDependencies).length === 0) delete pkg.optionalDependencies
} else {
  console.error('publish-manifest: usage: add|remove')
  process.exit(1)
}
writeFileSync(join(root, 'package.json'), JSON.stringify(pkg, null, 2) + '\n')
