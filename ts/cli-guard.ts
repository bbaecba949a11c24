/**
 * Imported first by the command: when the native binary cannot load (no package for this
 * platform), the imports after it throw before any command runs. This prints that error as
 * one line with its code, as the command prints its other errors, instead of a stack trace.
 */
import { ERR_NO_NATIVE_BINDING } from './platform'

function onLoadError(e: unknown): never {
  if (e instanceof Error && (e as { code?: unknown }).code === ERR_NO_NATIVE_BINDING) {
    console.error(`cuda-arena: ${ERR_NO_NATIVE_BINDING}: ${e.message}`)
  } else {
    console.error(e)
  }
  process.exit(1)
}

process.on('uncaughtException', onLoadError)

/** The command's imports are done: errors from here on are the command's own. */
export function loaded(): void {
  process.off('uncaughtException', onLoadError)
}
