/** What the `--html` page is given: the report's numbers and how its picture is packed. */
import type { PackedTable } from './pack'

/** One config's numbers for the summary table. */
export interface PageSummary {
  peakHeld: number
  peakRequested: number
  /** `null` for a memory pool (it has no regions to extend). */
  extensions: number | null
  shrinkages: number
  failedAllocs: number
  nsPerOp: number
  heldAtEnd: number
  maxInUse: number
}

/** One config replayed. */
export interface PageRun {
  label: string
  /** Its colour on the page. */
  color: string
  /** `arena` or `memory pool`. */
  allocator: string
  /** Whether it has regions and chunks to map (an arena). */
  layout: boolean
  summary: PageSummary
  /** The first op after which the most bytes were held. */
  peakHeldAt: number
  /** Checks of the followed free chunks against the memory log, and how many differed. */
  checks: number
  mismatches: number
  /** Its picture's tables, packed (`pack.ts`). */
  tables: { allocs: PackedTable; regions: PackedTable; streamFree: PackedTable; held: PackedTable }
}

/** The whole page's data. */
export interface PageData {
  title: string
  /** A line on the trace: what it is, its ops, the backend. */
  subtitle: string
  /** Operations in the trace (the last op). */
  ops: number
  /** A name for each trace stream number from 1 (index 0 is "none"). */
  streams: string[]
  runs: PageRun[]
}
