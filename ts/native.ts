/** The generated napi-rs binding (build output in `native/`). Internal. */
// eslint-disable-next-line @typescript-eslint/no-require-imports
import type * as Native from '../native/index'

// The loader picks the `.node` file for this platform and says which platform when none fits.
// eslint-disable-next-line @typescript-eslint/no-require-imports
export const native: typeof Native = require('../native/index.js')
export type { Native }
