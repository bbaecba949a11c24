//! Replaying a trace file from C: `cuda_arena_replay_file`, the library's
//! `cuda_arena_core::trace::replay_file` (what `cuda-arena replay` runs), its report as one
//! JSON object with the command's `--json` names; `cuda_arena_string_free` gives it back.

use crate::codes::{clear_last, fail};
use crate::handle::{config_arg, guard, guard_uncancellable, invalid, str_arg};
use cuda_arena_core::devices::replay_target::replay_target;
use cuda_arena_core::trace::replay_file::{
    replay_file, FileReplayOptions, FileReplays, NoProgress,
};
use cuda_arena_core::trace::trace_format::MAX_TRACE_LINES;
use cuda_arena_core::ArenaError;
use cuda_sys_bridge::{backend_named, unknown_backend};
use std::ffi::{c_char, CString};
use std::fmt::Write;

/// The backends a replay runs on: `host` is left out, as a trace's sizes would be real memory.
const REPLAY_BACKENDS: [&str; 2] = ["cuda", "virtual"];

/// `s` as a JSON string.
fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The report as `cuda-arena replay --json` names it: per config the allocator, warnings,
/// ops, peaks, failures, what was left live, the time and the final stats (ONNX Runtime's
/// keys, as `GetStats` gives them), and the lines skipped.
fn report_json(path: &str, backend: &str, r: &FileReplays) -> String {
    let mut s = format!(
        "{{\"trace\":{},\"backend\":{},\"linesSkippedCount\":{},\"runs\":[",
        json_str(path),
        json_str(backend),
        r.lines_skipped_count
    );
    for (i, run) in r.runs.iter().enumerate() {
        let rep = &run.report;
        let warnings: Vec<String> = run.warnings.iter().map(|w| json_str(w)).collect();
        let stats: Vec<String> = run
            .stats
            .to_pairs()
            .into_iter()
            .map(|(k, v)| format!("{}:{v}", json_str(k)))
            .collect();
        let _ = write!(
            s,
            "{}{{\"allocator\":{},\"warnings\":[{}],\"ops\":{},\"peakRequested\":{},\
             \"peakHeld\":{},\"failedAllocs\":{},\"liveAtEnd\":{},\"elapsedNs\":{},\
             \"stats\":{{{}}}}}",
            if i == 0 { "" } else { "," },
            json_str(run.allocator),
            warnings.join(","),
            rep.ops,
            rep.peak_requested,
            rep.peak_held,
            rep.failed_allocs,
            rep.live_at_end,
            rep.elapsed_ns,
            stats.join(",")
        );
    }
    s.push_str("]}");
    s
}

/// # Safety
/// As `cuda_arena_replay_file`.
unsafe fn replay(
    path: *const c_char,
    backend: *const c_char,
    keys: *const *const c_char,
    values: *const *const c_char,
    n: usize,
) -> Result<String, ArenaError> {
    // SAFETY: forwarded from the caller's contract.
    let path = unsafe { str_arg(path, "path") }?;
    // SAFETY: as above.
    let backend = unsafe { str_arg(backend, "backend") }?;
    if !REPLAY_BACKENDS.contains(&backend) {
        return Err(unknown_backend(backend, &REPLAY_BACKENDS));
    }
    // SAFETY: forwarded from the caller's contract.
    let config = unsafe { config_arg(keys, values, n) }?;
    let options = FileReplayOptions {
        samples: 1,
        max_lines: MAX_TRACE_LINES,
        ..FileReplayOptions::default()
    };
    let report = replay_file(
        path,
        &|config| replay_target(&*backend_named(backend, &[])?, config),
        &[config],
        &options,
        &mut NoProgress,
    )?;
    Ok(report_json(path, backend, &report))
}

/// Replays the trace file at `path` (JSON lines, or a PyTorch memory snapshot, told by its
/// first byte) through a fresh allocator of the config `keys`/`values` select (`n` pairs) on
/// `backend` (`virtual` or `cuda`), as `cuda-arena replay --json` does; returns the report
/// as a NUL-terminated JSON object for `cuda_arena_string_free`, or NULL with the last error
/// set.
///
/// # Safety
/// `path` and `backend` are NUL-terminated strings; `keys` and `values` point at `n`
/// NUL-terminated strings each (or may be NULL when `n` is 0).
#[no_mangle]
pub unsafe extern "C" fn cuda_arena_replay_file(
    path: *const c_char,
    backend: *const c_char,
    keys: *const *const c_char,
    values: *const *const c_char,
    n: usize,
) -> *mut c_char {
    guard_uncancellable(std::ptr::null_mut(), || {
        // SAFETY: forwarded from this function's contract.
        match unsafe { replay(path, backend, keys, values, n) }
            .and_then(|json| CString::new(json).map_err(|_| invalid("a NUL in the report")))
        {
            Ok(json) => {
                clear_last();
                json.into_raw()
            }
            Err(e) => {
                fail(&e);
                std::ptr::null_mut()
            }
        }
    })
}

/// Gives back a string the library returned (`cuda_arena_replay_file`); NULL is ignored.
///
/// # Safety
/// `s` is NULL or a string from `cuda_arena_replay_file`, not given back before.
#[no_mangle]
pub unsafe extern "C" fn cuda_arena_string_free(s: *mut c_char) {
    guard((), || {
        if !s.is_null() {
            // SAFETY: made by `CString::into_raw` in this library, given back once.
            drop(unsafe { CString::from_raw(s) });
        }
    })
}

#[cfg(test)]
mod tests {
    use super::json_str;

    #[test]
    fn json_strings_escape_quotes_backslashes_and_control_characters() {
        assert_eq!(json_str("a\"b\\c\nd"), "\"a\\\"b\\\\c\\u000ad\"");
    }
}
