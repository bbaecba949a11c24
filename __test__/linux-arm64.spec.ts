/**
 * The linux-arm64-gnu package, cross-built here (`npm run build:linux-arm64-gnu`): both
 * binaries are aarch64 shared objects, the addon exports Node-API's entry point, and the C
 * library passes the C smoke program under qemu-user. (The addon itself is not loaded: that
 * needs an aarch64 Node.) CI builds it and sets CUDA_ARENA_EXPECT_ARM64=1; elsewhere, without
 * the build, these tests are skipped.
 */
import test from 'ava'
import { spawnSync } from 'node:child_process'
import { existsSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

const root = join(__dirname, '..')
const pkgDir = join(root, 'npm/linux-arm64-gnu')
const addon = join(pkgDir, 'cuda-arena.linux-arm64-gnu.node')
const lib = join(pkgDir, 'lib/libcuda_arena.so')
const built = existsSync(addon) && existsSync(lib)
const expected = process.env.CUDA_ARENA_EXPECT_ARM64 === '1'
const maybe = built || expected ? test : test.skip

function readelf(args: string[], file: string): string {
  const r = spawnSync('readelf', [...args, '-W', file], { encoding: 'utf8' })
  if (r.status !== 0) throw new Error(`readelf ${file}: ${r.stderr}`)
  return r.stdout
}

maybe('the arm64 package holds aarch64 shared objects', (t) => {
  t.true(built, 'npm/linux-arm64-gnu is not staged: run npm run build:linux-arm64-gnu')
  for (const f of [addon, lib]) {
    const header = readelf(['-h'], f)
    t.regex(header, /Machine:\s+AArch64/, f)
    t.regex(header, /Type:\s+DYN/, f)
  }
})

maybe('the arm64 addon exports the Node-API entry point and needs only the C runtime', (t) => {
  t.regex(readelf(['--dyn-syms'], addon), /\bnapi_register_module_v1\b/)
  const needed = [...readelf(['-d'], addon).matchAll(/\(NEEDED\)\s+Shared library: \[([^\]]+)\]/g)].map((m) => m[1]).sort()
  t.deepEqual(needed.filter((n) => !/^(libc|libm|libgcc_s|libpthread|libdl|ld-linux-aarch64)\.so/.test(n)), [])
})

maybe('the arm64 C library passes the C smoke program under qemu', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'cuda-arena-arm64-'))
  try {
    const exe = join(dir, 'smoke')
    const cc = spawnSync(
      'aarch64-linux-gnu-gcc',
      ['-std=c11', '-Wall', '-Werror', '-o', exe, join(root, 'bindings/c/tests/c/smoke.c'), `-I${join(pkgDir, 'include')}`, `-L${join(pkgDir, 'lib')}`, '-lcuda_arena', `-Wl,-rpath,${join(pkgDir, 'lib')}`],
      { encoding: 'utf8' },
    )
    t.is(cc.status, 0, cc.stderr)
    const run = spawnSync('qemu-aarch64', ['-L', '/usr/aarch64-linux-gnu', exe, 'host'], { encoding: 'utf8', timeout: 60_000 })
    t.is(run.status, 0, `${run.stdout}${run.stderr}`)
    t.regex(run.stdout, /all checks passed/)
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
})
