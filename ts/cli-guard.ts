/**
 * Imported first by the command: when the native binary cannot load (no package for this
 * platform), the imports after it throw before any command runs. This prints that error as
 * one line with its code, as the command prints its other errors, instead of a stack trace.
 * Once the command runs, an error that escapes it asynchronously (a write to a closed pipe)
 * is one line too. `CUDA_ARENA_DEBUG=1` prints the stack as well.
 */
import { ERR_NO_NATIVE_BINDING } from './platform'

/** The longest error line the command prints; longer messages are cut with `…`. */
const MAX_LINE = 1000

/** `message` on one line and at most {@link MAX_LINE} characters. */
export function oneLine(message: string): string {
  const flat = message.replace(/[\r\n]+/g, ' ')
  return flat.length > MAX_LINE ? `${flat.slice(0, MAX_LINE - 1)}…` : flat
}

function codeOf(e: unknown): unknown {
  return e instanceof Error ? (e as { code?: unknown }).code : undefined
}

function messageOf(e: unknown): string {
  try {
    return e instanceof Error ? e.message : String(e)
  } catch {
    return 'an error that cannot be printed'
  }
}

function debug(e: unknown): void {
  if (process.env.CUDA_ARENA_DEBUG === '1') console.error(e)
}

function onLoadError(e: unknown): never {
  if (codeOf(e) === ERR_NO_NATIVE_BINDING) {
    console.error(oneLine(`cuda-arena: ${ERR_NO_NATIVE_BINDING}: ${messageOf(e)}`))
  } else {
    console.error(oneLine(`cuda-arena: ${messageOf(e)}`))
  }
  debug(e)
  process.exit(1)
}

function onRunError(e: unknown): void {
  // A reader that closed our output early (`| head`) wanted no more of it: not an error.
  if (codeOf(e) === 'EPIPE') process.exit(process.exitCode ?? 0)
  console.error(oneLine(`cuda-arena: ${messageOf(e)}`))
  debug(e)
  process.exit(1)
}

process.on('uncaughtException', onLoadError)

/** The command's imports are done: errors from here on are the command's own. */
export function loaded(): void {
  process.off('uncaughtException', onLoadError)
  process.on('uncaughtException', onRunError)
}
