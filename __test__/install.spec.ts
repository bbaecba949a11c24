/**
 * `npm install` as a user does it: the root package and this platform's package are packed
 * into tarballs and installed into an empty project, with no Rust toolchain on PATH and no
 * registry (offline, empty npm cache), so everything the project uses comes from the two
 * tarballs. Needs `npm run build` first (it stages the platform package).
 */
import test from 'ava'
import { spawnSync, type SpawnSyncReturns } from 'node:child_process'
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { platformId } from '../ts/platform'
import { emptyProject, installEnv, ok, packPlatform, packRoot, root, version } from './packages'

const platform = platformId()
const platformPackage = `cuda-arena-${platform}`
const work = mkdtempSync(join(tmpdir(), 'cuda-arena-install-'))
const app = join(work, 'app')
const bare = join(work, 'bare')
const env = installEnv(work)

function run(cmd: string, args: string[], cwd: string, extra: NodeJS.ProcessEnv = {}): SpawnSyncReturns<string> {
  return spawnSync(cmd, args, { cwd, env: { ...env, ...extra }, encoding: 'utf8', timeout: 120_000 })
}

const tarballs = { root: '', platform: '', rootCopy: '' }
const packageJsonBefore = readFileSync(join(root, 'package.json'), 'utf8')

test.before(() => {
  for (const f of ['dist/index.js', 'native/index.js', `npm/${platform}/lib/libcuda_arena.so`]) {
    if (!existsSync(join(root, f))) throw new Error(`${f} is missing: run npm run build first`)
  }
  // Pack with the developer's PATH (packing builds nothing), then install and use with the
  // stripped one.
  const packed = packRoot(work)
  tarballs.root = packed.tarball
  tarballs.rootCopy = packed.copy
  tarballs.platform = packPlatform(work).tarball
  for (const [dir, files] of [
    [app, [tarballs.root, tarballs.platform]],
    [bare, [tarballs.root]],
  ] as const) {
    emptyProject(dir)
    ok(run('npm', ['install', ...files], dir), `npm install in ${dir}`)
  }
})

test.after.always(() => rmSync(work, { recursive: true, force: true }))

test('the installed project sees no Rust toolchain', (t) => {
  for (const tool of ['cargo', 'rustc', 'rustup']) {
    t.not(run('sh', ['-c', `command -v ${tool}`], app).status, 0, `${tool} is on the PATH the install test uses`)
  }
})

test('the root tarball carries the loader and the typed API but no binary', (t) => {
  const files = ok(spawnSync('tar', ['tzf', tarballs.root], { encoding: 'utf8' }), 'tar').split('\n')
  t.true(files.includes('package/dist/index.js'))
  t.true(files.includes('package/dist/index.d.ts'))
  t.true(files.includes('package/native/index.js'))
  t.true(files.includes('package/LICENSE-MIT') && files.includes('package/LICENSE-APACHE'))
  t.deepEqual(files.filter((f) => f.endsWith('.node') || f.endsWith('.so')), [])
})

test('the root tarball depends optionally on every platform package at its version; package.json is left as it was', (t) => {
  const manifest = JSON.parse(ok(spawnSync('tar', ['xzOf', tarballs.root, 'package/package.json'], { encoding: 'utf8' }), 'tar')) as {
    optionalDependencies?: Record<string, string>
  }
  t.deepEqual(manifest.optionalDependencies, { 'cuda-arena-linux-x64-gnu': version, 'cuda-arena-linux-arm64-gnu': version })
  t.is(readFileSync(join(tarballs.rootCopy, 'package.json'), 'utf8'), packageJsonBefore)
})

test('the platform tarball carries the addon, the C library, the header and the licenses', (t) => {
  const files = ok(spawnSync('tar', ['tzf', tarballs.platform], { encoding: 'utf8' }), 'tar').split('\n').filter(Boolean).sort()
  t.deepEqual(files, [
    `package/LICENSE-APACHE`,
    `package/LICENSE-MIT`,
    `package/README.md`,
    `package/cuda-arena.${platform}.node`,
    `package/include/cuda_arena.h`,
    `package/lib/libcuda_arena.so`,
    `package/package.json`,
  ])
})

test('require(cuda-arena) loads the binary from the platform package and allocates', (t) => {
  const script = `
    const arena = require('cuda-arena')
    const factory = new arena.AllocatorFactory({ name: 'install', backend: 'virtual' })
    const a = factory.createAllocator({ name: 'Cuda', deviceId: 0 })
    const p = a.alloc(1000)
    const size = a.allocatedSize(p)
    a.free(p)
    const inUse = a.getStats().inUse
    factory.releaseAllocator(a)
    console.log(JSON.stringify({
      module: require.resolve('cuda-arena'),
      binaries: Object.keys(require.cache).filter((k) => k.endsWith('.node')),
      size: String(size),
      inUse: String(inUse),
    }))`
  const out = JSON.parse(ok(run(process.execPath, ['-e', script], app), 'node -e')) as { module: string; binaries: string[]; size: string; inUse: string }
  t.is(out.module, join(app, 'node_modules/cuda-arena/dist/index.js'))
  t.deepEqual(out.binaries, [join(app, `node_modules/${platformPackage}/cuda-arena.${platform}.node`)])
  t.is(out.size, '1024')
  t.is(out.inUse, '0')
})

/** The shell blocks of the README's "Install" section, one command per line, comments dropped. */
function readmeInstallCommands(): string[][] {
  const readme = readFileSync(join(root, 'README.md'), 'utf8')
  const start = readme.indexOf('\n## Install\n')
  const section = readme.slice(start, readme.indexOf('\n## ', start + 1))
  return [...section.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) =>
    m[1]
      .split('\n')
      .map((l) => l.replace(/\s+#.*$/, '').trim())
      .filter(Boolean),
  )
}

test('the README install section is npm install cuda-arena, then commands that run as written in the installed project', (t) => {
  const [install, commands] = readmeInstallCommands()
  t.deepEqual(install, ['npm install cuda-arena'])
  t.true(commands.length >= 3, 'the README lists the commands to try')
  copyFileSync(join(root, 'bindings/c/tests/c/smoke.c'), join(app, 'app.c'))
  const outputs = commands.map((cmd) => ok(run('sh', ['-c', cmd], app), cmd))
  t.regex(outputs[commands.findIndex((c) => c.includes('cuda-arena info'))] ?? '', /No CUDA driver|GPU 0/)
  t.regex(outputs[commands.findIndex((c) => c.includes('cuda-arena replay'))] ?? '', /trace sample small: \d+ ops on virtual/)
  t.true(commands.some((c) => c.startsWith('cc app.c')), 'the README builds a C program')
  t.regex(ok(run(join(app, 'app'), [], app), 'the C program the README built'), /all checks passed/)
})

test('npx cuda-arena info runs from the installed package', (t) => {
  const out = ok(run('npx', ['cuda-arena', 'info'], app), 'npx cuda-arena info')
  t.regex(out, /No CUDA driver|GPU 0/)
})

test('npx cuda-arena replays a small trace on virtual', (t) => {
  ok(run('npx', ['cuda-arena', 'gen-trace', '--kind', 'small', '--ops', '2000', '-o', 'trace.jsonl'], app), 'gen-trace')
  const report = JSON.parse(ok(run('npx', ['cuda-arena', 'replay', 'trace.jsonl', '--backend', 'virtual', '--json'], app), 'replay')) as {
    backend: string
    runs: { ops: number; peakRequested: number; peakHeld: number }[]
  }
  t.is(report.backend, 'virtual')
  t.is(report.runs.length, 1)
  t.is(report.runs[0].ops, 2000)
  t.true(report.runs[0].peakRequested > 0)
  t.true(report.runs[0].peakHeld >= report.runs[0].peakRequested)
})

test('the TypeScript types resolve from the installed package, and wrong calls fail to check', (t) => {
  writeFileSync(
    join(app, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        strict: true,
        target: 'ES2022',
        module: 'commonjs',
        moduleResolution: 'node',
        noEmit: true,
        types: ['node'],
        typeRoots: [join(root, 'node_modules/@types')],
      },
      files: ['index.ts'],
    }),
  )
  writeFileSync(
    join(app, 'index.ts'),
    `import { AllocatorFactory, cLibrary, ERROR_CODES, type AllocatorStats, type ArenaErrorCode, type OrtAllocator } from 'cuda-arena'

const factory = new AllocatorFactory({ name: 'types', backend: 'virtual' })
const a: OrtAllocator = factory.createAllocator({ name: 'Cuda', deviceId: 0 }, { extendStrategy: 'sameAsRequested' })
const p: bigint | null = a.alloc(1000)
const stats: AllocatorStats = a.getStats()
const inUse: bigint = stats.inUse
const code: ArenaErrorCode = ERROR_CODES[0]
const include: string = cLibrary().includeDir
a.free(p)
// @ts-expect-error deviceId is a number
factory.createAllocator({ name: 'Cuda', deviceId: '0' })
// @ts-expect-error no such memory name
factory.createAllocator({ name: 'Gpu' })
export { inUse, code, include }
`,
  )
  const tsc = join(root, 'node_modules/typescript/bin/tsc')
  const r = run(process.execPath, [tsc, '-p', 'tsconfig.json'], app)
  t.is(r.status, 0, `${r.stdout}${r.stderr}`)
})

test('a C program builds against the shipped header and library with c-flags, and runs', (t) => {
  const flags = ok(run('npx', ['cuda-arena', 'c-flags'], app), 'c-flags').trim().split(' ')
  t.true(flags.includes('-lcuda_arena'))
  const exe = join(app, 'smoke')
  ok(run('cc', ['-std=c11', '-Wall', '-Werror', '-o', exe, join(root, 'bindings/c/tests/c/smoke.c'), ...flags], app), 'cc')
  t.regex(ok(run(exe, ['host'], app), 'the C program'), /all checks passed/)
})

test('without the platform package, require names the platform and the package to add', (t) => {
  const r = run(process.execPath, ['-e', `try { require('cuda-arena') } catch (e) { console.log(JSON.stringify({ code: e.code, message: e.message })) }`], bare)
  const err = JSON.parse(ok(r, 'node -e')) as { code: string; message: string }
  t.is(err.code, 'ERR_NO_NATIVE_BINDING')
  t.true(err.message.includes(platform), err.message)
  t.true(err.message.includes(`npm install ${platformPackage}@${version}`), err.message)
})

test('without the platform package, npx cuda-arena says so in one line and exits 1', (t) => {
  const r = run('npx', ['cuda-arena', 'info'], bare)
  t.is(r.status, 1)
  t.is(r.stdout, '')
  t.is(r.stderr.trim().split('\n').length, 1, r.stderr)
  t.true(r.stderr.startsWith(`cuda-arena: ERR_NO_NATIVE_BINDING: cuda-arena's binary for ${platform}`), r.stderr)
})

test('on a platform with no prebuilt package, require names it and lists the prebuilt ones', (t) => {
  // The loader reads process.arch; riscv64 has no package.
  const script = `Object.defineProperty(process, 'arch', { value: 'riscv64' })
    try { require('cuda-arena') } catch (e) { console.log(JSON.stringify({ code: e.code, message: e.message })) }`
  const err = JSON.parse(ok(run(process.execPath, ['-e', script], app), 'node -e')) as { code: string; message: string }
  t.is(err.code, 'ERR_NO_NATIVE_BINDING')
  t.regex(err.message, /no prebuilt binary for linux-riscv64-gnu .*prebuilt: linux-x64-gnu, linux-arm64-gnu\. .*npm run build:native/)
})

test('a binary that fails to load is named with the reason', (t) => {
  const broken = join(work, 'broken.node')
  writeFileSync(broken, 'not a shared object')
  const r = run(process.execPath, ['-e', `try { require('cuda-arena') } catch (e) { console.log(JSON.stringify({ code: e.code, message: e.message })) }`], app, {
    NAPI_RS_NATIVE_LIBRARY_PATH: broken,
  })
  const err = JSON.parse(ok(r, 'node -e')) as { code: string; message: string }
  t.is(err.code, 'ERR_NO_NATIVE_BINDING')
  t.regex(err.message, new RegExp(`binary for ${platform} .* failed to load: .*(invalid ELF|too short|file)`))
})
