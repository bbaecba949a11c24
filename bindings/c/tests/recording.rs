//! Trace recording from C (issue 12, item 4): `tests/c/recording.c`, compiled against the
//! header and the built library, records a session; the file it writes replays with the peak
//! requested the program counted. Run natively and, where valgrind is installed, under it (the
//! writer thread must be gone and nothing leaked once the recording stops).

use cuda_arena_core::trace::replay;
use cuda_arena_core::trace::trace_format::parse_trace_bytes;
use cuda_arena_core::{AddressSpaceAllocator, Arena, ArenaConfig};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The directory holding `libcuda_arena.so`: cargo builds it into deps/, beside this test
/// binary (and copies it up to target/<profile>/ on `cargo build`).
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps/").to_path_buf();
    if deps.join("libcuda_arena.so").exists() {
        return deps;
    }
    deps.parent().map(Path::to_path_buf).unwrap_or(deps)
}

fn scratch(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "cuda-arena-c-recording-{}-{name}",
        std::process::id()
    ))
}

/// `tests/c/recording.c`, compiled against the header and the library.
fn program() -> PathBuf {
    compiled("recording")
}

/// `tests/c/NAME.c`, compiled against the header and the library.
fn compiled(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = lib_dir();
    let out = scratch(name);
    let status = Command::new("cc")
        .args(["-std=c11", "-g", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&out)
        .arg(dir.join(format!("tests/c/{name}.c")))
        .arg("-I")
        .arg(dir.join("include"))
        .arg("-L")
        .arg(&lib)
        .arg("-lcuda_arena")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .status()
        .expect("a C compiler (cc)");
    assert!(status.success(), "{name}.c compiles against the header");
    out
}

fn describe(out: &Output) -> String {
    format!(
        "{}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs the program (under `wrapper` if given) and checks its trace replays to the peak
/// requested it printed.
fn run_and_replay(exe: &Path, wrapper: Option<&[&str]>) {
    let trace = scratch("trace.jsonl");
    let bad = scratch("no-such-dir").join("trace.jsonl");
    let mut cmd = match wrapper {
        Some([first, rest @ ..]) => {
            let mut c = Command::new(first);
            c.args(rest).arg(exe);
            c
        }
        _ => Command::new(exe),
    };
    // cargo's LD_LIBRARY_PATH would win over the rpath and may hold an older build.
    let out = cmd
        .env_remove("LD_LIBRARY_PATH")
        .arg("virtual")
        .arg(&trace)
        .arg(&bad)
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success() && stdout.contains("all checks passed"),
        "{}",
        describe(&out)
    );
    let peak: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("peak_requested "))
        .and_then(|n| n.trim().parse().ok())
        .expect("the program prints its peak");
    let bytes = std::fs::read(&trace).expect("the trace file");
    let _ = std::fs::remove_file(&trace);
    let ops = parse_trace_bytes(&bytes, false).expect("a valid trace").ops;
    assert_eq!(
        ops.len(),
        4000,
        "2000 allocations or reserves and their frees"
    );
    let arena =
        Arena::new(AddressSpaceAllocator::default(), ArenaConfig::default()).expect("arena");
    let report = replay(&arena, &ops, &[], false).expect("replays");
    assert_eq!(report.peak_requested, peak);
}

#[test]
fn a_c_host_records_a_session_that_replays_to_the_peak_it_counted() {
    let exe = program();
    run_and_replay(&exe, None);
    let valgrind = Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let required = std::env::var("CUDA_ARENA_REQUIRE_VALGRIND").is_ok_and(|v| v == "1");
    assert!(
        valgrind || !required,
        "CUDA_ARENA_REQUIRE_VALGRIND=1 but no valgrind"
    );
    if valgrind {
        run_and_replay(
            &exe,
            Some(&[
                "valgrind",
                "-q",
                "--error-exitcode=99",
                "--leak-check=full",
                "--errors-for-leak-kinds=definite,indirect,possible",
                "--show-leak-kinds=definite,indirect,possible",
            ]),
        );
    }
    let _ = std::fs::remove_file(exe);
}

#[test]
fn a_pipe_whose_reader_goes_stops_the_recording_and_never_the_c_host() {
    let exe = compiled("recording_pipe");
    let out = Command::new(&exe)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("runs");
    // Before, the writer thread's write raised SIGPIPE and the process ended with it.
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("all checks passed"),
        "{}",
        describe(&out)
    );
    let _ = std::fs::remove_file(exe);
}

#[test]
fn a_child_forked_while_recording_stops_its_copy_and_the_parents_file_holds_the_parents_calls() {
    let exe = compiled("recording_fork");
    let trace = scratch("fork.jsonl");
    let out = Command::new(&exe)
        .env_remove("LD_LIBRARY_PATH")
        .arg(&trace)
        .output()
        .expect("runs");
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("all checks passed"),
        "{}",
        describe(&out)
    );
    let bytes = std::fs::read(&trace).expect("the trace file");
    let ops = parse_trace_bytes(&bytes, false).expect("a valid trace").ops;
    assert_eq!(
        ops.len(),
        4000,
        "the parent's 2,000 allocations and frees, none of the child's"
    );
    let _ = std::fs::remove_file(&trace);
    let _ = std::fs::remove_file(exe);
}
