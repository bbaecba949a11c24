//! The trace file format of `cuda-arena replay`: JSON lines, one operation each,
//! `{"op":"alloc","id":1,"size":4096,"stream":0}` or `{"op":"free","id":1}` (keys in any
//! order, `stream` optional). Parsed by hand: a million lines take a fraction of a second.
//! Every problem names its line; lenient parsing skips bad lines and counts them.

use crate::trace::TraceOp;
use std::collections::HashSet;
use std::fmt::Write as _;

/// A problem with one line of a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceLineError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for TraceLineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// A parsed trace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParsedTrace {
    /// The operations, in order.
    pub ops: Vec<TraceOp>,
    /// Lines skipped in lenient mode, with why.
    pub skipped: Vec<TraceLineError>,
}

/// One `"key": value` scanner over a line.
struct Fields<'a> {
    s: &'a [u8],
    i: usize,
}

#[derive(Debug, PartialEq, Eq)]
enum Value<'a> {
    Str(&'a str),
    Num(&'a str),
}

impl<'a> Fields<'a> {
    fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        self.ws();
        if self.s.get(self.i) == Some(&c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn string(&mut self) -> Result<&'a str, String> {
        if !self.eat(b'"') {
            return Err("expected a string".into());
        }
        let start = self.i;
        while self.i < self.s.len() && self.s[self.i] != b'"' {
            if self.s[self.i] == b'\\' {
                return Err("escapes are not used in traces".into());
            }
            self.i += 1;
        }
        if self.i >= self.s.len() {
            return Err("unterminated string".into());
        }
        let v = std::str::from_utf8(&self.s[start..self.i]).map_err(|_| "not UTF-8".to_string())?;
        self.i += 1;
        Ok(v)
    }

    fn value(&mut self) -> Result<Value<'a>, String> {
        self.ws();
        match self.s.get(self.i) {
            Some(b'"') => self.string().map(Value::Str),
            Some(c) if c.is_ascii_digit() || *c == b'-' => {
                let start = self.i;
                while self.i < self.s.len()
                    && matches!(
                        self.s[self.i],
                        b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'
                    )
                {
                    self.i += 1;
                }
                Ok(Value::Num(
                    std::str::from_utf8(&self.s[start..self.i]).unwrap_or(""),
                ))
            }
            _ => Err("expected a string or a number".into()),
        }
    }
}

fn uint(key: &str, v: &Value<'_>) -> Result<u64, String> {
    match v {
        Value::Num(n) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => n
            .parse()
            .map_err(|_| format!("{key} {n} does not fit in 64 bits")),
        Value::Num(n) => Err(format!(
            "{key} must be a whole non-negative number, got {n}"
        )),
        Value::Str(s) => Err(format!("{key} must be a number, got the string {s:?}")),
    }
}

/// Parses one line into an operation (`None` for a blank line).
fn parse_line(line: &str) -> Result<Option<TraceOp>, String> {
    let mut f = Fields {
        s: line.as_bytes(),
        i: 0,
    };
    f.ws();
    if f.i == f.s.len() {
        return Ok(None);
    }
    if !f.eat(b'{') {
        return Err("expected a JSON object".into());
    }
    let (mut op, mut id, mut size, mut stream) = (None, None, None, None);
    if !f.eat(b'}') {
        loop {
            let key = f.string()?;
            if !f.eat(b':') {
                return Err(format!("expected ':' after \"{key}\""));
            }
            let v = f.value()?;
            match key {
                "op" => match v {
                    Value::Str(s) => op = Some(s),
                    Value::Num(n) => {
                        return Err(format!("op must be \"alloc\" or \"free\", got {n}"))
                    }
                },
                "id" => id = Some(uint("id", &v)?),
                "size" => size = Some(uint("size", &v)?),
                "stream" => {
                    let s = uint("stream", &v)?;
                    stream =
                        Some(u32::try_from(s).map_err(|_| format!("stream {s} is too large"))?);
                }
                other => return Err(format!("unknown key \"{other}\"")),
            }
            if f.eat(b',') {
                continue;
            }
            if f.eat(b'}') {
                break;
            }
            return Err("expected ',' or '}'".into());
        }
    }
    f.ws();
    if f.i != f.s.len() {
        return Err("unexpected text after the object".into());
    }
    let id = id.ok_or("missing \"id\"")?;
    match op.ok_or("missing \"op\"")? {
        "alloc" => Ok(Some(TraceOp::Alloc {
            id,
            size: size.ok_or("an alloc needs \"size\"")?,
            stream: stream.unwrap_or(0),
        })),
        "free" => Ok(Some(TraceOp::Free { id })),
        other => Err(format!("op must be \"alloc\" or \"free\", got \"{other}\"")),
    }
}

/// Parses a whole trace. Besides malformed lines, an alloc of an id that is live, and a free
/// of an id that is not live (unknown or already freed), are errors. With `lenient`, such
/// lines are skipped and listed instead.
pub fn parse_trace(text: &str, lenient: bool) -> Result<ParsedTrace, TraceLineError> {
    let mut out = ParsedTrace::default();
    let mut live: HashSet<u64> = HashSet::new();
    for (n, line) in text.lines().enumerate() {
        let checked = parse_line(line).and_then(|op| match op {
            Some(TraceOp::Alloc { id, .. }) if live.contains(&id) => {
                Err(format!("id {id} is allocated while live"))
            }
            Some(TraceOp::Free { id }) if !live.contains(&id) => {
                Err(format!("free of id {id}, which is not live"))
            }
            other => Ok(other),
        });
        match checked {
            Ok(Some(op)) => {
                match op {
                    TraceOp::Alloc { id, .. } => live.insert(id),
                    TraceOp::Free { id } => live.remove(&id),
                };
                out.ops.push(op);
            }
            Ok(None) => {}
            Err(message) => {
                let e = TraceLineError {
                    line: n + 1,
                    message,
                };
                if !lenient {
                    return Err(e);
                }
                out.skipped.push(e);
            }
        }
    }
    Ok(out)
}

/// Writes `ops` in the trace format, one line each.
pub fn format_trace(ops: &[TraceOp]) -> String {
    let mut s = String::with_capacity(ops.len() * 40);
    for op in ops {
        let _ = match *op {
            TraceOp::Alloc { id, size, stream } => writeln!(
                s,
                r#"{{"op":"alloc","id":{id},"size":{size},"stream":{stream}}}"#
            ),
            TraceOp::Free { id } => writeln!(s, r#"{{"op":"free","id":{id}}}"#),
        };
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::mixed_trace;

    #[test]
    fn formatted_traces_parse_back_identically() {
        let ops = mixed_trace(5_000, 256, 1 << 20, 100, 3);
        assert_eq!(
            parse_trace(&format_trace(&ops), false).expect("valid").ops,
            ops
        );
    }

    #[test]
    fn keys_may_come_in_any_order_with_spaces_and_stream_is_optional() {
        let t = parse_trace(
            " { \"size\" : 10 , \"op\":\"alloc\", \"id\": 7 }\n\n{\"id\":7,\"op\":\"free\"}\n",
            false,
        )
        .expect("valid");
        assert_eq!(
            t.ops,
            vec![
                TraceOp::Alloc {
                    id: 7,
                    size: 10,
                    stream: 0
                },
                TraceOp::Free { id: 7 }
            ]
        );
    }

    #[test]
    fn every_bad_line_names_its_line_number() {
        let cases = [
            ("{\"op\":\"alloc\",\"id\":1,\"size\":-5}", "size"),
            ("{\"op\":\"alloc\",\"id\":1,\"size\":1.5}", "size"),
            ("{\"op\":\"alloc\",\"id\":1}", "size"),
            ("{\"op\":\"free\",\"id\":9}", "not live"),
            ("{\"op\":\"grow\",\"id\":1}", "op"),
            ("not json", "JSON"),
            (
                "{\"op\":\"alloc\",\"id\":1,\"size\":5,\"colour\":1}",
                "unknown key",
            ),
            (
                "{\"op\":\"alloc\",\"id\":1,\"size\":99999999999999999999}",
                "64 bits",
            ),
        ];
        for (bad, word) in cases {
            let text = format!("{{\"op\":\"alloc\",\"id\":100,\"size\":1}}\n{bad}\n");
            let e = parse_trace(&text, false).expect_err(bad);
            assert_eq!(e.line, 2, "{bad}");
            assert!(e.message.contains(word), "{bad}: {}", e.message);
        }
    }

    #[test]
    fn double_frees_and_live_reallocations_are_errors() {
        let text = "{\"op\":\"alloc\",\"id\":1,\"size\":1}\n{\"op\":\"free\",\"id\":1}\n{\"op\":\"free\",\"id\":1}\n";
        assert_eq!(parse_trace(text, false).expect_err("double free").line, 3);
        let text =
            "{\"op\":\"alloc\",\"id\":1,\"size\":1}\n{\"op\":\"alloc\",\"id\":1,\"size\":1}\n";
        assert_eq!(parse_trace(text, false).expect_err("live id").line, 2);
    }

    #[test]
    fn lenient_parsing_skips_and_counts_bad_lines() {
        let text = "{\"op\":\"alloc\",\"id\":1,\"size\":1}\ngarbage\n{\"op\":\"free\",\"id\":5}\n{\"op\":\"free\",\"id\":1}\n";
        let t = parse_trace(text, true).expect("lenient");
        assert_eq!(t.ops.len(), 2);
        assert_eq!(
            t.skipped.iter().map(|e| e.line).collect::<Vec<_>>(),
            vec![2, 3]
        );
    }
}
