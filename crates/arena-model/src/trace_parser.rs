//! The `trace_parser` target: strict and lenient trace parsing on arbitrary bytes.

use crate::MAX_MESSAGE_CHARS;
use cuda_arena_core::trace::trace_format::{
    format_trace, parse_trace_bytes, parse_trace_reader, ParsedTrace, TraceLineError,
    MAX_SKIPPED_KEPT, MAX_TRACE_LINES,
};

/// The `trace_parser` target. For any bytes:
/// - strict parsing fails at the first line lenient parsing skips, with the same error, or
///   at the line where lenient parsing stops too (a line too long); else both give the same
///   operations and strict skips nothing;
/// - every error names a line of the input and has a bounded message, and a lenient parse
///   keeps at most [`MAX_SKIPPED_KEPT`] of them while counting all;
/// - reading through a small buffer, a few bytes at a time, gives the same result;
/// - a line limit stops the parse at the line after it and changes nothing before;
/// - what parses, formatted again, parses back strictly to the same operations.
pub fn trace_parser(data: &[u8]) {
    let lines = data.iter().filter(|&&b| b == b'\n').count() + 1;
    let lenient = parse_trace_bytes(data, true);
    let strict = parse_trace_bytes(data, false);
    match (&strict, &lenient) {
        (Ok(s), Ok(l)) => {
            assert!(
                s.skipped.is_empty() && s.skipped_lines == 0,
                "strict parsing skipped lines"
            );
            assert_eq!(s, l, "strict and lenient parsing differ");
        }
        (Err(e), Ok(l)) => assert_eq!(
            l.skipped.first(),
            Some(e),
            "strict parsing failed elsewhere than lenient's first skipped line"
        ),
        (Err(s), Err(l)) => assert!(
            s == l || s.line < l.line,
            "strict parsing failed at {s}, lenient at {l}"
        ),
        (Ok(_), Err(e)) => panic!("lenient parsing failed where strict parsing did not: {e}"),
    }
    for result in [&strict, &lenient] {
        match result {
            Ok(t) => {
                assert_eq!(
                    t.skipped.len(),
                    t.skipped_lines.min(MAX_SKIPPED_KEPT),
                    "skipped lines kept and counted differ"
                );
                for e in &t.skipped {
                    check_line_error(e, lines);
                }
            }
            Err(e) => check_line_error(e, lines),
        }
    }
    let capacity = 1 + usize::from(data.last().map_or(0, |b| b % 16));
    for lenient_mode in [false, true] {
        let whole = if lenient_mode { &lenient } else { &strict };
        let small = parse_trace_reader(
            std::io::BufReader::with_capacity(capacity, data),
            lenient_mode,
            MAX_TRACE_LINES,
        );
        assert_eq!(
            &small, whole,
            "reading {capacity} bytes at a time changes the result"
        );
    }
    check_line_limit(data, &lenient);
    if let Ok(t) = &lenient {
        let again = format_trace(&t.ops);
        match parse_trace_bytes(again.as_bytes(), false) {
            Ok(back) => assert_eq!(back.ops, t.ops, "formatted ops parse back otherwise"),
            Err(e) => panic!("formatted ops do not parse back: {e}\n{again}"),
        }
    }
}

/// A limit of `k` lines, `k` from the input: a parse that read no further than line `k` is
/// unchanged, any other stops with an error at line `k + 1`.
fn check_line_limit(data: &[u8], whole: &Result<ParsedTrace, TraceLineError>) {
    let k = usize::from(data.first().map_or(0, |b| b % 8));
    let limited = parse_trace_reader(data, true, k);
    let read_lines = match whole {
        Err(e) => e.line,
        Ok(_) => {
            data.split(|&b| b == b'\n').count()
                - usize::from(data.last() == Some(&b'\n') || data.is_empty())
        }
    };
    if read_lines <= k {
        assert_eq!(
            &limited, whole,
            "a limit of {k} lines changed a {read_lines}-line parse"
        );
    } else {
        match limited {
            Err(e) => assert_eq!(e.line, k + 1, "a limit of {k} lines stopped at {e}"),
            Ok(_) => panic!("a limit of {k} lines let {read_lines} lines through"),
        }
    }
}

fn check_line_error(e: &TraceLineError, lines: usize) {
    assert!(
        (1..=lines).contains(&e.line),
        "line {} of a {lines}-line input",
        e.line
    );
    let n = e.message.chars().count();
    assert!(
        n <= MAX_MESSAGE_CHARS,
        "a {n}-character message: {}…",
        e.message.chars().take(200).collect::<String>()
    );
}
