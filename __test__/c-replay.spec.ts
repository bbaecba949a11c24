// Issue 27: a C host replays a trace file through the C ABI (`cuda_arena_replay_file`) and gets
// the report `cuda-arena replay --json` prints: the same library function runs behind both.
import test from 'ava'
import { spawnSync } from 'node:child_process'
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { tmpdir } from 'node:os'

const root = join(__dirname, '..')
const bin = join(root, 'dist', 'cli.js')
const dir = mkdtempSync(join(tmpdir(), 'cuda-arena-c-replay-'))

function run(cmd: string, args: string[]): { code: number | null; out: string; err: string } {
  const r = spawnSync(cmd, args, { encoding: 'utf8', maxBuffer: 1 << 28 })
  return { code: r.status, out: r.stdout, err: r.stderr }
}

/** The C program `bindings/c/tests/c/replay.c`, built against the package's header and
 * library with `cuda-arena c-flags`, as a C user builds. */
let exe = ''
test.before(() => {
  if (!existsSync(bin)) throw new Error(`${bin} is missing: run npm run build first`)
  const flags = run(process.execPath, [bin, 'c-flags']).out.trim().split(' ')
  exe = join(dir, 'replay')
  const cc = run('cc', ['-std=c11', '-Wall', '-Wextra', '-Werror', '-o', exe, join(root, 'bindings/c/tests/c/replay.c'), ...flags])
  if (cc.code !== 0) throw new Error(`replay.c does not compile: ${cc.err}`)
})

interface CliRun {
  allocator: string
  ops: number
  peakRequested: number
  peakHeld: number
  failedAllocs: number
  liveAtEnd: number
  stats: Record<string, number>
}

interface CRun {
  allocator: string
  warnings: string[]
  ops: number
  peakRequested: number
  peakHeld: number
  failedAllocs: number
  liveAtEnd: number
  elapsedNs: number
  stats: Record<string, number>
}

/** `inUse` (the command's stats) as ONNX Runtime's key (the C report's): `InUse`. */
const ortKey = (k: string): string => k.charAt(0).toUpperCase() + k.slice(1)

for (const kind of ['inference', 'mixed']) {
  for (const conf of [[], ['arena.use_virtual_memory', '0']]) {
    test(`the C ABI's replay of the ${kind} trace file${conf.length ? ` (${conf.join('=')})` : ''} reports what the command does`, (t) => {
      const file = join(dir, `${kind}-${conf.length}.jsonl`)
      t.is(run(process.execPath, [bin, 'gen-trace', '--kind', kind, '--ops', '4000', '-o', file]).code, 0)
      const c = run(exe, [file, 'virtual', ...conf])
      t.is(c.code, 0, c.err)
      const report = JSON.parse(c.out) as { trace: string; backend: string; linesSkippedCount: number; runs: CRun[] }
      const config = conf.length ? ['--config', `${conf[0]}=${conf[1]}`] : []
      const cli = JSON.parse(run(process.execPath, [bin, 'replay', file, '--backend', 'virtual', '--json', ...config]).out) as { runs: CliRun[] }
      t.is(report.trace, file)
      t.is(report.backend, 'virtual')
      t.is(report.linesSkippedCount, 0)
      t.is(report.runs.length, 1)
      const [mine, theirs] = [report.runs[0], cli.runs[0]]
      for (const k of ['allocator', 'ops', 'peakRequested', 'peakHeld', 'failedAllocs', 'liveAtEnd'] as const) {
        t.is(mine[k], theirs[k], k)
      }
      t.true(mine.elapsedNs > 0)
      for (const [k, v] of Object.entries(theirs.stats)) t.is(mine.stats[ortKey(k)], v, k)
    })
  }
}

test('the C ABI names a file it cannot replay, with a code', (t) => {
  const empty = join(dir, 'empty.jsonl')
  writeFileSync(empty, '')
  const r = run(exe, [empty, 'virtual'])
  t.is(r.code, 1)
  // CUDA_ARENA_ERR_INVALID_ARGUMENT (3), and the reason.
  t.regex(r.err, /^3: .*is empty: neither a trace/)
  t.is(run(exe, [join(dir, 'missing'), 'virtual']).code, 1)
  t.regex(run(exe, [empty, 'host']).err, /host/)
  t.regex(run(exe, [empty, 'virtual', 'arena.nope', '1']).err, /arena\.nope/)
})

test('the C ABI replay leaks nothing and touches no memory it does not own (valgrind)', (t) => {
  if (run('valgrind', ['--version']).code !== 0) {
    if (process.env.CUDA_ARENA_REQUIRE_VALGRIND === '1') t.fail('valgrind is required and missing')
    else t.pass('valgrind is not installed here')
    return
  }
  const file = join(dir, 'valgrind.jsonl')
  t.is(run(process.execPath, [bin, 'gen-trace', '--kind', 'small', '--ops', '2000', '-o', file]).code, 0)
  const args = ['--leak-check=full', '--show-leak-kinds=definite,indirect,possible', '--errors-for-leak-kinds=definite,indirect,possible', '--error-exitcode=99', exe]
  const ok = run('valgrind', [...args, file, 'virtual'])
  t.is(ok.code, 0, ok.err.slice(-2000))
  const bad = run('valgrind', [...args, join(dir, 'missing'), 'virtual'])
  t.is(bad.code, 1, bad.err.slice(-2000))
})
