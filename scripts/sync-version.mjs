#!/usr/bin/env node
// One version for everything: the root package.json's. `npm version <patch|minor|major|X.Y.Z>`
// bumps it and runs this (the "version" script), which writes it into:
//   - package-lock.json (npm does too; checked here);
//   - every npm/<platform>/package.json;
//   - Cargo.toml ([workspace.package] and the crates' [workspace.dependencies]) and Cargo.lock;
//   - the C header's CUDA_ARENA_VERSION;
//   - the Python package's __version__ (python/cuda_arena/_version.py; its wheels take it).
//
//   node scripts/sync-version.mjs [--check] [--git-add]
//
// --check changes nothing and lists every place that differs (exit 1 if any).
// --git-add stages the files it changed, so `npm version`'s commit has them.
import { execFileSync } from 'node:child_process'
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..')
const argv = process.argv.slice(2)
for (const a of argv) {
  if (a !== '--check' && a !== '--git-add') {
    console.error(`sync-version: unknown argument ${JSON.stringify(a)}; usage: [--check] [--git-add]`)
    process.exit(1)
  }
}
const check = argv.includes('--check')
const version = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).version
if (!/^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$/.test(version)) {
  console.error(`sync-version: package.json version ${JSON.stringify(version)} is not semver`)
  process.exit(1)
}

/** The workspace's Rust packages: their Cargo.lock entries carry the version. */
const CRATES = ['cuda-arena-core', 'cuda-sys-bridge', 'cuda-arena-ort', 'cuda-arena-c', 'cuda-arena-node']
const problems = []
const changed = []

/** Applies `edit` (text → text, pushing to `found` each place it saw) to one file. */
function update(rel, edit) {
  const file = join(root, rel)
  const before = readFileSync(file, 'utf8')
  const found = []
  const after = edit(before, found)
  for (const f of found) if (f.value !== version) problems.push(`${rel}: ${f.what} is ${f.value}`)
  if (found.length === 0) problems.push(`${rel}: no version found`)
  if (!check && after !== before) {
    writeFileSync(file, after)
    changed.push(rel)
  }
}

function jsonEdit(mutate) {
  return (text, found) => {
    const json = JSON.parse(text)
    mutate(json, found)
    return JSON.stringify(json, null, 2) + '\n'
  }
}

// The root's optionalDependencies on the platform packages are written at pack time, from
// this same version (scripts/publish-manifest.mjs).
update(
  'package-lock.json',
  jsonEdit((lock, found) => {
    found.push({ what: 'version', value: lock.version })
    lock.version = version
    const self = lock.packages?.['']
    if (self) {
      found.push({ what: 'packages[""].version', value: self.version })
      self.version = version
    }
  }),
)
for (const dir of readdirSync(join(root, 'npm')).sort()) {
  if (!existsSync(join(root, 'npm', dir, 'package.json'))) continue
  update(
    `npm/${dir}/package.json`,
    jsonEdit((p, found) => {
      found.push({ what: 'version', value: p.version })
      p.version = version
    }),
  )
}
update('Cargo.toml', (text, found) => {
  // [workspace.package] version = "…", and `version = "…"` on the workspace crates' entries.
  let out = text.replace(/(\[workspace\.package\][^[]*?\nversion = ")([^"]*)(")/, (_, a, v, b) => {
    found.push({ what: '[workspace.package] version', value: v })
    return a + version + b
  })
  for (const name of CRATES) {
    out = out.replace(new RegExp(`(\\n${name} = \\{[^}\\n]*version = ")([^"]*)(")`), (_, a, v, b) => {
      found.push({ what: `[workspace.dependencies] ${name}`, value: v })
      return a + version + b
    })
  }
  return out
})
update('Cargo.lock', (text, found) => {
  let out = text
  for (const name of CRATES) {
    out = out.replace(new RegExp(`(\\[\\[package\\]\\]\\nname = "${name}"\\nversion = ")([^"]*)(")`), (_, a, v, b) => {
      found.push({ what: name, value: v })
      return a + version + b
    })
  }
  return out
})
update('bindings/c/include/cuda_arena.h', (text, found) =>
  text.replace(/(#define CUDA_ARENA_VERSION ")([^"]*)(")/, (_, a, v, b) => {
    found.push({ what: 'CUDA_ARENA_VERSION', value: v })
    return a + version + b
  }),
)

update('python/cuda_arena/_version.py', (text, found) =>
  text.replace(/^(__version__ = ")([^"]*)(")$/m, (_, a, v, b) => {
    found.push({ what: '__version__', value: v })
    return a + version + b
  }),
)

if (check) {
  if (problems.length > 0) {
    console.error(`sync-version: not everything is at ${version}:\n  ${problems.join('\n  ')}`)
    process.exit(1)
  }
  console.log(`every package, crate and header is at ${version}`)
} else {
  const missing = problems.filter((p) => p.endsWith('no version found'))
  if (missing.length > 0) {
    console.error(`sync-version: ${missing.join('; ')}`)
    process.exit(1)
  }
  if (argv.includes('--git-add') && changed.length > 0 && existsSync(join(root, '.git'))) {
    execFileSync('git', ['add', '--', ...changed], { cwd: root, stdio: 'inherit' })
  }
  console.log(`set ${version} in ${changed.length ? changed.join(', ') : 'nothing (already there)'}`)
}
