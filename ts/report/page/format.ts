/** Numbers, addresses and streams as the page writes them. */
import type { Ctx, PageFunction } from './model'

export function esc(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`)
}

/** Bytes as KiB/MiB/GiB with one decimal. */
export function fmtBytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB']
  let u = 0
  while (Math.abs(n) >= 1024 && u < units.length - 1) {
    n /= 1024
    u++
  }
  return u === 0 ? `${n} B` : `${n.toFixed(1)} ${units[u]}`
}

/** A whole number with thousands separators. */
export function fmtInt(n: number): string {
  return n.toLocaleString('en')
}

/** A size as "1.0 MiB (1,048,576 bytes)". */
export function fmtSize(n: number): string {
  return n < 1024 ? `${fmtInt(n)} bytes` : `${fmtBytes(n)} (${fmtInt(n)} bytes)`
}

export function fmtAddr(n: number): string {
  return `0x${n.toString(16)}`
}

export function streamName(ctx: Ctx, s: number): string {
  if (s === 0) return 'no stream'
  const name = ctx.data.streams[s]
  return name ? `stream ${s} (${name})` : `stream ${s}`
}

/** This module's page functions, put into the page by their source (script.ts). */
export const FORMAT_FUNCTIONS: PageFunction[] = [esc, fmtBytes, fmtInt, fmtSize, fmtAddr, streamName]
