// The GPU machine's scripts for ONNX Runtime's CUDA provider (scripts/gpu/ort-cuda/) run here
// without a GPU, so they cannot rot between GPU runs: pack.sh packs the app (no provider),
// remote.sh unpacks it and runs tests.cjs, bench.sh and pair.cjs on the `host` backend and the CPU provider,
// through the packed packages. And a broken piece fails the run rather than passing quietly.
import { spawnSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { ortSerial } from './ort/test'

const dir = join(__dirname, '..', 'scripts', 'gpu', 'ort-cuda')
const bash = (args: string[], env: NodeJS.ProcessEnv = {}) =>
  spawnSync('bash', args, { encoding: 'utf8', env: { ...process.env, ...env }, timeout: 300_000 })

ortSerial('the dry run packs, unpacks, passes every GPU test on the CPU provider and makes the serving table', (t) => {
  const keep = mkdtempSync(join(tmpdir(), 'ort-cuda-dry-'))
  try {
    const r = bash([join(dir, 'dry-run.sh'), keep])
    const out = `${r.stdout}\n${r.stderr}`
    t.is(r.status, 0, out.slice(-3000))
    const counts = /^(\d+) passed, (\d+) failed$/m.exec(r.stdout)
    t.truthy(counts, 'tests.cjs printed its counts')
    t.true(Number(counts?.[1]) >= 11, `passed: ${counts?.[1]}`)
    t.is(Number(counts?.[2]), 0)
    t.notRegex(r.stdout, /^not ok/m)
    const table = readFileSync(join(keep, 'out', 'table.md'), 'utf8')
    for (const allocator of ['ort', 'cuda-arena default', 'cuda-arena region arena']) {
      t.regex(table, new RegExp(`\\| ${allocator} \\| \\d+ \\|`), `a row for ${allocator}`)
    }
    const lines = readFileSync(join(keep, 'out', 'results.jsonl'), 'utf8').trim().split('\n')
    t.is(lines.length, 6, 'two scenarios x three allocators, one process each')
    t.true(lines.every((l) => (JSON.parse(l) as { result: unknown }).result !== null))
    // pair.cjs: ORT's own allocator and the arena in one process, outputs compared request by request.
    const pairs = readFileSync(join(keep, 'out', 'pairs.md'), 'utf8')
    for (const scenario of ['one', 'k1']) t.regex(pairs, new RegExp(`\\| ${scenario} \\| \\d+\\.\\d+ .*\\| 1 \\| true \\|`), `a pair row for ${scenario}`)
  } finally {
    rmSync(keep, { recursive: true, force: true })
  }
})

ortSerial('the runner refuses to run before the pieces are unpacked', (t) => {
  const root = mkdtempSync(join(tmpdir(), 'ort-cuda-empty-'))
  try {
    writeFileSync(join(root, 'MANIFEST'), 'provider.parts 0\n')
    const r = bash([join(dir, 'remote.sh'), 'tests', join(root, 'out')], { ORT_CUDA_ROOT: root, ORT_CUDA_DRY: '1' })
    t.not(r.status, 0)
    t.regex(r.stdout, /unpack call1 first/)
  } finally {
    rmSync(root, { recursive: true, force: true })
  }
})

ortSerial('the table fails a scenario where an allocator failed or the outputs differ', (t) => {
  const root = mkdtempSync(join(tmpdir(), 'ort-cuda-table-'))
  try {
    const row = (allocator: string, result: object | null) => JSON.stringify({ round: 1, scenario: 's', allocator, result })
    const ok = (checksum: number) => ({ peakMiB: 10, heldPeakMiB: 8, maxInUseMiB: 6, reqPerS: 100, medianMs: 1, p90Ms: 2, checksum })
    const table = (lines: string[]) => {
      const file = join(root, 'results.jsonl')
      writeFileSync(file, lines.join('\n') + '\n')
      return spawnSync(process.execPath, [join(dir, 'table.cjs'), file], { encoding: 'utf8' })
    }
    const good = table([row('a', ok(1.5)), row('b', ok(1.5))])
    t.is(good.status, 0, good.stdout)
    t.regex(good.stdout, /\| s \| a \| 10 \| 8 \/ 6 \| 1\.33 \| 100\.0 \| 1\.0 \| 2\.0 \| 1 \|/)
    t.is(table([row('a', ok(1.5)), row('b', null)]).status, 1, 'a failed allocator')
    t.is(table([row('a', ok(1.5)), row('b', ok(2.5))]).status, 1, 'outputs that differ')
  } finally {
    rmSync(root, { recursive: true, force: true })
  }
})
