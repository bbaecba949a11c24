//! The trace file format of `cuda-arena replay`: JSON lines, one operation each,
//! `{"op":"alloc","id":1,"size":4096,"stream":0}`, `{"op":"reserve","id":2,"size":4096}` or
//! `{"op":"free","id":1}` (keys in any order, each once, `stream` optional on an alloc and
//! not allowed on a reserve, which has no stream). Parsed by hand: a million lines take a fraction of
//! a second. Every problem names its line; lenient parsing skips bad lines and counts them.
//!
//! The input is read as bytes, a line at a time, so memory stays bounded whatever the file
//! holds: a line longer than [`MAX_LINE_BYTES`] (a binary file, `/dev/zero`) and a trace of
//! more than [`MAX_TRACE_LINES`] lines (an endless pipe) stop the parse, lenient or not. A
//! line that is not UTF-8 is a bad line like any other. A UTF-8 byte order mark at the start
//! is skipped. Messages quote at most [`QUOTED_CHARS`] characters of the bad text.
//!
//! The entry points: [`parse_trace_reader`] (any `BufRead`), [`parse_trace_bytes`] and
//! [`parse_trace`] (in memory); [`write_op`], [`write_trace`] and [`format_trace`] write the
//! format.

use crate::trace::{TraceOp, MAX_TRACE_STREAMS};
use std::collections::HashSet;
use std::io::{BufRead, Write};

/// The longest line read, in bytes, without its line ending: a trace line is about 60.
pub const MAX_LINE_BYTES: usize = 4096;

/// The most lines a trace may have (blank and skipped lines included): about 50 bytes of
/// memory per operation in a replay, so a few GB at most.
pub const MAX_TRACE_LINES: usize = 100_000_000;

/// How many skipped lines a lenient parse keeps the error of ([`ParsedTrace::skipped`]);
/// it counts them all.
pub const MAX_SKIPPED_KEPT: usize = 1000;

/// The most characters of bad text an error message quotes; longer text is cut with `…`.
pub const QUOTED_CHARS: usize = 40;

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

impl std::error::Error for TraceLineError {}

/// A parsed trace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParsedTrace {
    /// The operations, in order.
    pub ops: Vec<TraceOp>,
    /// Lines skipped in lenient mode, with why: the first [`MAX_SKIPPED_KEPT`].
    pub skipped: Vec<TraceLineError>,
    /// How many lines were skipped in all.
    pub skipped_lines: usize,
}

/// `text` cut to [`QUOTED_CHARS`] characters, with `…` when cut.
fn cut(text: &str) -> String {
    match text.char_indices().nth(QUOTED_CHARS) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
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
        // JSON has no leading zeros: `010` is malformed, not ten (nor eight).
        Value::Num(n)
            if n.len() > 1 && n.starts_with('0') && n.bytes().all(|b| b.is_ascii_digit()) =>
        {
            Err(format!(
                "{key} {} has a leading zero, which JSON does not allow",
                cut(n)
            ))
        }
        Value::Num(n) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => n
            .parse()
            .map_err(|_| format!("{key} {} does not fit in 64 bits", cut(n))),
        Value::Num(n) => Err(format!(
            "{key} must be a whole non-negative number, got {}",
            cut(n)
        )),
        Value::Str(s) => Err(format!(
            "{key} must be a number, got the string {:?}",
            cut(s)
        )),
    }
}

/// Sets a field once: a key given twice is an error naming it (JSON parsers disagree on
/// which one wins, so a trace must not depend on it).
fn once<T>(slot: &mut Option<T>, key: &str, value: T) -> Result<(), String> {
    if slot.is_some() {
        return Err(format!("duplicate key \"{key}\""));
    }
    *slot = Some(value);
    Ok(())
}

/// The start of the message for an unknown `op`.
const OPS_EXPECTED: &str = "op must be \"alloc\", \"reserve\" or \"free\"";

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
                return Err(format!("expected ':' after \"{}\"", cut(key)));
            }
            let v = f.value()?;
            match key {
                "op" => match v {
                    Value::Str(s) => once(&mut op, key, s)?,
                    Value::Num(n) => return Err(format!("{OPS_EXPECTED}, got {}", cut(n))),
                },
                "id" => once(&mut id, key, uint("id", &v)?)?,
                "size" => once(&mut size, key, uint("size", &v)?)?,
                "stream" => {
                    let s = uint("stream", &v)?;
                    let s = u32::try_from(s).map_err(|_| format!("stream {s} is too large"))?;
                    once(&mut stream, key, s)?;
                }
                other => return Err(format!("unknown key \"{}\"", cut(other))),
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
        "reserve" if stream.is_some() => Err("a reserve has no \"stream\"".into()),
        "reserve" => Ok(Some(TraceOp::Reserve {
            id,
            size: size.ok_or("a reserve needs \"size\"")?,
        })),
        "free" => Ok(Some(TraceOp::Free { id })),
        other => Err(format!("{OPS_EXPECTED}, got {:?}", cut(other))),
    }
}

/// What reading one line gave.
enum Line {
    /// A line (in the buffer, without its line ending).
    Read,
    /// More than [`MAX_LINE_BYTES`] before the line ended.
    TooLong,
    /// The end of the input.
    End,
}

/// Reads the next line into `buf` (cleared first), keeping at most [`MAX_LINE_BYTES`] of it.
fn read_line(reader: &mut impl BufRead, buf: &mut Vec<u8>) -> std::io::Result<Line> {
    buf.clear();
    // One byte more than the limit for a '\r' before the '\n'.
    let room = MAX_LINE_BYTES + 1;
    let mut read_any = false;
    loop {
        let available = match reader.fill_buf() {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(if read_any { Line::Read } else { Line::End });
        }
        read_any = true;
        let (take, ends) = match available.iter().position(|&b| b == b'\n') {
            Some(at) => (at, true),
            None => (available.len(), false),
        };
        if buf.len() + take > room {
            return Ok(Line::TooLong);
        }
        buf.extend_from_slice(&available[..take]);
        reader.consume(take + usize::from(ends));
        if ends {
            break;
        }
    }
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    Ok(if buf.len() > MAX_LINE_BYTES {
        Line::TooLong
    } else {
        Line::Read
    })
}

/// Why a line is not UTF-8, naming the first bad byte.
fn not_utf8(line: &[u8], e: std::str::Utf8Error) -> String {
    let at = e.valid_up_to();
    format!(
        "not UTF-8 (byte 0x{:02x} at column {})",
        line.get(at).copied().unwrap_or(0),
        at + 1
    )
}

/// Parses a trace from `reader`, a line at a time. Besides malformed lines, an alloc of an id
/// that is live, a free of an id that is not live (unknown or already freed), and a stream
/// number beyond the [`MAX_TRACE_STREAMS`] distinct ones a replay takes are errors. With
/// `lenient`, such lines are skipped and counted instead. A line longer than
/// [`MAX_LINE_BYTES`], a line past `max_lines` (at most [`MAX_TRACE_LINES`]) and a read
/// error stop the parse even when lenient.
pub fn parse_trace_reader(
    mut reader: impl BufRead,
    lenient: bool,
    max_lines: usize,
) -> Result<ParsedTrace, TraceLineError> {
    let max_lines = max_lines.min(MAX_TRACE_LINES);
    let mut out = ParsedTrace::default();
    let mut live: HashSet<u64> = HashSet::new();
    let mut streams: HashSet<u32> = HashSet::new();
    let mut buf = Vec::with_capacity(MAX_LINE_BYTES + 2);
    let mut n = 0usize;
    loop {
        n += 1;
        let fatal = |message: String| TraceLineError { line: n, message };
        match read_line(&mut reader, &mut buf) {
            Ok(Line::End) => return Ok(out),
            Ok(Line::TooLong) => {
                return Err(fatal(format!(
                    "longer than {MAX_LINE_BYTES} bytes (a trace line is one small JSON \
                     object; is this a trace file?)"
                )))
            }
            Ok(Line::Read) if n > max_lines => {
                return Err(fatal(format!(
                    "a trace has at most {max_lines} lines (the most a replay reads)"
                )))
            }
            Ok(Line::Read) => {}
            Err(e) => return Err(fatal(format!("cannot read: {e}"))),
        }
        let mut bytes = &buf[..];
        if n == 1 {
            bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
        }
        let checked = std::str::from_utf8(bytes)
            .map_err(|e| not_utf8(bytes, e))
            .and_then(parse_line)
            .and_then(|op| match op {
                Some(TraceOp::Alloc { id, .. } | TraceOp::Reserve { id, .. })
                    if live.contains(&id) =>
                {
                    Err(format!("id {id} is allocated while live"))
                }
                Some(TraceOp::Alloc { stream, .. })
                    if stream != 0
                        && streams.len() >= MAX_TRACE_STREAMS
                        && !streams.contains(&stream) =>
                {
                    Err(format!(
                        "stream {stream} is one more than the {MAX_TRACE_STREAMS} distinct \
                         streams a replay takes"
                    ))
                }
                Some(TraceOp::Free { id }) if !live.contains(&id) => {
                    Err(format!("free of id {id}, which is not live"))
                }
                other => Ok(other),
            });
        match checked {
            Ok(Some(op)) => {
                match op {
                    TraceOp::Alloc { id, stream, .. } => {
                        live.insert(id);
                        if stream != 0 {
                            streams.insert(stream);
                        }
                    }
                    TraceOp::Reserve { id, .. } => {
                        live.insert(id);
                    }
                    TraceOp::Free { id } => {
                        live.remove(&id);
                    }
                }
                out.ops.push(op);
            }
            Ok(None) => {}
            Err(message) => {
                let e = TraceLineError { line: n, message };
                if !lenient {
                    return Err(e);
                }
                out.skipped_lines += 1;
                if out.skipped.len() < MAX_SKIPPED_KEPT {
                    out.skipped.push(e);
                }
            }
        }
    }
}

/// [`parse_trace_reader`] over bytes in memory, with the default line limit.
pub fn parse_trace_bytes(bytes: &[u8], lenient: bool) -> Result<ParsedTrace, TraceLineError> {
    parse_trace_reader(bytes, lenient, MAX_TRACE_LINES)
}

/// [`parse_trace_bytes`] over text.
pub fn parse_trace(text: &str, lenient: bool) -> Result<ParsedTrace, TraceLineError> {
    parse_trace_bytes(text.as_bytes(), lenient)
}

/// Writes one operation as one line of the trace format (with its `\n`) to `out`.
pub fn write_op(op: &TraceOp, mut out: impl Write) -> std::io::Result<()> {
    match *op {
        TraceOp::Alloc { id, size, stream } => writeln!(
            out,
            r#"{{"op":"alloc","id":{id},"size":{size},"stream":{stream}}}"#
        ),
        TraceOp::Reserve { id, size } => {
            writeln!(out, r#"{{"op":"reserve","id":{id},"size":{size}}}"#)
        }
        TraceOp::Free { id } => writeln!(out, r#"{{"op":"free","id":{id}}}"#),
    }
}

/// Writes `ops` in the trace format, one line each, to `out` (buffer it: one write per line).
pub fn write_trace(ops: &[TraceOp], mut out: impl Write) -> std::io::Result<()> {
    for op in ops {
        write_op(op, &mut out)?;
    }
    out.flush()
}

/// Writes `ops` in the trace format, one line each.
pub fn format_trace(ops: &[TraceOp]) -> String {
    let mut bytes = Vec::with_capacity(ops.len().saturating_mul(40));
    // Writing to a `Vec` cannot fail, and the format is ASCII.
    let _ = write_trace(ops, &mut bytes);
    String::from_utf8(bytes).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::synthetic::mixed_trace;

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

    /// A reader that repeats `pattern` forever, as a FIFO fed by a loop would.
    struct Endless {
        pattern: Vec<u8>,
        at: usize,
    }

    impl std::io::Read for Endless {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            for b in out.iter_mut() {
                *b = self.pattern[self.at];
                self.at = (self.at + 1) % self.pattern.len();
            }
            Ok(out.len())
        }
    }

    fn alloc_line(width: usize) -> String {
        let base = r#"{"op":"alloc","id":1,"size":256"#;
        format!("{base}{}}}", " ".repeat(width - base.len() - 1))
    }

    #[test]
    fn a_line_of_the_maximum_length_is_read_and_one_byte_more_stops_the_parse_even_when_lenient() {
        let at = format!("{}\r\n", alloc_line(MAX_LINE_BYTES));
        assert_eq!(parse_trace(&at, false).expect("at the limit").ops.len(), 1);
        let over = format!("{}\n", alloc_line(MAX_LINE_BYTES + 1));
        let e = parse_trace(&over, true).expect_err("over the limit");
        assert_eq!(e.line, 1);
        assert!(e.message.contains("longer than 4096 bytes"), "{e}");
    }

    // Issue 11, item 16: `replay /dev/zero` grew to 24 GB.
    #[test]
    fn an_endless_line_stops_at_the_line_limit_without_reading_on() {
        let zeros = std::io::BufReader::new(std::io::repeat(0));
        let e = parse_trace_reader(zeros, true, MAX_TRACE_LINES).expect_err("endless");
        assert_eq!(e.line, 1);
        assert!(e.message.contains("longer than"), "{e}");
    }

    #[test]
    fn an_endless_stream_of_lines_stops_after_the_most_lines_naming_the_limit() {
        let lines = Endless {
            pattern: b"{\"op\":\"alloc\",\"id\":1,\"size\":1}\n".to_vec(),
            at: 0,
        };
        let e =
            parse_trace_reader(std::io::BufReader::new(lines), true, 1000).expect_err("endless");
        assert_eq!(e.line, 1001);
        assert!(e.message.contains("at most 1000 lines"), "{e}");
    }

    #[test]
    fn the_line_limit_cannot_be_raised_past_the_maximum() {
        let lines = Endless {
            pattern: b"\n".to_vec(),
            at: 0,
        };
        let e = parse_trace_reader(std::io::BufReader::new(lines), true, usize::MAX)
            .expect_err("endless");
        assert_eq!(e.line, MAX_TRACE_LINES + 1);
    }

    #[test]
    fn a_number_with_a_leading_zero_is_malformed_and_zero_itself_is_not() {
        let e = parse_trace("{\"op\":\"alloc\",\"id\":1,\"size\":010}\n", false)
            .expect_err("leading zero");
        assert_eq!(e.line, 1);
        assert!(e.message.contains("leading zero"), "{e}");
        let e = parse_trace("{\"op\":\"free\",\"id\":00}\n", false).expect_err("00");
        assert!(e.message.contains("leading zero"), "{e}");
        let t = parse_trace(
            "{\"op\":\"alloc\",\"id\":0,\"size\":0,\"stream\":0}\n{\"op\":\"free\",\"id\":0}\n",
            false,
        )
        .expect("zeros");
        assert_eq!(t.ops.len(), 2);
    }

    // Issue 11, item 16: one invalid byte refused the whole file, with no line.
    #[test]
    fn a_line_that_is_not_utf8_is_a_bad_line_that_lenient_parsing_skips() {
        let text =
            b"{\"op\":\"alloc\",\"id\":1,\"size\":1}\n{\"op\":\xff}\n{\"op\":\"free\",\"id\":1}\n";
        let e = parse_trace_bytes(text, false).expect_err("not UTF-8");
        assert_eq!(e.line, 2);
        assert!(e.message.contains("UTF-8"), "{e}");
        let t = parse_trace_bytes(text, true).expect("lenient");
        assert_eq!((t.ops.len(), t.skipped_lines), (2, 1));
    }

    // Issue 11, item 16: a BOM made line 1 "expected a JSON object".
    #[test]
    fn a_byte_order_mark_is_skipped_at_the_start_only() {
        let text =
            "\u{feff}{\"op\":\"alloc\",\"id\":1,\"size\":1}\n\u{feff}{\"op\":\"free\",\"id\":1}\n";
        let e = parse_trace(text, false).expect_err("a BOM on line 2");
        assert_eq!(e.line, 2);
        let t = parse_trace(text, true).expect("lenient");
        assert_eq!((t.ops.len(), t.skipped_lines), (1, 1));
    }

    // Issue 11, item 16: duplicate keys were silently last-wins.
    #[test]
    fn a_key_given_twice_is_an_error_naming_it() {
        for key in ["op", "id", "size", "stream"] {
            let line = format!(
                "{{\"op\":\"alloc\",\"id\":1,\"size\":1,\"stream\":0,\"{key}\":{}}}",
                if key == "op" { "\"free\"" } else { "2" }
            );
            let e = parse_trace(&line, false).expect_err(key);
            assert!(
                e.message.contains(&format!("duplicate key \"{key}\"")),
                "{e}"
            );
        }
    }

    // Issue 11, item 16: a 100 MB number gave a 100 MB message.
    #[test]
    fn messages_quote_at_most_a_short_prefix_of_the_bad_text() {
        let long = "7".repeat(4000);
        for line in [
            format!("{{\"op\":\"alloc\",\"id\":1,\"size\":{long}}}"),
            format!("{{\"op\":\"alloc\",\"id\":1,\"size\":-{long}}}"),
            format!("{{\"op\":\"alloc\",\"id\":1,\"size\":\"{long}\"}}"),
            format!("{{\"op\":\"{long}\",\"id\":1}}"),
            format!("{{\"{long}\":1}}"),
        ] {
            let e = parse_trace(&line, false).expect_err("bad");
            assert!(e.message.len() < 120, "{} characters: {e}", e.message.len());
            assert!(e.message.contains('…'), "{e}");
        }
    }

    #[test]
    fn more_distinct_streams_than_a_replay_takes_is_an_error_naming_the_line() {
        let mut text = String::new();
        for i in 1..=MAX_TRACE_STREAMS as u32 + 1 {
            text += &format!("{{\"op\":\"alloc\",\"id\":{i},\"size\":1,\"stream\":{i}}}\n");
        }
        let e = parse_trace(&text, false).expect_err("too many streams");
        assert_eq!(e.line, MAX_TRACE_STREAMS + 1);
        // A stream number already seen is fine after the limit is reached.
        text += "{\"op\":\"alloc\",\"id\":99999,\"size\":1,\"stream\":3}\n";
        let t = parse_trace(&text, true).expect("lenient");
        assert_eq!((t.ops.len(), t.skipped_lines), (MAX_TRACE_STREAMS + 1, 1));
    }

    #[test]
    fn a_reserve_line_parses_and_formats_back_to_the_same_text() {
        let text = "{\"op\":\"reserve\",\"id\":1,\"size\":4096}\n{\"op\":\"free\",\"id\":1}\n";
        let t = parse_trace(text, false).expect("a reserve and its free");
        assert_eq!(t.ops.len(), 2);
        assert_eq!(format_trace(&t.ops), text);
    }

    #[test]
    fn a_reserve_needs_a_size_takes_no_stream_and_names_a_new_id() {
        let cases = [
            ("{\"op\":\"reserve\",\"id\":2}", "needs \"size\""),
            (
                "{\"op\":\"reserve\",\"id\":2,\"size\":1,\"stream\":0}",
                "no \"stream\"",
            ),
            (
                "{\"op\":\"reserve\",\"id\":1,\"size\":1}",
                "allocated while live",
            ),
        ];
        for (bad, words) in cases {
            let text = format!("{{\"op\":\"alloc\",\"id\":1,\"size\":1}}\n{bad}\n");
            let e = parse_trace(&text, false).expect_err(bad);
            assert_eq!(e.line, 2, "{bad}");
            assert!(e.message.contains(words), "{bad}: {}", e.message);
        }
    }

    #[test]
    fn lenient_parsing_keeps_a_bounded_number_of_skipped_lines_and_counts_them_all() {
        let text = "garbage\n".repeat(MAX_SKIPPED_KEPT + 500);
        let t = parse_trace(&text, true).expect("lenient");
        assert_eq!(t.skipped.len(), MAX_SKIPPED_KEPT);
        assert_eq!(t.skipped_lines, MAX_SKIPPED_KEPT + 500);
    }

    #[test]
    fn a_read_error_stops_the_parse_naming_the_line_being_read() {
        struct Failing(usize);
        impl std::io::Read for Failing {
            fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
                let line = b"{\"op\":\"alloc\",\"id\":1,\"size\":1}\n";
                if self.0 > 0 {
                    return Err(std::io::Error::other("disk on fire"));
                }
                self.0 += 1;
                out[..line.len()].copy_from_slice(line);
                Ok(line.len())
            }
        }
        let e = parse_trace_reader(std::io::BufReader::new(Failing(0)), true, 10)
            .expect_err("read error");
        assert_eq!(e.line, 2);
        assert!(e.message.contains("disk on fire"), "{e}");
    }

    #[test]
    fn written_traces_parse_back_identically_from_a_reader() {
        let ops = mixed_trace(3_001, 256, 1 << 20, 100, 4);
        let mut bytes = Vec::new();
        write_trace(&ops, &mut bytes).expect("writes to memory");
        let t = parse_trace_reader(
            std::io::BufReader::with_capacity(7, &bytes[..]),
            false,
            5_000,
        )
        .expect("valid");
        assert_eq!(t.ops, ops);
    }
}
