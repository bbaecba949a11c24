//! One thin `Result` function per driver call, over `cudarc::driver::{result, sys}`. This is
//! the only module with `unsafe`; each block says why it holds. Callers must have checked
//! `library_present()` (through `availability`) before calling anything else here.
#![allow(unsafe_code)]

use cuda_arena_core::{ArenaError, Result};
use cudarc::driver::result::{self as cu, DriverError};
use cudarc::driver::sys;
use std::ffi::c_void;

pub(crate) use sys::{CUcontext, CUdevice, CUevent, CUmemoryPool, CUstream};

/// The `CUresult` name of an error, e.g. `CUDA_ERROR_INVALID_VALUE`.
pub(crate) fn error_name(e: &DriverError) -> String {
    e.error_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("{:?}", e.0))
}

/// Maps a driver error from `call`: out of memory stays out of memory (the arena backs off
/// on it); anything else is `ERR_CUDA` with the `CUresult` name.
pub(crate) fn map(call: &str, requested: u64) -> impl FnOnce(DriverError) -> ArenaError + '_ {
    move |e| {
        if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
            ArenaError::OutOfMemory {
                requested,
                reason: format!("{call}: CUDA_ERROR_OUT_OF_MEMORY"),
            }
        } else {
            ArenaError::Cuda {
                name: error_name(&e),
                message: format!("{call} failed"),
            }
        }
    }
}

/// Whether a driver error means the driver is already shut down (process exit).
pub(crate) fn is_shutdown(e: &ArenaError) -> bool {
    matches!(e, ArenaError::Cuda { name, .. } if name == "CUDA_ERROR_DEINITIALIZED")
}

pub(crate) fn library_present() -> bool {
    // SAFETY: only probes whether the library can be loaded; calls nothing in it.
    unsafe { sys::is_culib_present() }
}

/// Every driver function this crate calls, directly or through cudarc's `result` wrappers
/// (whose symbol is in the comment of each `cu::` use below it). cudarc looks each up at its
/// first call and panics when it is missing, so `availability` checks them all first. A test
/// checks that every `sys::cu…` this crate names is here.
pub(crate) const SYMBOLS: &[&str] = &[
    "cuGetErrorName",
    "cuGetErrorString",
    "cuInit",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetAttribute",
    "cuDeviceGetName",
    "cuDeviceGetPCIBusId",
    "cuDeviceTotalMem_v2",
    "cuDeviceCanAccessPeer",
    "cuDeviceGetDefaultMemPool",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuCtxSynchronize",
    "cuMemGetInfo_v2",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuMemAllocAsync",
    "cuMemFreeAsync",
    "cuMemcpyHtoD_v2",
    "cuMemcpyDtoH_v2",
    "cuMemPoolCreate",
    "cuMemPoolDestroy",
    "cuMemPoolGetAttribute",
    "cuMemPoolSetAttribute",
    "cuMemPoolSetAccess",
    "cuMemPoolTrimTo",
    "cuMemAllocFromPoolAsync",
    "cuMemAddressReserve",
    "cuMemAddressFree",
    "cuMemCreate",
    "cuMemRelease",
    "cuMemMap",
    "cuMemUnmap",
    "cuMemSetAccess",
    "cuMemGetAllocationGranularity",
    "cuStreamCreate",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuStreamWaitEvent",
    "cuStreamGetId",
    "cuEventCreate",
    "cuEventDestroy_v2",
    "cuEventRecord",
    "cuEventQuery",
    "cuEventSynchronize",
];

/// The driver library cudarc loads (the first of its candidates that loads), and the first of
/// [`SYMBOLS`] it lacks, if any. Call only once [`library_present`] holds.
pub(crate) fn missing_symbol() -> Option<(String, &'static str)> {
    // SAFETY: `library_present` held, so `culib` finds a library rather than panicking; looking
    // a symbol up calls nothing in it.
    let lib = unsafe { sys::culib() };
    let missing = SYMBOLS.iter().copied().find(|name| {
        // SAFETY: as above: a lookup only.
        unsafe { lib.get::<*const std::ffi::c_void>(name.as_bytes()) }.is_err()
    })?;
    let name = cudarc::get_lib_name_candidates("cuda")
        .into_iter()
        // SAFETY: loading a library cudarc would load anyway (it is loaded already).
        .find(|c| unsafe { libloading::Library::new(c) }.is_ok())
        .unwrap_or_else(|| "libcuda".to_string());
    Some((name, missing))
}

pub(crate) fn init() -> std::result::Result<(), String> {
    cu::init().map_err(|e| error_name(&e))
}

pub(crate) fn device_count() -> std::result::Result<i32, String> {
    cu::device::get_count().map_err(|e| error_name(&e))
}

pub(crate) fn device(ordinal: u32) -> Result<CUdevice> {
    cu::device::get(ordinal as i32).map_err(map("cuDeviceGet", 0))
}

pub(crate) fn device_name(dev: CUdevice) -> Result<String> {
    cu::device::get_name(dev).map_err(map("cuDeviceGetName", 0))
}

pub(crate) fn device_total_mem(dev: CUdevice) -> Result<u64> {
    // SAFETY: `dev` came from cuDeviceGet.
    unsafe { cu::device::total_mem(dev) }
        .map(|n| n as u64)
        .map_err(map("cuDeviceTotalMem", 0))
}

pub(crate) fn device_attribute(dev: CUdevice, attr: sys::CUdevice_attribute) -> Result<i32> {
    // SAFETY: `dev` came from cuDeviceGet; `attr` is a valid enum value.
    unsafe { cu::device::get_attribute(dev, attr) }.map_err(map("cuDeviceGetAttribute", 0))
}

pub(crate) fn device_uuid(dev: CUdevice) -> Result<[u8; 16]> {
    let uuid = cu::device::get_uuid(dev).map_err(map("cuDeviceGetUuid", 0))?;
    Ok(uuid.bytes.map(|b| b as u8))
}

pub(crate) fn device_pci_bus_id(dev: CUdevice) -> Result<String> {
    let mut buf = [0 as std::ffi::c_char; 32];
    // SAFETY: the buffer is 32 bytes and its length is passed; `dev` came from cuDeviceGet.
    unsafe { sys::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as i32, dev) }
        .result()
        .map_err(map("cuDeviceGetPCIBusId", 0))?;
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

pub(crate) fn primary_ctx_retain(dev: CUdevice) -> Result<CUcontext> {
    // SAFETY: `dev` came from cuDeviceGet; the context is released by `primary_ctx_release`.
    unsafe { cu::primary_ctx::retain(dev) }.map_err(map("cuDevicePrimaryCtxRetain", 0))
}

pub(crate) fn primary_ctx_release(dev: CUdevice) -> Result<()> {
    // SAFETY: called once per successful retain of the same device.
    unsafe { cu::primary_ctx::release(dev) }.map_err(map("cuDevicePrimaryCtxRelease", 0))
}

pub(crate) fn set_current(ctx: CUcontext) -> Result<()> {
    // SAFETY: `ctx` is a retained primary context.
    unsafe { cu::ctx::set_current(ctx) }.map_err(map("cuCtxSetCurrent", 0))
}

/// The context current on this thread (null when none).
pub(crate) fn ctx_get_current() -> Result<CUcontext> {
    let mut ctx: CUcontext = std::ptr::null_mut();
    // SAFETY: `ctx` is a valid out-pointer for the call.
    unsafe { sys::cuCtxGetCurrent(&mut ctx) }
        .result()
        .map_err(map("cuCtxGetCurrent", 0))?;
    Ok(ctx)
}

/// Binds `ctx` (null: none) to this thread.
pub(crate) fn set_current_or_none(ctx: CUcontext) -> Result<()> {
    // SAFETY: `ctx` is null or a context retained by its holder (a `DeviceContext`).
    unsafe { sys::cuCtxSetCurrent(ctx) }
        .result()
        .map_err(map("cuCtxSetCurrent", 0))
}

pub(crate) fn ctx_synchronize() -> Result<()> {
    cu::ctx::synchronize().map_err(map("cuCtxSynchronize", 0))
}

pub(crate) fn mem_get_info() -> Result<(u64, u64)> {
    cu::mem_get_info()
        .map(|(f, t)| (f as u64, t as u64))
        .map_err(map("cuMemGetInfo", 0))
}

pub(crate) fn mem_alloc(size: u64) -> Result<u64> {
    // SAFETY: a context is current (callers make it so); the memory is freed by `mem_free`.
    unsafe { cu::malloc_sync(size as usize) }.map_err(map("cuMemAlloc", size))
}

pub(crate) fn mem_free(ptr: u64) -> Result<()> {
    // SAFETY: `ptr` came from `mem_alloc` and is freed once (the caller's ledger says so).
    unsafe { cu::free_sync(ptr) }.map_err(map("cuMemFree", 0))
}

pub(crate) fn host_alloc(size: u64) -> Result<u64> {
    // SAFETY: a context is current; portable, not write-combined; freed by `host_free`.
    unsafe { cu::malloc_host(size as usize, sys::CU_MEMHOSTALLOC_PORTABLE) }
        .map(|p| p as u64)
        .map_err(map("cuMemHostAlloc", size))
}

pub(crate) fn host_free(ptr: u64) -> Result<()> {
    // SAFETY: `ptr` came from `host_alloc` and is freed once.
    unsafe { cu::free_host(ptr as *mut c_void) }.map_err(map("cuMemFreeHost", 0))
}

pub(crate) fn copy_htod(dst: u64, src: &[u8]) -> Result<()> {
    // SAFETY: the caller checked `[dst, dst+len)` lies in a live allocation of this device.
    unsafe { cu::memcpy_htod_sync(dst, src) }.map_err(map("cuMemcpyHtoD", 0))
}

pub(crate) fn copy_dtoh(dst: &mut [u8], src: u64) -> Result<()> {
    // SAFETY: the caller checked `[src, src+len)` lies in a live allocation of this device.
    unsafe { cu::memcpy_dtoh_sync(dst, src) }.map_err(map("cuMemcpyDtoH", 0))
}

pub(crate) fn memset(dst: u64, byte: u8, len: u64) -> Result<()> {
    // SAFETY: the caller checked the range lies in a live allocation of this device.
    unsafe { cu::memset_d8_sync(dst, byte, len as usize) }.map_err(map("cuMemsetD8", 0))
}

pub(crate) fn stream_create() -> Result<CUstream> {
    cu::stream::create(cu::stream::StreamKind::NonBlocking).map_err(map("cuStreamCreate", 0))
}

pub(crate) fn stream_destroy(s: CUstream) -> Result<()> {
    // SAFETY: `s` came from `stream_create` and is destroyed once.
    unsafe { cu::stream::destroy(s) }.map_err(map("cuStreamDestroy", 0))
}

pub(crate) fn stream_synchronize(s: CUstream) -> Result<()> {
    // SAFETY: `s` is a live stream (or the null stream).
    unsafe { cu::stream::synchronize(s) }.map_err(map("cuStreamSynchronize", 0))
}

pub(crate) fn event_create() -> Result<CUevent> {
    cu::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING).map_err(map("cuEventCreate", 0))
}

pub(crate) fn event_record(ev: CUevent, s: CUstream) -> Result<()> {
    // SAFETY: both are live handles of the current context.
    unsafe { cu::event::record(ev, s) }.map_err(map("cuEventRecord", 0))
}

pub(crate) fn event_destroy(ev: CUevent) -> Result<()> {
    // SAFETY: `ev` came from `event_create` and is destroyed once.
    unsafe { cu::event::destroy(ev) }.map_err(map("cuEventDestroy", 0))
}

/// Whether the work `ev` captured has completed (`CUDA_ERROR_NOT_READY`: not yet).
pub(crate) fn event_query(ev: CUevent) -> Result<bool> {
    // SAFETY: `ev` is a live event of the current context.
    match unsafe { cu::event::query(ev) } {
        Ok(()) => Ok(true),
        Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        Err(e) => Err(map("cuEventQuery", 0)(e)),
    }
}

pub(crate) fn event_synchronize(ev: CUevent) -> Result<()> {
    // SAFETY: `ev` is a live event.
    unsafe { cu::event::synchronize(ev) }.map_err(map("cuEventSynchronize", 0))
}

/// The driver's process-unique id of the stream `s` names now.
pub(crate) fn stream_get_id(s: CUstream) -> Result<u64> {
    let mut id: std::ffi::c_ulonglong = 0;
    // SAFETY: `id` is a valid out-pointer; a handle that is not a stream is an error return.
    unsafe { sys::cuStreamGetId(s, &mut id) }
        .result()
        .map_err(map("cuStreamGetId", 0))?;
    Ok(id)
}

pub(crate) fn stream_wait_event(s: CUstream, ev: CUevent) -> Result<()> {
    // SAFETY: both are live handles.
    unsafe { cu::stream::wait_event(s, ev, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT) }
        .map_err(map("cuStreamWaitEvent", 0))
}

pub(crate) fn pool_create(device: u32) -> Result<CUmemoryPool> {
    // SAFETY: an all-zero CUmemPoolProps is a valid "no options" value; we then set the
    // three fields that matter.
    let mut props: sys::CUmemPoolProps = unsafe { std::mem::zeroed() };
    props.allocType = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE;
    props.location = sys::CUmemLocation {
        type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        id: device as i32,
    };
    // SAFETY: `props` is fully initialised; the pool is destroyed by `pool_destroy`.
    unsafe { cu::mem_pool::create(&props) }.map_err(map("cuMemPoolCreate", 0))
}

pub(crate) fn pool_destroy(pool: CUmemoryPool) -> Result<()> {
    // SAFETY: `pool` came from `pool_create`; every allocation from it was freed.
    unsafe { cu::mem_pool::destroy(pool) }.map_err(map("cuMemPoolDestroy", 0))
}

pub(crate) fn pool_set_release_threshold(pool: CUmemoryPool, bytes: u64) -> Result<()> {
    let mut v = bytes;
    // SAFETY: the attribute takes a u64; `v` outlives the call.
    unsafe {
        cu::mem_pool::set_attribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&mut v as *mut u64).cast(),
        )
    }
    .map_err(map("cuMemPoolSetAttribute", 0))
}

pub(crate) fn pool_reserved_current(pool: CUmemoryPool) -> Result<u64> {
    let mut v = 0u64;
    // SAFETY: the attribute is a u64; `v` outlives the call.
    unsafe {
        cu::mem_pool::get_attribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
            (&mut v as *mut u64).cast(),
        )
    }
    .map_err(map("cuMemPoolGetAttribute", 0))?;
    Ok(v)
}

/// One of the pool's `CU_MEMPOOL_ATTR_REUSE_*` flags (an `int` attribute).
pub(crate) fn pool_reuse_flag(pool: CUmemoryPool, attr: sys::CUmemPool_attribute) -> Result<bool> {
    let mut v: std::ffi::c_int = 0;
    // SAFETY: the REUSE_* attributes are ints; `v` outlives the call.
    unsafe { cu::mem_pool::get_attribute(pool, attr, (&mut v as *mut std::ffi::c_int).cast()) }
        .map_err(map("cuMemPoolGetAttribute", 0))?;
    Ok(v != 0)
}

pub(crate) fn pool_trim_to(pool: CUmemoryPool, keep: u64) -> Result<()> {
    // SAFETY: `pool` is live.
    unsafe { cu::mem_pool::trim_to(pool, keep as usize) }.map_err(map("cuMemPoolTrimTo", 0))
}

pub(crate) fn pool_alloc_async(pool: CUmemoryPool, size: u64, s: CUstream) -> Result<u64> {
    // SAFETY: `pool` and `s` are live; the memory is freed by `free_async`.
    unsafe { cu::mem_pool::alloc_async(pool, size as usize, s) }
        .map_err(map("cuMemAllocFromPoolAsync", size))
}

pub(crate) fn alloc_async(size: u64, s: CUstream) -> Result<u64> {
    // SAFETY: `s` is live; the memory comes from the device's default pool and is freed by
    // `free_async`.
    unsafe { cu::malloc_async(s, size as usize) }.map_err(map("cuMemAllocAsync", size))
}

pub(crate) fn free_async(ptr: u64, s: CUstream) -> Result<()> {
    // SAFETY: `ptr` came from a pool allocation and is freed once, on a live stream.
    unsafe { cu::free_async(ptr, s) }.map_err(map("cuMemFreeAsync", 0))
}

pub(crate) fn default_mem_pool(dev: CUdevice) -> Result<CUmemoryPool> {
    // SAFETY: `dev` came from cuDeviceGet.
    unsafe { cu::device::get_default_mem_pool(dev) }.map_err(map("cuDeviceGetDefaultMemPool", 0))
}

/// Properties of device memory for the virtual-memory calls: pinned, on device `device`.
fn vm_props(device: u32) -> sys::CUmemAllocationProp {
    // SAFETY: an all-zero CUmemAllocationProp is a valid "no options" value; we then set the
    // fields that matter.
    let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE;
    prop.location = sys::CUmemLocation {
        type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        id: device as i32,
    };
    prop
}

/// Whether device `dev` supports the virtual-memory management calls.
pub(crate) fn vmm_supported(dev: CUdevice) -> Result<bool> {
    device_attribute(
        dev,
        sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
    )
    .map(|v| v != 0)
}

/// The smallest size `cuMemCreate` takes for device memory of `device` (2 MiB on an H100).
pub(crate) fn mem_granularity(device: u32) -> Result<u64> {
    let prop = vm_props(device);
    let mut g: usize = 0;
    // SAFETY: `prop` is fully initialised and `g` is a valid out-pointer.
    unsafe {
        sys::cuMemGetAllocationGranularity(
            &mut g,
            &prop,
            sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
        )
    }
    .result()
    .map_err(map("cuMemGetAllocationGranularity", 0))?;
    Ok(g as u64)
}

/// Reserves `size` bytes of device address space aligned to `align`, no memory behind it.
pub(crate) fn mem_address_reserve(size: u64, align: u64) -> Result<u64> {
    let mut ptr: sys::CUdeviceptr = 0;
    // SAFETY: `ptr` is a valid out-pointer; the range is given back by `mem_address_free`.
    unsafe { sys::cuMemAddressReserve(&mut ptr, size as usize, align as usize, 0, 0) }
        .result()
        .map_err(map("cuMemAddressReserve", size))?;
    Ok(ptr)
}

pub(crate) fn mem_address_free(ptr: u64, size: u64) -> Result<()> {
    // SAFETY: `[ptr, ptr+size)` came from `mem_address_reserve` with nothing mapped in it
    // (the caller's reservations say so), and is given back once.
    unsafe { sys::cuMemAddressFree(ptr, size as usize) }
        .result()
        .map_err(map("cuMemAddressFree", 0))
}

/// Physical device memory of `size` bytes (a multiple of the granularity) on `device`.
pub(crate) fn mem_create(size: u64, device: u32) -> Result<sys::CUmemGenericAllocationHandle> {
    let prop = vm_props(device);
    let mut handle: sys::CUmemGenericAllocationHandle = 0;
    // SAFETY: `prop` is fully initialised and `handle` a valid out-pointer; the handle is
    // released by `mem_release`.
    unsafe { sys::cuMemCreate(&mut handle, size as usize, &prop, 0) }
        .result()
        .map_err(map("cuMemCreate", size))?;
    Ok(handle)
}

/// Maps all of `handle` (`size` bytes) at `ptr`.
pub(crate) fn mem_map(
    ptr: u64,
    size: u64,
    handle: sys::CUmemGenericAllocationHandle,
) -> Result<()> {
    // SAFETY: `[ptr, ptr+size)` lies in a reservation of ours with nothing mapped there (the
    // caller checked) and `handle` is a live allocation of exactly `size` bytes.
    unsafe { sys::cuMemMap(ptr, size as usize, 0, handle, 0) }
        .result()
        .map_err(map("cuMemMap", size))
}

/// Read-write access for each of `devices`.
fn access_descs(devices: &[u32]) -> Vec<sys::CUmemAccessDesc> {
    devices
        .iter()
        .map(|&d| sys::CUmemAccessDesc {
            location: sys::CUmemLocation {
                type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                id: d as i32,
            },
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        })
        .collect()
}

/// Lets each of `devices` read and write `[ptr, ptr+size)`, which is mapped.
pub(crate) fn mem_set_access(ptr: u64, size: u64, devices: &[u32]) -> Result<()> {
    let descs = access_descs(devices);
    // SAFETY: the range is mapped memory of ours; `descs` holds `descs.len()` fully
    // initialised entries.
    unsafe { sys::cuMemSetAccess(ptr, size as usize, descs.as_ptr(), descs.len()) }
        .result()
        .map_err(map("cuMemSetAccess", size))
}

/// Whether device `peer` can access memory that lives on device `owner`.
pub(crate) fn can_access_peer(peer: CUdevice, owner: CUdevice) -> Result<bool> {
    let mut can: std::ffi::c_int = 0;
    // SAFETY: `can` is a valid out-pointer; both devices came from cuDeviceGet.
    unsafe { sys::cuDeviceCanAccessPeer(&mut can, peer, owner) }
        .result()
        .map_err(map("cuDeviceCanAccessPeer", 0))?;
    Ok(can != 0)
}

/// The other devices that can access memory of device `ordinal` (peer access, which the
/// driver allows or not per pair), lowest first.
pub(crate) fn peers_of(ordinal: u32) -> Result<Vec<u32>> {
    let count = device_count().map_err(|name| ArenaError::Cuda {
        name,
        message: "cuDeviceGetCount failed".into(),
    })?;
    let owner = device(ordinal)?;
    let mut peers = Vec::new();
    for p in (0..count.max(0) as u32).filter(|&p| p != ordinal) {
        if can_access_peer(device(p)?, owner)? {
            peers.push(p);
        }
    }
    Ok(peers)
}

/// Lets each of `devices` (none of them the pool's own) read and write the pool's memory.
pub(crate) fn pool_set_access(pool: CUmemoryPool, devices: &[u32]) -> Result<()> {
    if devices.is_empty() {
        return Ok(());
    }
    let descs = access_descs(devices);
    // SAFETY: `pool` is a live pool of ours; `descs` holds `descs.len()` initialised entries.
    unsafe { sys::cuMemPoolSetAccess(pool, descs.as_ptr(), descs.len()) }
        .result()
        .map_err(map("cuMemPoolSetAccess", 0))
}

pub(crate) fn mem_unmap(ptr: u64, size: u64) -> Result<()> {
    // SAFETY: `[ptr, ptr+size)` is whole mappings of ours (one or a run of them) that no live
    // allocation uses and no queued work touches (the caller synchronised the context first).
    unsafe { sys::cuMemUnmap(ptr, size as usize) }
        .result()
        .map_err(map("cuMemUnmap", 0))
}

pub(crate) fn mem_release(handle: sys::CUmemGenericAllocationHandle) -> Result<()> {
    // SAFETY: `handle` came from `mem_create` and is released once; a mapping of it keeps the
    // memory until it is unmapped.
    unsafe { sys::cuMemRelease(handle) }
        .result()
        .map_err(map("cuMemRelease", 0))
}

/// A `CUstream` as the `u64` arena-core's streams carry, and back.
pub(crate) fn stream_to_u64(s: CUstream) -> u64 {
    s as u64
}

pub(crate) fn stream_from_u64(v: u64) -> CUstream {
    v as CUstream
}
