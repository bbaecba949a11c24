/**
 * The crates are ready for reuse: `cargo package` builds each from its packaged files alone
 * (the published dependency included), and each package carries what a registry needs.
 */
import test from 'ava'
import { spawnSync } from 'node:child_process'
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { homedir } from 'node:os'
import { join } from 'node:path'

const root = join(__dirname, '..')
const CRATES = ['cuda-arena-core', 'cuda-sys-bridge']

interface Manifest {
  name: string
  version: string
  description: string | null
  license: string | null
  repository: string | null
  readme: string | null
  manifest_path: string
  dependencies: { name: string; req: string; kind: string | null; path?: string }[]
}

function metadata(): Manifest[] {
  const r = spawnSync('cargo', ['metadata', '--no-deps', '--format-version', '1'], { cwd: root, encoding: 'utf8', maxBuffer: 64 << 20 })
  if (r.status !== 0) throw new Error(r.stderr)
  return (JSON.parse(r.stdout) as { packages: Manifest[] }).packages
}

test('each published crate has a description, license, repository and readme', (t) => {
  const packages = metadata()
  for (const name of CRATES) {
    const p = packages.find((q) => q.name === name)
    if (!p) return t.fail(`${name} is not in the workspace`)
    t.truthy(p.description, `${name} description`)
    t.is(p.license, 'MIT OR Apache-2.0', `${name} license`)
    t.regex(p.repository ?? '', /^https:\/\//, `${name} repository`)
    t.truthy(p.readme, `${name} readme`)
    // A path dependency must also name a version, or the published crate could not find it.
    // A dev-dependency without one (the unpublished test model) is dropped on publishing.
    for (const d of p.dependencies.filter((d) => d.path !== undefined && d.kind !== 'dev')) t.not(d.req, '*', `${name} → ${d.name} has no version`)
    // The README is the crate's documentation, so its example runs as a doctest.
    t.regex(readFileSync(join(p.manifest_path, '..', 'src/lib.rs'), 'utf8'), /#!\[doc = include_str!\("\.\.\/README\.md"\)\]/, `${name} lib.rs`)
    t.regex(readFileSync(join(p.manifest_path, '..', 'README.md'), 'utf8'), /```rust\n/, `${name} README example`)
  }
})

/**
 * Cargo verifies a crate against its freshly packaged dependency through a temporary registry
 * under target/package, and extracts that registry's crates into CARGO_HOME/registry/src/ by
 * name and version; an extraction left by an earlier run in the same checkout is reused as it
 * is, so the verify would build against yesterday's cuda-arena-core. Our crates come only from
 * that temporary registry (they are not published), so their extractions are dropped first.
 */
function dropStaleExtractions(): void {
  const src = join(process.env.CARGO_HOME ?? join(homedir(), '.cargo'), 'registry', 'src')
  if (!existsSync(src)) return
  const ours = metadata().filter((p) => CRATES.includes(p.name)).map((p) => `${p.name}-${p.version}`)
  for (const index of readdirSync(src)) {
    for (const dir of ours) rmSync(join(src, index, dir), { recursive: true, force: true })
  }
}

test('cargo package packages and verifies both crates', (t) => {
  t.timeout(15 * 60_000)
  dropStaleExtractions()
  const args = ['package', '--locked', '--allow-dirty', ...CRATES.flatMap((c) => ['-p', c])]
  const r = spawnSync('cargo', args, { cwd: root, encoding: 'utf8', maxBuffer: 64 << 20 })
  t.is(r.status, 0, r.stderr.slice(-4000))
  for (const name of CRATES) {
    t.regex(r.stderr, new RegExp(`Verifying ${name} v`), name)
    const list = spawnSync('tar', ['tzf', join(root, `target/package/${name}-${metadata().find((p) => p.name === name)?.version}.crate`)], { encoding: 'utf8' })
    t.is(list.status, 0, list.stderr)
    for (const f of ['README.md', 'LICENSE-MIT', 'LICENSE-APACHE', 'Cargo.toml', 'src/lib.rs']) t.true(list.stdout.split('\n').some((l) => l.endsWith(`/${f}`)), `${name} lacks ${f}`)
  }
})
