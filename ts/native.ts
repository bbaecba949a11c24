/** The generated napi-rs binding (build output in `native/`). Internal. */
import type * as Native from '../native/index'

// The loader picks the `.node` file for this platform and says which platform when none fits.
export const native: typeof Native = require('../native/index.js')
export type { Native }
