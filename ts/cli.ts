#!/usr/bin/env node
/**
 * `cuda-arena`: info, trace generation and trace replay. See `cuda-arena --help`.
 * The replay loop runs in Rust (through the binding); this file parses arguments and prints.
 */
import { loaded } from './cli-guard'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { native } from './native'
import { cLibrary, cudaAvailable, devices, ERR_NO_NATIVE_BINDING, isArenaError } from './index'
import { renderReport } from './report-html'
import { writeFileSync } from 'node:fs'

loaded()

const KINDS = ['inference', 'mixed', 'small', 'growing'] as const

const HELP: Record<string, string> = {
  main: `cuda-arena: a GPU memory arena with ONNX Runtime's semantics

Usage: cuda-arena <command> [options]

Commands:
  info        the CUDA driver and devices
  gen-trace   write a generated allocation trace (JSON lines)
  replay      replay a trace through the arena and report memory held and time
  c-flags     compiler flags to build a C/C++ program against the shipped C library

Run cuda-arena <command> --help for a command's options.`,
  info: `Usage: cuda-arena info [--json]

Prints the CUDA driver's devices (name, memory, PCI bus id, memory pools), or that no
CUDA driver is present.`,
  'gen-trace': `Usage: cuda-arena gen-trace --kind inference|mixed|small|growing [--ops N] [--seed S] [-o FILE]

Writes a trace: {"op":"alloc","id":1,"size":4096,"stream":0} / {"op":"free","id":1}, one per
line, to FILE (default: standard output). --ops defaults to 100000, --seed to 1.`,
  'c-flags': `Usage: cuda-arena c-flags [--json]

Prints the flags that compile and link a C or C++ program against the C library in this
platform's package (include/cuda_arena.h, lib/libcuda_arena.so), for example:
  cc app.c $(npx cuda-arena c-flags) -o app
With --json: the package, include and library directories, and the flags.`,
  replay: `Usage: cuda-arena replay TRACE|--sample NAME [--backend cuda|virtual] [--config k=v ...]
                          [--compare 'k=v,k=v' ...] [--json] [--html FILE] [--lenient]

Replays the trace through a fresh arena per config and prints, per config: peak bytes
requested, peak bytes held, held/requested, arena extensions and shrinkages, the final stats
(bytes held at the end, MaxInUse; every stat with --json), and ns/op.
  --sample NAME   a generated sample trace: ${KINDS.join(', ')} (100,000 ops)
  --backend       cuda (default when a GPU is present) or virtual
  --config k=v    an arena.* option for every config (repeatable)
  --compare LIST  another config: the --config options plus these (repeatable)
  --json          print the results as JSON
  --html FILE     also write a page drawing memory over the replay and the final regions
  --lenient       skip malformed lines and count them instead of stopping`,
}

class UsageError extends Error {}

function hasCode(e: unknown, code: string): e is Error & { code: string } {
  return e instanceof Error && (e as { code?: unknown }).code === code
}

interface Parsed {
  positional: string[]
  flags: Map<string, string[]>
}

function parseArgs(args: string[], withValue: string[], bare: string[]): Parsed {
  const out: Parsed = { positional: [], flags: new Map() }
  for (let i = 0; i < args.length; i++) {
    const a = args[i]
    if (withValue.includes(a)) {
      if (i + 1 >= args.length) throw new UsageError(`${a} needs a value`)
      out.flags.set(a, [...(out.flags.get(a) ?? []), args[++i]])
    } else if (bare.includes(a)) {
      out.flags.set(a, ['true'])
    } else if (a.startsWith('-')) {
      throw new UsageError(`unknown option ${a}`)
    } else {
      out.positional.push(a)
    }
  }
  return out
}

function one(p: Parsed, flag: string): string | undefined {
  const v = p.flags.get(flag)
  if (v && v.length > 1) throw new UsageError(`${flag} given more than once`)
  return v?.[0]
}

function pairs(list: string[], what: string): Record<string, string> {
  const out: Record<string, string> = {}
  for (const item of list) {
    const eq = item.indexOf('=')
    if (eq <= 0) throw new UsageError(`${what} must be key=value, got ${JSON.stringify(item)}`)
    out[item.slice(0, eq).trim()] = item.slice(eq + 1).trim()
  }
  return out
}

const mib = (n: number): string => `${(n / 2 ** 20).toFixed(1)} MiB`

function info(args: string[]): number {
  const p = parseArgs(args, [], ['--json'])
  const gpus = devices()
  if (one(p, '--json')) {
    console.log(JSON.stringify({ cuda: cudaAvailable(), devices: gpus }, (_, v: unknown) => (typeof v === 'bigint' ? Number(v) : v), 2))
    return 0
  }
  if (gpus.length === 0) {
    console.log('No CUDA driver or device here: the cuda backend is unavailable (host and virtual work).')
    return 0
  }
  for (const g of gpus) {
    console.log(`GPU ${g.ordinal}: ${g.name}, ${mib(Number(g.freeMemory))} free of ${mib(Number(g.totalMemory))}, PCI ${g.pciBusId}, memory pools ${g.memoryPoolsSupported ? 'supported' : 'not supported'}, compute ${g.computeCapability.join('.')}`)
  }
  return 0
}

function cFlags(args: string[]): number {
  const p = parseArgs(args, [], ['--json'])
  const lib = cLibrary()
  console.log(one(p, '--json') ? JSON.stringify(lib, null, 2) : lib.flags.join(' '))
  return 0
}

function genTrace(args: string[]): number {
  const p = parseArgs(args, ['--kind', '--ops', '--seed', '-o'], [])
  const kind = one(p, '--kind')
  if (!kind || !(KINDS as readonly string[]).includes(kind)) throw new UsageError(`--kind must be one of ${KINDS.join(', ')}`)
  const ops = Number(one(p, '--ops') ?? 100000)
  const seed = Number(one(p, '--seed') ?? 1)
  if (!Number.isInteger(ops) || ops < 1 || ops > 100_000_000) throw new UsageError('--ops must be an integer from 1 to 100000000')
  if (!Number.isInteger(seed) || seed < 0) throw new UsageError('--seed must be a non-negative integer')
  const out = one(p, '-o')
  if (out) {
    native.writeTraceFile(out, kind, ops, seed)
    return 0
  }
  const dir = mkdtempSync(join(tmpdir(), 'cuda-arena-'))
  try {
    const file = join(dir, 'trace.jsonl')
    native.writeTraceFile(file, kind, ops, seed)
    process.stdout.write(readFileSync(file))
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
  return 0
}

function replay(args: string[]): number {
  const p = parseArgs(args, ['--sample', '--backend', '--config', '--compare', '--html'], ['--json', '--lenient'])
  const sample = one(p, '--sample')
  if (p.positional.length > 1) throw new UsageError('give one trace file')
  if ((sample === undefined) === (p.positional.length === 0)) throw new UsageError('give a trace file or --sample NAME (one of them)')
  if (sample !== undefined && !(KINDS as readonly string[]).includes(sample)) throw new UsageError(`--sample must be one of ${KINDS.join(', ')}`)
  const backend = one(p, '--backend') ?? (cudaAvailable() ? 'cuda' : 'virtual')
  if (backend !== 'cuda' && backend !== 'virtual') throw new UsageError('--backend must be cuda or virtual')
  const base = pairs(p.flags.get('--config') ?? [], '--config')
  const configs = [base, ...(p.flags.get('--compare') ?? []).map((c) => ({ ...base, ...pairs(c.split(','), '--compare') }))]
  const labels = ['base' + (Object.keys(base).length ? ` (${Object.entries(base).map(([k, v]) => `${k}=${v}`).join(', ')})` : ''), ...(p.flags.get('--compare') ?? [])]
  const dir = sample === undefined ? undefined : mkdtempSync(join(tmpdir(), 'cuda-arena-'))
  try {
    const file = dir ? join(dir, `${sample}.jsonl`) : p.positional[0]
    if (dir && sample) native.writeTraceFile(file, sample, 100000, 1)
    // A progress bar for replays over a second, on a terminal only. The delay can be set (for
    // tests) with CUDA_ARENA_PROGRESS_AFTER_MS.
    const after = process.stderr.isTTY === true ? Number(process.env.CUDA_ARENA_PROGRESS_AFTER_MS ?? 1000) : 0
    const result = native.replayTraceFile(file, backend, configs, one(p, '--lenient') !== undefined, 200, after)
    const html = one(p, '--html')
    if (html) {
      const runs = result.runs.map((r, i) => ({ label: labels[i], ops: r.ops, peakRequested: r.peakRequested, peakHeld: r.peakHeld, samples: r.samples, memoryLog: r.memoryLog }))
      writeFileSync(html, renderReport(`cuda-arena replay of ${sample ? `sample ${sample}` : file} on ${backend}`, runs))
    }
    if (one(p, '--json')) {
      const json = { trace: sample ? `sample:${sample}` : file, backend, linesSkipped: result.linesSkipped, runs: result.runs.map((r, i) => ({ label: labels[i], ...r })) }
      console.log(JSON.stringify(json, (_, v: unknown) => (typeof v === 'bigint' ? Number(v) : v), 2))
      return 0
    }
    console.log(`trace ${sample ? `sample ${sample}` : file}: ${result.runs[0]?.ops ?? 0} ops on ${backend}${result.linesSkipped.length ? `, ${result.linesSkipped.length} lines skipped` : ''}`)
    const rows = result.runs.map((r, i) => [
      labels[i],
      mib(r.peakRequested),
      mib(r.peakHeld),
      (r.peakHeld / Math.max(1, r.peakRequested)).toFixed(3),
      String(r.stats.numArenaExtensions),
      String(r.stats.numArenaShrinkages),
      mib(Number(r.stats.totalAllocated)),
      mib(Number(r.stats.maxInUse)),
      String(r.failedAllocs),
      (r.elapsedNs / Math.max(1, r.ops)).toFixed(1),
    ])
    const head = ['config', 'peak requested', 'peak held', 'held/requested', 'extensions', 'shrinkages', 'held at end', 'MaxInUse', 'failed allocs', 'ns/op']
    const widths = head.map((h, c) => Math.max(h.length, ...rows.map((r) => r[c].length)))
    const line = (cells: string[]): string => cells.map((s, c) => (c === 0 ? s.padEnd(widths[c]) : s.padStart(widths[c]))).join('  ')
    console.log(line(head))
    for (const r of rows) console.log(line(r))
    return 0
  } finally {
    if (dir) rmSync(dir, { recursive: true, force: true })
  }
}

/** Runs the command line `args`; returns the exit code. */
export function run(args: string[]): number {
  const [cmd, ...rest] = args
  const commands: Record<string, (a: string[]) => number> = { info, 'gen-trace': genTrace, replay, 'c-flags': cFlags }
  if (!cmd || cmd === '--help' || cmd === '-h') {
    console.log(HELP.main)
    return cmd ? 0 : 1
  }
  const f = commands[cmd]
  if (!f) {
    console.error(`cuda-arena: unknown command ${JSON.stringify(cmd)}\n\n${HELP.main}`)
    return 1
  }
  if (rest.includes('--help') || rest.includes('-h')) {
    console.log(HELP[cmd])
    return 0
  }
  try {
    return f(rest)
  } catch (e) {
    if (e instanceof UsageError) console.error(`cuda-arena ${cmd}: ${e.message}\n\n${HELP[cmd]}`)
    else if (isArenaError(e) || hasCode(e, ERR_NO_NATIVE_BINDING)) console.error(`cuda-arena ${cmd}: ${e.code}: ${e.message}`)
    else throw e
    return 1
  }
}

if (require.main === module) process.exitCode = run(process.argv.slice(2))
