#!/usr/bin/env node
/**
 * `cuda-arena`: info, trace generation and trace replay. See `cuda-arena --help`.
 * The replay loop runs in Rust (through the binding); this file parses arguments and prints.
 */
import { loaded, oneLine } from './cli-guard'
import { closeSync, existsSync, ftruncateSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { native } from './native'
import { cLibrary, cudaAvailable, describe, devices, ERR_NO_NATIVE_BINDING, isArenaError } from './index'
import { renderReport } from './report'

loaded()

const KINDS = ['inference', 'mixed', 'small', 'growing'] as const
/** The most lines a trace file may have, and so the most operations gen-trace writes. */
const MAX_TRACE_LINES = 100_000_000
/** The most distinct stream numbers a replayed trace may use. */
const MAX_STREAMS = 1024
/** The largest PyTorch memory snapshot `replay` reads (`MAX_SNAPSHOT_BYTES` in Rust). */
const MAX_SNAPSHOT_BYTES = 2 ** 30
/** The most ops `--html` draws (`MAX_PICTURE_OPS` in Rust). */
const MAX_PICTURE_OPS = 10_000_000

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

Writes a trace of exactly N operations: {"op":"alloc","id":1,"size":4096,"stream":0} /
{"op":"free","id":1}, one per line, to FILE (default: standard output). --ops is 0 to
${MAX_TRACE_LINES} (default 100000); --seed is 0 to 2^53-1 (default 1). Everything is freed
by the end when N leaves room for it; an odd N ends with one allocation live.`,
  'c-flags': `Usage: cuda-arena c-flags [--json]

Prints the flags that compile and link a C or C++ program against the C library in this
platform's package (include/cuda_arena.h, lib/libcuda_arena.so), for example:
  cc app.c $(npx cuda-arena c-flags) -o app
With --json: the package, include and library directories, and the flags.`,
  replay: `Usage: cuda-arena replay TRACE|--sample NAME [--backend cuda|virtual] [--config k=v ...]
                          [--compare 'k=v,k=v' ...] [--json] [--html FILE] [--lenient] [--device N]
                          [--memory-log-at OP ...]

Replays the trace through a fresh arena per config and prints, per config: peak bytes
requested, peak bytes held, held/requested, arena extensions and shrinkages, the final stats
(bytes held at the end, MaxInUse; every stat with --json), and ns/op. TRACE is a trace file
(JSON lines) or a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot's pickle, told by
its first byte): its allocs and requested frees are replayed, and what was skipped is counted.
  --sample NAME   a generated sample trace: ${KINDS.join(', ')} (100,000 ops)
  --backend       cuda (default when a GPU is present) or virtual
  --config k=v    an arena.* option for every config (repeatable)
  --compare LIST  another config: the --config options plus these (repeatable)
  --json          print the results as JSON
  --html FILE     also write a page of the memory over the replay: allocations as bands,
                  and regions and chunks at the peak or after any op (docs/replay-report.md);
                  for traces of up to ${MAX_PICTURE_OPS} ops
  --lenient       skip malformed lines and count them instead of stopping
  --device N      a snapshot's device to replay (default: the one with the most events)
  --memory-log-at OP  with --json: each config's memory log (regions, chunks, reserves, bins,
                  stats) after the trace's first OP operations, 0 to the trace's length, in
                  "memoryLogsAt" (repeatable)

A config with arena.use_cuda_mempool=1 replays through the memory pool (it has no regions:
held is what the pool keeps from the device). Each "stream" number in the trace replays on a
stream of its own (at most ${MAX_STREAMS} distinct). A line over 4096 bytes, or more than
${MAX_TRACE_LINES} lines, stops the replay even with --lenient. A snapshot is decoded as it is
read, at most ${MAX_SNAPSHOT_BYTES} bytes; docs/pytorch.md says how its events become the trace.`,
}

class UsageError extends Error {}

/** `text` as a JSON string, cut to 40 characters: messages never quote unbounded input. */
function quote(text: string): string {
  return JSON.stringify(text.length > 40 ? `${text.slice(0, 40)}…` : text)
}

/** A whole decimal number 0 … `max` given as digits only (no sign, exponent or spaces). */
function digits(flag: string, text: string, max: number): number {
  const n = /^[0-9]{1,16}$/.test(text) ? Number(text) : NaN
  if (!(n <= max)) throw new UsageError(`${flag} must be a whole number 0 to ${max} (digits only), got ${quote(text)}`)
  return n
}

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
      throw new UsageError(`unknown option ${quote(a)}`)
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
    if (eq <= 0) throw new UsageError(`${what} must be key=value, got ${quote(item)}`)
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
  const ops = digits('--ops', one(p, '--ops') ?? '100000', MAX_TRACE_LINES)
  const seed = digits('--seed', one(p, '--seed') ?? '1', Number.MAX_SAFE_INTEGER)
  if (p.positional.length > 0) throw new UsageError(`unexpected argument ${quote(p.positional[0])}`)
  // Written by the native layer, streamed: to the file, or to standard output (nothing else
  // is printed), where a reader that stops early (| head) ends the output quietly.
  native.writeTraceFile(one(p, '-o') ?? null, kind, ops, seed)
  return 0
}

/**
 * The `--html` output, opened before the replay so an unwritable path fails at once. It is
 * opened for appending (an existing file is not emptied until the page is ready), and a
 * file this run created is removed again if the replay fails.
 */
class HtmlOut {
  private readonly fd: number
  private readonly created: boolean
  private done = false

  constructor(readonly path: string) {
    this.created = !existsSync(path)
    try {
      this.fd = openSync(path, 'a')
    } catch (e) {
      throw new Error(`cannot write --html ${path}: ${(e as Error).message}`)
    }
  }

  write(page: string): void {
    try {
      ftruncateSync(this.fd, 0)
      writeSync(this.fd, page)
      this.done = true
    } catch (e) {
      throw new Error(`cannot write --html ${this.path}: ${(e as Error).message}`)
    }
  }

  close(): void {
    closeSync(this.fd)
    if (!this.done && this.created) rmSync(this.path, { force: true })
  }
}

/** CUDA_ARENA_MAX_TRACE_LINES lowers the line limit (tests use it); the default is the most. */
function maxLines(): number {
  const v = process.env.CUDA_ARENA_MAX_TRACE_LINES
  return v === undefined ? MAX_TRACE_LINES : digits('CUDA_ARENA_MAX_TRACE_LINES', v, MAX_TRACE_LINES)
}

const plural = (n: number, one: string, many: string): string => `${n} ${n === 1 ? one : many}`

/** One line on what a PyTorch snapshot's reader replayed, skipped and counted. */
function snapshotSummary(s: NonNullable<ReturnType<typeof native.replayTraceFile>['snapshot']>): string {
  const devices = s.deviceEvents.length
  const skipped = [
    s.unknownFrees ? `${plural(s.unknownFrees, 'free', 'frees')} of blocks allocated before the history starts` : '',
    s.liveAddressAllocs ? `${plural(s.liveAddressAllocs, 'alloc', 'allocs')} at a live address (its block freed first)` : '',
    s.zeroSizeAllocs ? `${plural(s.zeroSizeAllocs, 'alloc', 'allocs')} of 0 bytes` : '',
    s.freeCompleted ? `${s.freeCompleted} free_completed` : '',
    s.segmentEvents ? `${plural(s.segmentEvents, 'segment event', 'segment events')}` : '',
    s.otherEvents ? `${plural(s.otherEvents, 'other event', 'other events')} (snapshot, oom, ...)` : '',
  ].filter(Boolean)
  return (
    `PyTorch snapshot, device ${s.device} (of ${devices}, ${plural(s.deviceEvents[s.device] ?? 0, 'event', 'events')}): ` +
    `${plural(s.allocs, 'alloc', 'allocs')} and ${plural(s.frees, 'free', 'frees')} replayed on ${plural(s.streams.length, 'stream', 'streams')}` +
    (s.freedAtEnd ? `, ${plural(s.freedAtEnd, 'block', 'blocks')} live at the end freed at the end` : '') +
    (skipped.length ? `; not replayed: ${skipped.join(', ')}` : '')
  )
}

function replay(args: string[]): number {
  const p = parseArgs(args, ['--sample', '--backend', '--config', '--compare', '--html', '--device', '--memory-log-at'], ['--json', '--lenient'])
  const sample = one(p, '--sample')
  if (p.positional.length > 1) throw new UsageError('give one trace file')
  if ((sample === undefined) === (p.positional.length === 0)) throw new UsageError('give a trace file or --sample NAME (one of them)')
  if (sample !== undefined && !(KINDS as readonly string[]).includes(sample)) throw new UsageError(`--sample must be one of ${KINDS.join(', ')}`)
  const deviceFlag = one(p, '--device')
  const device = deviceFlag === undefined ? undefined : digits('--device', deviceFlag, 2 ** 32 - 1)
  if (device !== undefined && sample !== undefined) throw new UsageError('--device is for a PyTorch memory snapshot, not --sample')
  const backend = one(p, '--backend') ?? (cudaAvailable() ? 'cuda' : 'virtual')
  if (backend !== 'cuda' && backend !== 'virtual') throw new UsageError('--backend must be cuda or virtual')
  const base = pairs(p.flags.get('--config') ?? [], '--config')
  const configs = [base, ...(p.flags.get('--compare') ?? []).map((c) => ({ ...base, ...pairs(c.split(','), '--compare') }))]
  const labels = ['base' + (Object.keys(base).length ? ` (${Object.entries(base).map(([k, v]) => `${k}=${v}`).join(', ')})` : ''), ...(p.flags.get('--compare') ?? [])]
  const limit = maxLines()
  const logsAt = (p.flags.get('--memory-log-at') ?? []).map((v) => digits('--memory-log-at', v, MAX_TRACE_LINES))
  if (logsAt.length && !one(p, '--json')) throw new UsageError('--memory-log-at prints with --json')
  const htmlPath = one(p, '--html')
  const html = htmlPath === undefined ? undefined : new HtmlOut(htmlPath)
  const dir = sample === undefined ? undefined : mkdtempSync(join(tmpdir(), 'cuda-arena-'))
  try {
    const file = dir ? join(dir, `${sample}.jsonl`) : p.positional[0]
    if (dir && sample) native.writeTraceFile(file, sample, 100000, 1)
    // A progress bar for replays over a second, on a terminal only. The delay can be set (for
    // tests) with CUDA_ARENA_PROGRESS_AFTER_MS.
    const after = process.stderr.isTTY === true ? Number(process.env.CUDA_ARENA_PROGRESS_AFTER_MS ?? 1000) : 0
    const result = native.replayTraceFile(file, backend, configs, {
      lenient: one(p, '--lenient') !== undefined,
      samples: 200,
      progressAfterMs: after,
      maxLines: limit,
      device,
      picture: html !== undefined,
      memoryLogAt: logsAt,
    })
    for (const r of result.runs) for (const w of r.warnings) console.error(`cuda-arena replay: warning: ${oneLine(w)}`)
    const what = sample ? `sample ${sample}` : file
    if (html) {
      const ops = result.runs[0]?.ops ?? 0
      const runs = result.runs.flatMap((r, i) => (r.picture ? [{ ...r, label: labels[i], picture: r.picture }] : []))
      html.write(
        renderReport({
          title: `cuda-arena replay of ${what} on ${backend}`,
          subtitle: [`${ops.toLocaleString('en')} ops`, result.snapshot ? snapshotSummary(result.snapshot) : ''].filter(Boolean).join(' · '),
          ops,
          streams: result.snapshot?.streams.map((h) => `torch stream 0x${h.toString(16)}`),
          runs,
        }),
      )
    }
    if (one(p, '--json')) {
      // The picture is the page's; memory logs at ops only when asked for.
      const shown = result.runs.map(({ picture: _, memoryLogsAt, ...r }, i) => ({ label: labels[i], ...r, ...(logsAt.length ? { memoryLogsAt } : {}) }))
      const json = { trace: sample ? `sample:${sample}` : file, backend, linesSkipped: result.linesSkipped, linesSkippedCount: result.linesSkippedCount, snapshot: result.snapshot ?? null, runs: shown }
      console.log(JSON.stringify(json, (_, v: unknown) => (typeof v === 'bigint' ? Number(v) : v), 2))
      return 0
    }
    const first = result.runs[0]
    const notes = [
      result.linesSkippedCount ? `${plural(result.linesSkippedCount, 'line', 'lines')} skipped` : '',
      first?.liveAtEnd ? `${plural(first.liveAtEnd, 'allocation', 'allocations')} live at the end (freed after the replay)` : '',
    ].filter(Boolean)
    console.log(`trace ${what}: ${first?.ops ?? 0} ops on ${backend}${notes.map((n) => `, ${n}`).join('')}`)
    if (result.snapshot) console.log(snapshotSummary(result.snapshot))
    // A memory pool has no regions: "extensions" does not apply to it.
    const isPool = (r: (typeof result.runs)[number]): boolean => r.allocator === 'memory pool'
    const rows = result.runs.map((r, i) => [
      labels[i],
      mib(r.peakRequested),
      mib(r.peakHeld),
      (r.peakHeld / Math.max(1, r.peakRequested)).toFixed(3),
      isPool(r) ? 'n/a' : String(r.stats.numArenaExtensions),
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
    const pools = result.runs.flatMap((r, i) => (isPool(r) ? [labels[i]] : []))
    if (pools.length) {
      console.log(`memory pool (${pools.join('; ')}): no regions or chunks; held is what the pool keeps from the device (live blocks and its cache)`)
    }
    return 0
  } finally {
    html?.close()
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
  const f = Object.prototype.hasOwnProperty.call(commands, cmd) ? commands[cmd] : undefined
  if (!f) {
    console.error(oneLine(`cuda-arena: unknown command ${quote(cmd)} (see cuda-arena --help)`))
    return 1
  }
  if (rest.includes('--help') || rest.includes('-h')) {
    console.log(HELP[cmd])
    return 0
  }
  try {
    return f(rest)
  } catch (e) {
    // One line for every error, the user's and the unexpected alike (a stack trace with
    // CUDA_ARENA_DEBUG=1).
    if (e instanceof UsageError) console.error(oneLine(`cuda-arena ${cmd}: ${e.message} (see cuda-arena ${cmd} --help)`))
    else if (isArenaError(e) || hasCode(e, ERR_NO_NATIVE_BINDING)) console.error(oneLine(`cuda-arena ${cmd}: ${e.code}: ${e.message}`))
    else console.error(oneLine(`cuda-arena ${cmd}: ${e instanceof Error ? e.message : describe(e)}`))
    if (process.env.CUDA_ARENA_DEBUG === '1') console.error(e)
    return 1
  }
}

if (require.main === module) process.exitCode = run(process.argv.slice(2))
