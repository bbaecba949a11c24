/**
 * What the install tests share: packing the root package and a platform package into
 * tarballs as `npm publish` would, and running commands in an installed project the way a
 * user's machine would, with no Rust toolchain on PATH and no registry (offline, empty npm
 * cache), so everything a project uses comes from the tarballs.
 */
import { spawnSync, type SpawnSyncReturns } from 'node:child_process'
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { delimiter, dirname, join } from 'node:path'

export const root = join(__dirname, '..')
export const version = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string }).version

/** A stripped environment under `work`: node, npm and the system's tools; no cargo, no rustc. */
export function installEnv(work: string): NodeJS.ProcessEnv {
  return {
    PATH: [dirname(process.execPath), '/usr/bin', '/bin'].filter((d, i, all) => all.indexOf(d) === i).join(delimiter),
    HOME: join(work, 'home'),
    TMPDIR: work,
    npm_config_cache: join(work, 'npm-cache'),
    npm_config_offline: 'true',
    npm_config_audit: 'false',
    npm_config_fund: 'false',
    npm_config_update_notifier: 'false',
  }
}

/** Throws with the command's output unless it exited 0; returns its stdout. */
export function ok(r: SpawnSyncReturns<string>, what: string): string {
  if (r.status !== 0) throw new Error(`${what} failed (${r.status ?? r.signal ?? r.error}):\n${r.stdout}\n${r.stderr}`)
  return r.stdout
}

const npmEnv = (): NodeJS.ProcessEnv => ({ ...process.env, npm_config_update_notifier: 'false' })

/** `npm pack DIR` into `work`; the tarball's path. */
function pack(dir: string, work: string): string {
  const out = JSON.parse(ok(spawnSync('npm', ['pack', '--json', '--pack-destination', work, dir], { cwd: work, encoding: 'utf8', env: npmEnv() }), `npm pack ${dir}`)) as { filename: string }[]
  return join(work, out[0].filename)
}

/**
 * The root package's tarball. It is packed from a copy of what it would publish (plus the
 * prepack scripts, which add the optionalDependencies), so packing never touches the
 * repository's package.json while other tests read it. Needs `npm run build` (dist/, native/).
 */
export function packRoot(work: string): { tarball: string; copy: string } {
  const copy = join(work, 'root')
  const listed = JSON.parse(ok(spawnSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: root, encoding: 'utf8', env: npmEnv() }), 'npm pack --dry-run')) as { files: { path: string }[] }[]
  for (const f of [...listed[0].files.map((x) => x.path), 'scripts/publish-manifest.mjs', 'scripts/targets.mjs']) {
    mkdirSync(dirname(join(copy, f)), { recursive: true })
    copyFileSync(join(root, f), join(copy, f))
  }
  return { tarball: pack(copy, work), copy }
}

/**
 * A platform package, as staged by its build, packed into `work`: that of Rust target
 * `triple`, or this machine's without one (scripts/stage-platform.mjs knows the mapping).
 */
export function packPlatform(work: string, triple?: string): { tarball: string; name: string } {
  const dir = join(work, `platform-${triple ?? 'host'}`)
  const target = triple ? ['--target', triple] : []
  ok(spawnSync(process.execPath, [join(root, 'scripts/stage-platform.mjs'), ...target, '--out', dir], { encoding: 'utf8' }), `staging ${triple ?? 'this machine'}`)
  const { name } = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { name: string }
  return { tarball: pack(dir, work), name }
}

/** An empty project in `dir`, with `extra` fields in its package.json. */
export function emptyProject(dir: string, extra: Record<string, unknown> = {}): void {
  mkdirSync(dir, { recursive: true })
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'app', version: '1.0.0', private: true, ...extra }))
}
