/** The generated napi-rs binding (build output in `native/`). Internal. */
import type * as Native from '../native/index'
import { bindingMismatch, bindingNotFound } from './platform'

// The generated loader picks the `.node` file for this platform: beside it in a repository
// build, else from the platform package. Its own error does not say which platform it
// looked for, so a failure is rethrown naming it; a binary of another version (a stale
// platform package) is refused rather than half-working.
function load(): typeof Native {
  let binding: typeof Native
  try {
    binding = require('../native/index.js') as typeof Native
  } catch (e) {
    throw bindingNotFound(e)
  }
  const mismatch = bindingMismatch(binding.nativeVersion())
  if (mismatch) throw mismatch
  return binding
}

export const native: typeof Native = load()
export type { Native }
