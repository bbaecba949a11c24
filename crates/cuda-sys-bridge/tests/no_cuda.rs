//! Without a CUDA driver (CI, laptops), every CUDA path fails with `ERR_NO_CUDA` and a
//! reason, never a panic. On a machine with a driver these checks do not apply and pass.

use cuda_sys_bridge::{cuda_available, devices, ensure_cuda, CudaBackend};

fn driver_present() -> bool {
    std::path::Path::new("/usr/lib/x86_64-linux-gnu/libcuda.so.1").exists()
        || std::env::var_os("CUDA_ARENA_EXPECT_GPU").is_some()
        || cuda_available()
}

#[test]
fn without_a_driver_the_backend_is_err_no_cuda_with_a_reason() {
    if driver_present() {
        return;
    }
    let err = CudaBackend::new().expect_err("no driver here");
    assert_eq!(err.code(), "ERR_NO_CUDA");
    assert!(err.to_string().contains("libcuda"), "{err}");
}

#[test]
fn without_a_driver_devices_is_empty_and_availability_is_false() {
    if driver_present() {
        return;
    }
    assert!(devices().is_empty());
    assert!(!cuda_available());
    assert_eq!(ensure_cuda().map_err(|e| e.code()), Err("ERR_NO_CUDA"));
}
