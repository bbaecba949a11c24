/**
 * The few protobuf encodings an ONNX model needs, written here so the test model is built
 * from nothing fetched (no `onnx` package, no Python): varint and length-delimited fields
 * only, which is all of ModelProto/GraphProto/NodeProto/TensorProto/ValueInfoProto that the
 * builder uses. A message is the concatenation of its fields, so messages nest as bytes.
 */

const VARINT = 0
const LENGTH_DELIMITED = 2

/** An unsigned varint (7 bits a byte, low first). */
function varintBytes(value: number | bigint): Uint8Array {
  let v = BigInt(value)
  if (v < 0n) throw new RangeError(`protobuf varints here are unsigned, got ${v}`)
  const out: number[] = []
  do {
    const low = Number(v & 0x7fn)
    v >>= 7n
    out.push(v === 0n ? low : low | 0x80)
  } while (v !== 0n)
  return Uint8Array.from(out)
}

function tag(field: number, wireType: number): Uint8Array {
  return varintBytes((field << 3) | wireType)
}

/** A varint field (int32, int64, enum: non-negative values). */
export function varint(field: number, value: number | bigint): Uint8Array {
  return concat([tag(field, VARINT), varintBytes(value)])
}

/** A length-delimited field: bytes, or an embedded message's bytes. */
export function bytes(field: number, data: Uint8Array): Uint8Array {
  return concat([tag(field, LENGTH_DELIMITED), varintBytes(data.length), data])
}

/** A string field (UTF-8). */
export function string(field: number, s: string): Uint8Array {
  return bytes(field, new TextEncoder().encode(s))
}

/** An embedded message field made of `parts` (its fields, in order). */
export function message(field: number, parts: Uint8Array[]): Uint8Array {
  return bytes(field, concat(parts))
}

/** Fields one after another: a message's body, or a whole top-level message. */
export function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0))
  let at = 0
  for (const p of parts) {
    out.set(p, at)
    at += p.length
  }
  return out
}
