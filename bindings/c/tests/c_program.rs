//! Compiles `tests/c/smoke.c` against `include/cuda_arena.h` and the built shared library,
//! and runs it on the `host` backend: the C ABI as a C program sees it.

use std::path::{Path, PathBuf};
use std::process::Command;

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

/// The C header as shipped.
fn header() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("include/cuda_arena.h"))
        .expect("header")
}

#[test]
fn a_c_program_allocates_frees_and_reads_errors_through_the_header() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = lib_dir();
    assert!(
        lib.join("libcuda_arena.so").exists(),
        "the cdylib is built beside the tests in {}",
        lib.display()
    );
    let out = std::env::temp_dir().join(format!("cuda-arena-smoke-{}", std::process::id()));
    let status = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&out)
        .arg(dir.join("tests/c/smoke.c"))
        .arg("-I")
        .arg(dir.join("include"))
        .arg("-L")
        .arg(&lib)
        .arg("-lcuda_arena")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .status()
        .expect("a C compiler (cc)");
    assert!(
        status.success(),
        "the C program compiles against the header"
    );
    // cargo's LD_LIBRARY_PATH would win over the rpath and may hold an older build.
    let run = Command::new(&out)
        .env_remove("LD_LIBRARY_PATH")
        .arg("host")
        .output()
        .expect("run the C program");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "C program failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("all checks passed"), "{stdout}");
}

#[test]
fn the_header_codes_match_the_rust_codes() {
    let header = header();
    for (i, code) in cuda_arena_core::ERROR_CODES.iter().enumerate() {
        // ERR_ARENA_X → CUDA_ARENA_ERR_X; ERR_X → CUDA_ARENA_ERR_X.
        let c_name = format!(
            "CUDA_ARENA_ERR_{}",
            code.trim_start_matches("ERR_ARENA_")
                .trim_start_matches("ERR_")
        );
        let line = format!("#define {c_name} {}", i + 1);
        assert!(header.contains(&line), "header lacks {line:?}");
    }
}

#[test]
fn the_header_version_is_the_crate_version() {
    let header = header();
    let line = format!(
        "#define CUDA_ARENA_VERSION \"{}\"",
        env!("CARGO_PKG_VERSION")
    );
    assert!(header.contains(&line), "header lacks {line:?}");
}
