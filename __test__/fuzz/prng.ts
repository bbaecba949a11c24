/**
 * The fuzzer's one source of choices: sfc32, seeded through splitmix32, so a seed replays a run
 * exactly. Written here rather than taken from a package: it is twenty lines, and the project
 * has no dependency that ships one (a new dev dependency for this alone is not worth it).
 */
export class Prng {
  #a: number
  #b: number
  #c: number
  #d: number

  constructor(seed: number) {
    let s = seed >>> 0
    const splitmix = (): number => {
      s = (s + 0x9e3779b9) >>> 0
      let z = s
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b)
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35)
      return (z ^ (z >>> 16)) >>> 0
    }
    this.#a = splitmix()
    this.#b = splitmix()
    this.#c = splitmix()
    this.#d = splitmix()
    for (let i = 0; i < 12; i++) this.u32()
  }

  /** A uniform 32-bit unsigned integer. */
  u32(): number {
    const t = (((this.#a + this.#b) >>> 0) + this.#d) >>> 0
    this.#d = (this.#d + 1) >>> 0
    this.#a = this.#b ^ (this.#b >>> 9)
    this.#b = (this.#c + (this.#c << 3)) >>> 0
    this.#c = ((this.#c << 21) | (this.#c >>> 11)) >>> 0
    this.#c = (this.#c + t) >>> 0
    return t
  }

  /** An integer in `0 … n-1` (`n` at most 2^32). */
  int(n: number): number {
    return n <= 1 ? 0 : Math.floor((this.u32() / 2 ** 32) * n)
  }

  /** An integer in `lo … hi`. */
  range(lo: number, hi: number): number {
    return lo + this.int(hi - lo + 1)
  }

  /** True with probability `p`. */
  chance(p: number): boolean {
    return this.u32() < p * 2 ** 32
  }

  pick<T>(items: readonly T[]): T {
    if (items.length === 0) throw new Error('pick from an empty list')
    return items[this.int(items.length)]
  }

  /** One of `table`'s values, with probability proportional to its weight. */
  weighted<T>(table: readonly (readonly [number, T])[]): T {
    const total = table.reduce((s, [w]) => s + w, 0)
    let x = this.u32() / 2 ** 32 * total
    for (const [w, v] of table) {
      if (x < w) return v
      x -= w
    }
    return table[table.length - 1][1]
  }

  /** A size in `lo … hi`, log-uniform (small sizes as often as large ones). */
  logSize(lo: number, hi: number): number {
    const l = Math.log2(Math.max(1, lo))
    const h = Math.log2(Math.max(1, hi))
    return Math.min(hi, Math.max(lo, Math.floor(2 ** (l + (this.u32() / 2 ** 32) * (h - l)))))
  }
}
