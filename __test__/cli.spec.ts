import test from 'ava'
import { spawnSync } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { tmpdir } from 'node:os'
import { AllocatorFactory, replayTrace, type TraceOp } from '../ts/index'

const root = join(__dirname, '..')
/** The built command, what `npx cuda-arena` runs (`npm run build` makes it). */
const bin = join(root, 'dist', 'cli.js')

/** Runs `cuda-arena ...args` as a user would: the built command, in a child process. */
function cli(...args: string[]): { code: number | null; out: string; err: string } {
  const r = spawnSync(process.execPath, [bin, ...args], { encoding: 'utf8' })
  return { code: r.status, out: r.stdout, err: r.stderr }
}

test.before(() => {
  if (!existsSync(bin)) throw new Error(`${bin} is missing: run npm run build first`)
})

const dir = mkdtempSync(join(tmpdir(), 'cuda-arena-cli-'))

test('every command has --help', (t) => {
  for (const cmd of ['info', 'gen-trace', 'replay', 'c-flags']) {
    const r = cli(cmd, '--help')
    t.is(r.code, 0, cmd)
    t.regex(r.out, /Usage: cuda-arena/, cmd)
  }
  t.is(cli('--help').code, 0)
  t.is(cli('frobnicate').code, 1)
})

test('info says plainly that there is no CUDA driver here', (t) => {
  const r = cli('info')
  t.is(r.code, 0)
  t.regex(r.out, /No CUDA driver|GPU 0/)
})

test('gen-trace writes a trace that replay reads, and --json matches the library', (t) => {
  const file = join(dir, 'small.jsonl')
  t.is(cli('gen-trace', '--kind', 'small', '--ops', '5000', '--seed', '3', '-o', file).code, 0)
  const lines = readFileSync(file, 'utf8').trim().split('\n')
  t.is(lines.length, 5000)
  t.deepEqual(Object.keys(JSON.parse(lines[0])), ['op', 'id', 'size', 'stream'])
  const r = cli('replay', file, '--backend', 'virtual', '--json', '--compare', 'arena.extend_strategy=1')
  t.is(r.code, 0, r.err)
  const json = JSON.parse(r.out) as { runs: { ops: number; peakRequested: number; peakHeld: number; stats: { inUse: number } }[] }
  t.is(json.runs.length, 2)
  for (const run of json.runs) {
    t.is(run.ops, 5000)
    t.true(run.peakHeld >= run.peakRequested && run.peakRequested > 0)
    t.is(run.stats.inUse, 0, 'everything freed by the end')
  }
  // The library's own replay of the same trace gives the same numbers.
  const trace = lines.map((l) => JSON.parse(l) as TraceOp)
  const f = new AllocatorFactory({ name: `cli-check-${process.pid}`, backend: 'virtual' })
  const own = replayTrace(f.createAllocator({ name: 'Cuda' }), trace, { trackPeaks: true })
  t.is(json.runs[0].peakRequested, own.peakRequested)
  t.is(json.runs[0].peakHeld, own.peakHeld)
  t.is(json.runs[0].ops, own.ops)
})

test('replay prints a table with one row per config', (t) => {
  const r = cli('replay', '--sample', 'growing', '--backend', 'virtual', '--config', 'arena.max_dead_bytes_per_chunk=1048576', '--compare', 'arena.extend_strategy=1')
  t.is(r.code, 0, r.err)
  const lines = r.out.trim().split('\n')
  t.regex(lines[1], /^config\s+peak requested\s+peak held\s+held\/requested\s+extensions\s+shrinkages\s+held at end/)
  t.is(lines.length, 4)
})

test('a malformed line stops the replay naming the file and line; --lenient skips it', (t) => {
  const file = join(dir, 'bad.jsonl')
  writeFileSync(file, '{"op":"alloc","id":1,"size":4096}\n{"op":"alloc","id":2,"size":-1}\n{"op":"free","id":1}\n')
  const r = cli('replay', file, '--backend', 'virtual')
  t.is(r.code, 1)
  t.true(r.err.includes(`${file}:line 2`), r.err)
  const lenient = cli('replay', file, '--backend', 'virtual', '--lenient', '--json')
  t.is(lenient.code, 0, lenient.err)
  t.is((JSON.parse(lenient.out) as { linesSkipped: string[] }).linesSkipped.length, 1)
})

test('double frees and unknown ids are errors with their line', (t) => {
  const file = join(dir, 'double.jsonl')
  writeFileSync(file, '{"op":"alloc","id":1,"size":1}\n{"op":"free","id":1}\n{"op":"free","id":1}\n')
  const r = cli('replay', file, '--backend', 'virtual')
  t.is(r.code, 1)
  t.regex(r.err, /line 3/)
})

test('an invalid --config fails before replaying, naming the key', (t) => {
  const r = cli('replay', '--sample', 'small', '--backend', 'virtual', '--config', 'arena.max_memory=5')
  t.is(r.code, 1)
  t.regex(r.err, /ERR_ARENA_INVALID_CONFIG/)
  t.regex(r.err, /arena\.max_memory/)
})

test('a progress bar goes to stderr on a terminal only', (t) => {
  // `script` gives the command a terminal; the bar's delay is cut to 1 ms for the test.
  const cmd = `${process.execPath} ${bin} replay --sample small --backend virtual 2>&1 >/dev/null`
  const tty = spawnSync('script', ['-qc', cmd, '/dev/null'], { encoding: 'utf8', env: { ...process.env, CUDA_ARENA_PROGRESS_AFTER_MS: '1' } })
  t.is(tty.status, 0, tty.stderr)
  t.regex(tty.stdout, /config 1\/1 \[#+\] 100%/)
  const piped = cli('replay', '--sample', 'small', '--backend', 'virtual')
  t.notRegex(piped.err, /%/, 'no bar when stderr is not a terminal')
})
