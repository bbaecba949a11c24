//! Issue 13: the PyTorch entry points (`cuda_arena_torch_*`) driven the way torch drives them,
//! through function pointers from Python's ctypes (`tests/python/torch_entry_points.py`, one
//! case per process, since the environment is read once), on the simulated backends. CI has
//! Python 3 (not torch); the GPU run (`scripts/gpu/torch_smoke.py`) uses torch itself.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The directory holding `libcuda_arena.so`: cargo builds it into deps/, beside this test
/// binary (and copies it up to target/<profile>/ on `cargo build`).
fn lib() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps/").to_path_buf();
    let dir = if deps.join("libcuda_arena.so").exists() {
        deps
    } else {
        deps.parent().map(Path::to_path_buf).unwrap_or(deps)
    };
    let lib = dir.join("libcuda_arena.so");
    assert!(
        lib.exists(),
        "the cdylib is built beside the tests: {}",
        lib.display()
    );
    lib
}

/// Runs one case of the Python program with `env` (and no inherited setting of its own).
fn run(case: &str, env: &[(&str, &str)]) -> Output {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/torch_entry_points.py");
    let mut cmd = Command::new("python3");
    cmd.arg(&script)
        .arg(lib())
        .arg(case)
        .env_remove("CUDA_ARENA_CONF")
        .env_remove("CUDA_ARENA_TORCH_BACKEND")
        .env("CUDA_ARENA_TORCH_BACKEND", "host");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd
        .output()
        .expect("python3 runs (CI has it; install Python 3 to run these tests)");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && stdout.contains("all checks passed"),
        "{case}: {}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    out
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn torch_allocates_frees_reuses_on_its_stream_and_empties_the_cache() {
    run("driven_like_torch", &[]);
}

#[test]
fn the_memory_fraction_is_a_limit_on_the_memory_held() {
    run("memory_fraction_is_a_limit", &[]);
}

#[test]
fn cuda_arena_conf_configures_the_shared_allocator() {
    run(
        "conf_is_applied",
        &[(
            "CUDA_ARENA_CONF",
            "arena.extend_strategy=1,arena.max_mem=1048576",
        )],
    );
}

#[test]
fn a_bad_cuda_arena_conf_is_reported_once_and_every_allocation_fails_naming_the_key() {
    let out = run(
        "bad_conf_fails_every_allocation",
        &[(
            "CUDA_ARENA_CONF",
            "arena.extend_strategy=1,arena.max_mem=8GB",
        )],
    );
    let err = stderr(&out);
    assert_eq!(
        err.matches("CUDA_ARENA_CONF is invalid").count(),
        1,
        "reported once:\n{err}"
    );
    assert!(err.contains("arena.max_mem"), "names the key:\n{err}");
}

#[test]
fn a_conf_the_device_refuses_is_reported_once_on_stderr_naming_the_key() {
    // Issue 26, item 3: it parsed, the arena could not be made, and nothing said so where a
    // PyTorch user looks.
    let out = run(
        "refused_conf_fails_every_allocation",
        &[(
            "CUDA_ARENA_CONF",
            "arena.use_virtual_memory=1,arena.vm_page_size_bytes=256",
        )],
    );
    let err = stderr(&out);
    assert_eq!(
        err.matches("device 0 cannot be served").count(),
        1,
        "reported once:\n{err}"
    );
    assert!(
        err.contains("arena.vm_page_size_bytes") && err.contains("256"),
        "names the key and the value:\n{err}"
    );
}

#[test]
fn an_unknown_backend_is_reported_and_every_allocation_fails() {
    let out = run(
        "bad_backend_fails_every_allocation",
        &[("CUDA_ARENA_TORCH_BACKEND", "gpu")],
    );
    let err = stderr(&out);
    assert_eq!(
        err.matches("CUDA_ARENA_TORCH_BACKEND is invalid").count(),
        1,
        "reported once:\n{err}"
    );
}

#[test]
fn wrong_pointers_devices_and_fractions_are_error_codes_and_stderr_lines_never_crashes() {
    let out = run("errors_are_codes_never_crashes", &[]);
    let err = stderr(&out);
    assert!(err.contains("ERR_ARENA_UNKNOWN_POINTER"), "{err}");
}

#[test]
fn threads_on_their_own_streams_allocate_at_once() {
    run("threads_share_the_device", &[]);
}

#[test]
fn torch_and_the_c_abi_share_one_allocator_per_device() {
    run("the_c_abi_shares_the_allocator", &[]);
}

#[test]
fn the_virtual_backend_serves_sizes_no_host_has() {
    run(
        "virtual_backend_serves_large_sizes",
        &[("CUDA_ARENA_TORCH_BACKEND", "virtual")],
    );
}
