//! Issue 26, item 5: a driver library that lacks a function cuda-arena calls (a stub, a
//! foreign or partial `libcuda.so.1`) is `ERR_NO_CUDA` naming the library and the function,
//! with no panic text: cudarc looks each function up at its first call and panicked there
//! ("Missing symbol cuGetErrorName"). A stub `libcuda.so.1` with every function but one is
//! built with the C compiler and put first on the library path of a child process.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Set in the child process this test starts.
const CHILD: &str = "CUDA_ARENA_INCOMPLETE_DRIVER_CHILD";

/// Every function cuda-arena checks, as the stub defines them (each returns success; the
/// counting ones report one device).
fn stub_source(without: &str) -> String {
    let mut c = String::from("int cuDeviceGetCount(int *n) { *n = 1; return 0; }\n");
    for name in symbols()
        .iter()
        .filter(|n| **n != without && **n != "cuDeviceGetCount")
    {
        c.push_str(&format!("int {name}(void) {{ return 0; }}\n"));
    }
    c
}

/// The names the crate checks, read from its source (the list is crate-private).
fn symbols() -> Vec<&'static str> {
    let src = include_str!("../src/driver.rs");
    let start = src.find("pub(crate) const SYMBOLS").expect("the list");
    let list = &src[start..start + src[start..].find("];").expect("its end")];
    list.split('"').skip(1).step_by(2).collect()
}

fn build_stub(dir: &Path, without: &str) -> bool {
    std::fs::create_dir_all(dir).expect("dir");
    let c = dir.join("stub.c");
    std::fs::write(&c, stub_source(without)).expect("source");
    Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(dir.join("libcuda.so.1"))
        .arg(&c)
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

#[test]
fn a_driver_library_without_a_function_is_err_no_cuda_naming_it_and_never_a_panic() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("incomplete-driver");
    if !build_stub(&dir, "cuGetErrorName") {
        // No C compiler: nothing to build the stub with (CI has one).
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must build the stub driver"
        );
        return;
    }
    std::fs::copy(dir.join("libcuda.so.1"), dir.join("libcuda.so")).expect("both names");
    let out = Command::new(std::env::current_exe().expect("this test binary"))
        .args([
            "child_reports_what_the_backend_says",
            "--exact",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .env("LD_LIBRARY_PATH", &dir)
        .output()
        .expect("the child runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("CHILD ERR_NO_CUDA") && stdout.contains("lacks cuGetErrorName"),
        "{stdout}"
    );
    assert!(stdout.contains("libcuda"), "names the library: {stdout}");
    assert!(
        !stderr.contains("panicked") && !stdout.contains("panicked"),
        "{stderr}"
    );
}

#[test]
fn child_reports_what_the_backend_says() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    match cuda_sys_bridge::CudaBackend::new() {
        Ok(_) => println!("CHILD OK"),
        Err(e) => println!("CHILD {} {e}", e.code()),
    }
    assert!(!cuda_sys_bridge::cuda_available());
}
