/**
 * The script of the `--html` page, run in the browser. It only draws what the replay gave
 * (`pack.ts` has the numbers exactly): per config, the bytes held, handed out and requested
 * over the ops, the live allocations stacked as bands in the order they were made (the
 * largest individually, the rest as one band on top), and the regions and chunks after any
 * op: the allocations live then are the chunks in use, the free chunks a stream owns are the
 * replay's, every other byte of a region is free.
 *
 * Its functions are put into the page by their source: each module here lists its page
 * functions, and the page gets every list, so they all share one scope there. Each stands
 * alone: no imports but types, no module-level values; shared state travels in a `Ctx`;
 * another module's function is called by name, declared with its type, since a call through
 * an import compiles to a module property the page does not have
 * (`__test__/html-script.spec.ts` checks it).
 */
import { DATA_FUNCTIONS } from './data'
import { FORMAT_FUNCTIONS } from './format'
import { GEOMETRY_FUNCTIONS } from './geometry'
import { INTERACTION_FUNCTIONS } from './interaction'
import { MAIN_FUNCTIONS } from './main'
import { MAP_FUNCTIONS } from './map'
import type { PageFunction } from './model'
import { TIMELINE_FUNCTIONS } from './timeline'

/** Every function of the page, each module's in turn. */
export const PAGE_FUNCTIONS: readonly PageFunction[] = [
  ...DATA_FUNCTIONS,
  ...FORMAT_FUNCTIONS,
  ...GEOMETRY_FUNCTIONS,
  ...TIMELINE_FUNCTIONS,
  ...MAP_FUNCTIONS,
  ...INTERACTION_FUNCTIONS,
  ...MAIN_FUNCTIONS,
]

/** The page's script: every page function by its source, then the call of the entry. Run
 * through tsx (the tests), esbuild keeps function names with a `__name` helper the page
 * does not have; it is defined as doing nothing. */
export const PAGE_SCRIPT = ['var __name = function (f) { return f; };', ...PAGE_FUNCTIONS.map((f) => f.toString()), 'cudaArenaReport();'].join('\n')
