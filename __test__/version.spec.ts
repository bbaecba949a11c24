/**
 * One version across the npm packages, the crates, the binaries and the C header, bumped by
 * one command: `npm version <patch|minor|major|X.Y.Z>` (its "version" script is
 * scripts/sync-version.mjs).
 */
import test from 'ava'
import { spawnSync, type SpawnSyncReturns } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { native } from '../ts/native'
import { bindingMismatch, packageVersion } from '../ts/platform'

const root = join(__dirname, '..')
const sync = (cwd: string, ...args: string[]): SpawnSyncReturns<string> =>
  spawnSync(process.execPath, [join(cwd, 'scripts/sync-version.mjs'), ...args], { cwd, encoding: 'utf8' })

/** A copy of the repository's files (tracked, and new ones not ignored), without builds. */
function copyOfRepository(): string {
  const dir = mkdtempSync(join(tmpdir(), 'cuda-arena-version-'))
  const files = spawnSync('git', ['ls-files', '-co', '--exclude-standard', '-z'], { cwd: root, encoding: 'utf8' })
  if (files.status !== 0) throw new Error(`git ls-files: ${files.stderr}`)
  const cp = spawnSync('xargs', ['-0', 'cp', '--parents', '-P', '-t', dir], { cwd: root, input: files.stdout, encoding: 'utf8' })
  if (cp.status !== 0) throw new Error(`copy: ${cp.stderr}`)
  return dir
}

test('every package, crate and the C header carry the root version', (t) => {
  const r = sync(root, '--check')
  t.is(r.status, 0, r.stderr)
})

test('the loaded binary is of the package version, and another version is refused by name', (t) => {
  t.is(native.nativeVersion(), packageVersion())
  t.is(bindingMismatch(packageVersion()), undefined)
  const err = bindingMismatch('9.9.9') as Error & { code?: string }
  t.is(err.code, 'ERR_NO_NATIVE_BINDING')
  t.true(err.message.includes('9.9.9') && err.message.includes(packageVersion()), err.message)
})

test('npm version X bumps every npm package, crate, lock file and the header to X', (t) => {
  const dir = copyOfRepository()
  try {
    const bump = spawnSync('npm', ['version', '7.8.9', '--no-git-tag-version'], {
      cwd: dir,
      encoding: 'utf8',
      env: { ...process.env, npm_config_offline: 'true', npm_config_update_notifier: 'false' },
    })
    t.is(bump.status, 0, bump.stderr)
    t.is(sync(dir, '--check').status, 0)
    const read = (f: string): string => readFileSync(join(dir, f), 'utf8')
    t.is(JSON.parse(read('package.json')).version, '7.8.9')
    t.is(JSON.parse(read('npm/linux-x64-gnu/package.json')).version, '7.8.9')
    t.is(JSON.parse(read('npm/linux-arm64-gnu/package.json')).version, '7.8.9')
    t.regex(read('Cargo.toml'), /\[workspace\.package\]\nversion = "7\.8\.9"/)
    t.regex(read('bindings/c/include/cuda_arena.h'), /#define CUDA_ARENA_VERSION "7\.8\.9"/)
    t.regex(read('python/cuda_arena/_version.py'), /^__version__ = "7\.8\.9"$/m)
    // Cargo agrees: the lock file matches the manifests without being rewritten.
    const meta = spawnSync('cargo', ['metadata', '--locked', '--offline', '--format-version', '1'], { cwd: dir, encoding: 'utf8', maxBuffer: 64 << 20 })
    t.is(meta.status, 0, meta.stderr)
    // The dev-only shadow model (crates/arena-model), never built into a package, keeps 0.0.0.
    const crates = (JSON.parse(meta.stdout) as { packages: { name: string; version: string; source: string | null }[] }).packages.filter((p) => p.source === null && p.name !== 'cuda-arena-model')
    t.deepEqual(crates.map((p) => `${p.name} ${p.version}`).sort(), ['cuda-arena-c 7.8.9', 'cuda-arena-core 7.8.9', 'cuda-arena-node 7.8.9', 'cuda-arena-ort 7.8.9', 'cuda-sys-bridge 7.8.9'])
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
})

test('the version check names every place left behind', (t) => {
  const dir = copyOfRepository()
  try {
    const f = join(dir, 'npm/linux-arm64-gnu/package.json')
    writeFileSync(f, readFileSync(f, 'utf8').replace(`"version": "${packageVersion()}"`, '"version": "0.0.1"'))
    const r = sync(dir, '--check')
    t.is(r.status, 1)
    t.regex(r.stderr, /npm\/linux-arm64-gnu\/package\.json: version is 0\.0\.1/)
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
})
