/// <reference lib="dom" />
/** What the functions of the `--html` page's script share (types only; script.ts says how the
 * script is put together). */
import type { PageData, PageRun } from '../types'

/** A table unpacked: its columns by name. */
export interface Table {
  rows: number
  col: Record<string, Float64Array>
}

/** One config, ready to draw. */
export interface Run {
  meta: PageRun
  index: number
  allocs: Table
  regions: Table
  streamFree: Table
  held: Table
  /** Bytes handed out and requested after each op, 0 … ops. */
  inUse: Float64Array
  requested: Float64Array
  /** Allocations holding bytes, largest first. */
  bySize: Int32Array
  /** The allocations drawn as bands of their own (the `detail` largest): flags, and the
   * same in trace order and by the op that freed them. */
  drawn: Uint8Array
  drawnByBorn: Int32Array
  drawnByDied: Int32Array
  /** Ops at which an allocation failed, ascending. */
  failedAt: Float64Array
}

/** What is shown: the ops in view, the op picked for the maps (null: each at its peak). */
export interface View {
  from: number
  to: number
  picked: number | null
  detail: number
  /** Whether the bytes axis starts below the least requested in view rather than at 0. */
  fitY: boolean
}

/** The page's state. */
export interface Ctx {
  data: PageData
  runs: Run[]
  view: View
  tip: HTMLElement
  /** Each timeline's columns, to move its picked-op line without drawing it again. */
  charts: { svg: SVGSVGElement; cols: Cols }[]
}

/** Column boundaries of a chart: column j covers ops [b[j], b[j+1]) and pixels [x[j], x[j+1]). */
export interface Cols {
  n: number
  b: Float64Array
  x: Float64Array
}

/** Any function of the page's script. */
export type PageFunction = (...args: never[]) => unknown
