//! A small ONNX model written by hand, for running real sessions in the tests: `layers` of
//! MatMul + Add + Relu (the last without Relu) over float tensors, with deterministic weights.
//! ONNX files are protobuf; the few messages needed (ModelProto, GraphProto, NodeProto,
//! TensorProto with raw_data, ValueInfoProto) are written with a protobuf writer of ~40
//! lines rather than a protobuf crate plus ONNX's schema, which would be far more than this
//! needs. Field numbers are ONNX's (onnx.proto).

/// Protobuf wire types.
const VARINT: u64 = 0;
const LEN: u64 = 2;

#[derive(Default)]
struct Msg(Vec<u8>);

impl Msg {
    fn varint(&mut self, mut v: u64) {
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                self.0.push(byte);
                return;
            }
            self.0.push(byte | 0x80);
        }
    }
    fn tag(&mut self, field: u64, wire: u64) {
        self.varint(field << 3 | wire);
    }
    fn int(mut self, field: u64, v: i64) -> Self {
        self.tag(field, VARINT);
        self.varint(v as u64);
        self
    }
    fn bytes(mut self, field: u64, b: &[u8]) -> Self {
        self.tag(field, LEN);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
        self
    }
    fn str(self, field: u64, s: &str) -> Self {
        self.bytes(field, s.as_bytes())
    }
    fn msg(self, field: u64, m: Msg) -> Self {
        self.bytes(field, &m.0)
    }
}

const FLOAT: i64 = 1;

/// ValueInfoProto of a float tensor named `name` with `dims` (a negative dim is symbolic).
fn value_info(name: &str, dims: &[i64]) -> Msg {
    let shape = dims.iter().fold(Msg::default(), |shape, &d| {
        let dim = if d < 0 {
            Msg::default().str(2, "batch")
        } else {
            Msg::default().int(1, d)
        };
        shape.msg(1, dim)
    });
    let tensor = Msg::default().int(1, FLOAT).msg(2, shape);
    Msg::default()
        .str(1, name)
        .msg(2, Msg::default().msg(1, tensor))
}

/// TensorProto `name` of `dims` holding `values` as raw little-endian floats.
fn initializer(name: &str, dims: &[i64], values: &[f32]) -> Msg {
    let raw: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let t = dims.iter().fold(Msg::default(), |t, &d| t.int(1, d));
    t.int(2, FLOAT).str(8, name).bytes(9, &raw)
}

fn node(op: &str, inputs: &[&str], output: &str) -> Msg {
    let n = inputs.iter().fold(Msg::default(), |n, i| n.str(1, i));
    n.str(2, output).str(3, output).str(4, op)
}

/// Deterministic values in [-scale, scale).
fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// The model: input `X` [batch, widths[0]] → output `Y` [batch, widths.last()], one MatMul +
/// Add (+ Relu but for the last) per step between widths. Weights total
/// 4 · Σ widths[i]·widths[i+1] bytes.
pub fn mlp(widths: &[usize]) -> Vec<u8> {
    let mut graph = Msg::default().str(2, "cuda_arena_test_mlp");
    let mut x = "X".to_string();
    let layers = widths.len() - 1;
    for l in 0..layers {
        let (i, o) = (widths[l], widths[l + 1]);
        let (w, b) = (format!("W{l}"), format!("B{l}"));
        let scale = (2.0 / i as f32).sqrt();
        graph = graph
            .msg(
                5,
                initializer(
                    &w,
                    &[i as i64, o as i64],
                    &values(i * o, 2 * l as u64 + 1, scale),
                ),
            )
            .msg(
                5,
                initializer(&b, &[o as i64], &values(o, 2 * l as u64 + 2, 0.1)),
            );
        let (mm, add) = (format!("mm{l}"), format!("add{l}"));
        graph = graph.msg(1, node("MatMul", &[&x, &w], &mm));
        let last = l + 1 == layers;
        let out = if last {
            "Y".to_string()
        } else {
            format!("relu{l}")
        };
        graph = graph.msg(1, node("Add", &[&mm, &b], if last { &out } else { &add }));
        if !last {
            graph = graph.msg(1, node("Relu", &[&add], &out));
        }
        x = out;
    }
    let first = widths[0] as i64;
    let last = widths[layers] as i64;
    graph = graph
        .msg(11, value_info("X", &[-1, first]))
        .msg(12, value_info("Y", &[-1, last]));
    Msg::default()
        .int(1, 8) // ir_version
        .str(2, "cuda-arena tests") // producer_name
        .msg(7, graph)
        .msg(8, Msg::default().str(1, "").int(2, 17)) // opset_import: ai.onnx 17
        .0
}

/// The input values the tests feed: `batch` rows of `width`.
pub fn input(batch: usize, width: usize) -> Vec<f32> {
    values(batch * width, 99, 1.0)
}

/// Bytes of weights and biases in `mlp(widths)`.
pub fn weight_bytes(widths: &[usize]) -> usize {
    widths.windows(2).map(|w| 4 * (w[0] * w[1] + w[1])).sum()
}
