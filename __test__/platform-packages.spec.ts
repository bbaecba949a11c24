/**
 * The staged platform packages, as published (scripts/build-target.mjs builds them with
 * napi-rs's glibc 2.17 toolchains): each binary is a shared object for its machine that needs
 * nothing newer than glibc 2.17 and only the C runtime, the addon exports Node-API's entry
 * point, and the C library passes the C smoke program run on glibc 2.17 itself (the
 * toolchain's own loader and libc; under qemu-user for arm64). An aarch64 Node loads the arm64
 * addon in install-arm64.spec.ts. `npm run build` stages linux-x64-gnu; CI also builds
 * linux-arm64-gnu and sets CUDA_ARENA_EXPECT_ARM64=1, elsewhere its tests are skipped
 * without that build.
 */
import test from 'ava'
import { spawnSync } from 'node:child_process'
import { existsSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

const root = join(__dirname, '..')
const MAX_GLIBC = [2, 17]

interface Platform {
  id: string
  triple: string
  machine: RegExp
  /** Runs a program of this platform with the toolchain's glibc 2.17. */
  runner: (sysroot: string, libDir: string, exe: string) => [string, string[]]
}

const PLATFORMS: Platform[] = [
  {
    id: 'linux-x64-gnu',
    triple: 'x86_64-unknown-linux-gnu',
    machine: /Machine:\s+Advanced Micro Devices X86-64/,
    runner: (sysroot, libDir, exe) => [join(sysroot, 'lib/ld-linux-x86-64.so.2'), ['--library-path', `${join(sysroot, 'lib')}:${join(sysroot, 'lib64')}:${libDir}`, exe, 'host']],
  },
  {
    id: 'linux-arm64-gnu',
    triple: 'aarch64-unknown-linux-gnu',
    machine: /Machine:\s+AArch64/,
    runner: (sysroot, _libDir, exe) => ['qemu-aarch64', ['-L', sysroot, exe, 'host']],
  },
]

function readelf(args: string[], file: string): string {
  const r = spawnSync('readelf', [...args, '-W', file], { encoding: 'utf8' })
  if (r.status !== 0) throw new Error(`readelf ${file}: ${r.stderr}`)
  return r.stdout
}

for (const p of PLATFORMS) {
  const pkgDir = join(root, 'npm', p.id)
  const addon = join(pkgDir, `cuda-arena.${p.id}.node`)
  const lib = join(pkgDir, 'lib/libcuda_arena.so')
  const toolchain = join(root, 'target/cross-toolchain', p.triple)
  const staged = existsSync(addon) && existsSync(lib) && existsSync(toolchain)
  const expected = p.id === 'linux-x64-gnu' || process.env.CUDA_ARENA_EXPECT_ARM64 === '1'
  const maybe = staged || expected ? test : test.skip
  const build = `node scripts/build-target.mjs ${p.triple}`

  maybe(`${p.id}: both binaries are shared objects for the machine, needing glibc 2.17 at most and only the C runtime`, (t) => {
    t.true(staged, `npm/${p.id} is not staged: ${build}`)
    for (const f of [addon, lib]) {
      const header = readelf(['-h'], f)
      t.regex(header, p.machine, f)
      t.regex(header, /Type:\s+DYN/, f)
      const glibc = [...readelf(['-V'], f).matchAll(/GLIBC_(\d+)\.(\d+)/g)].map((m) => [Number(m[1]), Number(m[2])])
      t.true(glibc.length > 0, f)
      t.deepEqual(glibc.filter(([a, b]) => a > MAX_GLIBC[0] || (a === MAX_GLIBC[0] && b > MAX_GLIBC[1])), [], `${f} needs a newer glibc`)
      const needed = [...readelf(['-d'], f).matchAll(/\(NEEDED\)\s+Shared library: \[([^\]]+)\]/g)].map((m) => m[1])
      t.deepEqual(needed.filter((n) => !/^(libc|libm|libgcc_s|libpthread|libdl|librt|ld-linux[-\w]*)\.so/.test(n)), [], f)
    }
  })

  maybe(`${p.id}: the addon exports the Node-API entry point`, (t) => {
    t.true(staged, `npm/${p.id} is not staged: ${build}`)
    t.regex(readelf(['--dyn-syms'], addon), /\bnapi_register_module_v1\b/)
  })

  maybe(`${p.id}: the C library passes the C smoke program on glibc 2.17`, (t) => {
    t.true(staged, `npm/${p.id} is not staged: ${build}`)
    const dir = mkdtempSync(join(tmpdir(), `cuda-arena-${p.id}-`))
    try {
      const exe = join(dir, 'smoke')
      const libDir = join(pkgDir, 'lib')
      const cc = spawnSync(
        join(toolchain, 'bin', `${p.triple}-gcc`),
        ['-std=c11', '-Wall', '-Werror', '-o', exe, join(root, 'bindings/c/tests/c/smoke.c'), `-I${join(pkgDir, 'include')}`, `-L${libDir}`, '-lcuda_arena', `-Wl,-rpath,${libDir}`],
        { encoding: 'utf8' },
      )
      t.is(cc.status, 0, cc.stderr)
      const [cmd, args] = p.runner(join(toolchain, p.triple, 'sysroot'), libDir, exe)
      const run = spawnSync(cmd, args, { encoding: 'utf8', timeout: 60_000 })
      t.is(run.status, 0, `${run.stdout}${run.stderr}${run.error ?? ''}`)
      t.regex(run.stdout, /all checks passed/)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
}
