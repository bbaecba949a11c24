/* cuda-arena C ABI: ONNX Runtime's BFC arena, the CUDA memory pool and simulated devices,
 * for C/C++ hosts and other languages' bindings. No function unwinds or aborts: failures are
 * a NULL pointer or a non-zero code, and cuda_arena_last_error() says why (per thread).
 * Every function may be called from any thread, on any allocator, at once. */
#ifndef CUDA_ARENA_H
#define CUDA_ARENA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version this header belongs to; cuda_arena_version() is the loaded library's. */
#define CUDA_ARENA_VERSION "0.1.0"
const char* cuda_arena_version(void);

/* Return codes; they mirror the JavaScript error codes (ERR_ARENA_OUT_OF_MEMORY, ...). */
#define CUDA_ARENA_OK 0
#define CUDA_ARENA_ERR_OUT_OF_MEMORY 1
#define CUDA_ARENA_ERR_INVALID_CONFIG 2
#define CUDA_ARENA_ERR_INVALID_ARGUMENT 3
#define CUDA_ARENA_ERR_UNKNOWN_POINTER 4
#define CUDA_ARENA_ERR_RELEASED 5
#define CUDA_ARENA_ERR_NO_CUDA 6
#define CUDA_ARENA_ERR_CUDA 7
#define CUDA_ARENA_ERR_PANIC 8 /* an internal bug was caught; the allocator is unchanged */

/* How many stream tokens one shared allocator remembers at once (see
 * cuda_arena_alloc_on_stream). */
#define CUDA_ARENA_MAX_STREAMS 4096

/* An allocator handle. It is not an address: never dereference it. Handles are never
 * reused within a process, so a destroyed one stays recognisably destroyed. */
typedef struct cuda_arena_allocator cuda_arena_allocator;

/* ONNX Runtime's GetStats values; limit is -1 when unlimited. */
typedef struct {
  int64_t limit;
  uint64_t in_use, total_allocated, max_in_use, num_allocs, num_reserves,
      num_arena_extensions, num_arena_shrinkages, max_alloc_size, requested_in_use, reserved_bytes;
} cuda_arena_stats;

/* What reached a device's driver from every allocator of that device and backend in the
 * process (TypeScript's deviceStats): driver allocations and frees (a mapping of pages counts
 * as one allocation, an unmapping as one free), refused requests, bytes outstanding;
 * device_waits: the times those allocators waited for all of the device's queued work (a
 * synchronization before unmapping pages that work might still use, or to settle what streams
 * freed), each a stall of the calling thread until the whole GPU is idle; stream_waits: the
 * times they waited for one stream's work up to an event. On "host" and "virtual", the calls
 * that would wait on a GPU. */
typedef struct {
  uint64_t raw_allocs, raw_frees, raw_failures, raw_bytes_outstanding, device_waits, stream_waits;
} cuda_arena_device_stats;

/* backend: "cuda" | "host" | "virtual"; memory: "Cuda" | "CudaPinned" | "Cpu";
 * keys/values: n arena.* pairs (may be NULL when n is 0). Allocators of one backend, memory
 * and device share one arena, as in ONNX Runtime's CUDA plugin; each create is one user.
 * When that arena exists already, it keeps the options it was made with: a create whose
 * options differ still succeeds, joins it, and warns (see cuda_arena_last_warning).
 * On failure: returns NULL and writes the reason to err (when err_len > 0). On success: err
 * holds the warning, or an empty string when there is none.
 *
 * Memory: on "host", and for "CudaPinned" on "cuda", addresses are host memory the caller
 * may read and write; "Cuda" on "cuda" is device memory; on "virtual" addresses are numbers
 * from a simulated address space with no memory behind them: never read or write them. */
cuda_arena_allocator* cuda_arena_create(const char* backend, const char* memory, int device_id,
                                        const char* const* keys, const char* const* values,
                                        size_t n, char* err, size_t err_len);
/* NULL for size 0 and on failure (then cuda_arena_last_error_code() is non-zero). */
void* cuda_arena_alloc(cuda_arena_allocator* a, size_t size);
/* cu_stream: a CUstream (cuda backend; any stream of the device, the caller's own included:
 * the caller keeps it valid until it resets it) or any non-NULL token naming a stream (NULL:
 * as cuda_arena_alloc). Both the arena and the memory pool take it. A chunk freed after use on
 * a stream is reused on that stream at once and on others once the stream is reset, or, on the
 * cuda backend, once the stream's work up to the free has completed (an event recorded on it
 * when another stream needs memory); the pool frees on the stream. Each token the allocator
 * has not seen is remembered until cuda_arena_reset_stream (due before destroying it), or, on
 * the cuda backend, until it holds no memory and its frees are done (such tokens are forgotten
 * once 1024 are known); with CUDA_ARENA_MAX_STREAMS remembered that hold memory or may still
 * run (without events: any not reset), a new token fails with
 * CUDA_ARENA_ERR_INVALID_ARGUMENT. Only for stream-aware allocators ("Cuda" memory). */
void* cuda_arena_alloc_on_stream(cuda_arena_allocator* a, size_t size, void* cu_stream);
/* The host is done with cu_stream's work (ONNX Runtime's ResetChunksUsingStream, at the end
 * of a run, or before destroying the CUstream): its free chunks lose their tag and merge,
 * chunks still in use lose it when freed, and the token is forgotten, so a later stream with
 * the same value starts fresh. An unknown or NULL token is CUDA_ARENA_OK. Applies to every
 * user of the shared allocator. */
int cuda_arena_reset_stream(cuda_arena_allocator* a, void* cu_stream);
void* cuda_arena_reserve(cuda_arena_allocator* a, size_t size);
int cuda_arena_free(cuda_arena_allocator* a, void* p); /* free(NULL) is CUDA_ARENA_OK */
int cuda_arena_shrink(cuda_arena_allocator* a);
int cuda_arena_get_stats(const cuda_arena_allocator* a, cuda_arena_stats* out);
/* The driver counters of a's device (cuda_arena_device_stats): device_id's, which count its
 * "Cuda" and "CudaPinned" memory; for "Cpu" memory, device 0's, which do not count it. */
int cuda_arena_get_device_stats(const cuda_arena_allocator* a, cuda_arena_device_stats* out);
/* One user fewer; the last destroy returns all memory (live allocations included). Destroy
 * each handle exactly once. After it the handle is dead: a second destroy, or any other call
 * with it, does nothing and sets the last error to CUDA_ARENA_ERR_RELEASED (calls that return
 * a code return it). Pointers the handle gave out are not valid after the last destroy.
 * NULL is ignored. */
void cuda_arena_destroy(cuda_arena_allocator* a);

/* ---- ONNX Runtime ------------------------------------------------------------------------
 * cuda-arena never links ONNX Runtime: it calls the function table the host passes (the
 * const OrtApi* of OrtGetApiBase()->GetApi(version)). ORT's types are only declared here, so
 * this header compiles before or after onnxruntime_c_api.h (C11 and C++ allow the repeated
 * typedefs). API versions: at least CUDA_ARENA_ORT_MIN_API_VERSION (ORT 1.23: the first with
 * OrtAllocator::GetStats/AllocOnStream, key/value pairs and SyncStream_GetHandle); a host
 * asking for more than CUDA_ARENA_ORT_MAX_API_VERSION gets an allocator whose version field
 * says that one, so ORT reads no field added after it. */
#define CUDA_ARENA_ORT_MIN_API_VERSION 23
#define CUDA_ARENA_ORT_MAX_API_VERSION 30

typedef struct OrtApi OrtApi;
typedef struct OrtAllocator OrtAllocator;
typedef struct OrtStatus OrtStatus;
typedef struct OrtLogger OrtLogger;
typedef struct OrtMemoryInfo OrtMemoryInfo;
typedef struct OrtKeyValuePairs OrtKeyValuePairs;

/* An OrtAllocator over the allocator of handle a, for RegisterAllocator (sessions created with
 * the config entry session.use_env_allocators=1 then allocate from it) or any ORT call that
 * takes an OrtAllocator*. version: the API version the host asks for (its ORT_API_VERSION);
 * below CUDA_ARENA_ORT_MIN_API_VERSION, or api NULL, is CUDA_ARENA_ERR_INVALID_ARGUMENT.
 * logger: NULL, or an ORT logger that lives until exit, for the reasons of failures.
 * Returns NULL and writes the reason to err on failure.
 *
 * The struct: version = min(version, CUDA_ARENA_ORT_MAX_API_VERSION); Alloc, Free, Info,
 * Reserve, GetStats (every key of ORT's: Limit, InUse, RequestedInUse, TotalAllocated,
 * ReservedBytes, MaxInUse, NumAllocs, NumReserves, NumArenaExtensions, NumArenaShrinkages,
 * MaxAllocSize); AllocOnStream for "Cuda" memory (the stream's SyncStream_GetHandle names the
 * arena stream, as cuda_arena_alloc_on_stream's cu_stream; a stream with no handle allocates
 * as Alloc); Shrink from version 25 for allocators that can shrink. Info is an OrtMemoryInfo
 * made with api->CreateMemoryInfo: "Cuda", "CudaPinned" or "Cpu", the device id,
 * OrtDeviceAllocator (RegisterAllocator refuses OrtArenaAllocator), OrtMemTypeCPUOutput for
 * pinned memory and OrtMemTypeDefault otherwise.
 * Failures: Alloc, Reserve and AllocOnStream return NULL (size 0 too); the reason goes to the
 * logger and to this thread's cuda_arena_last_error. Free of an address the allocator does not
 * hold is logged and ignored (ORT's Free returns nothing). GetStats and Shrink return an
 * OrtStatus made with api->CreateStatus whose message starts with the error code.
 *
 * Ownership: the view is one user of the allocator, like a handle, so cuda_arena_destroy(a)
 * may come before or after. Its struct stays valid until the process exits, because ORT's
 * sessions may call a registered allocator after UnregisterAllocator, until they are
 * released. */
OrtAllocator* cuda_arena_ort_allocator(cuda_arena_allocator* a, const OrtApi* api, uint32_t version,
                                       const OrtLogger* logger, char* err, size_t err_len);
/* Lets the view's user go: when it was the last user, all the allocator's memory goes back.
 * Call it only once no session can use the view any more (sessions released; unregistered).
 * The struct stays valid: a later call through it fails safely (Alloc NULL with
 * CUDA_ARENA_ERR_RELEASED, Free ignored, GetStats/Shrink an error status, Info still
 * answers). A second release returns CUDA_ARENA_ERR_RELEASED, and anything that is not a view
 * CUDA_ARENA_ERR_INVALID_ARGUMENT; neither touches anything. Without a release the view keeps
 * the allocator until exit (what a registration for the process's life wants). */
int cuda_arena_ort_allocator_release(OrtAllocator* allocator);

/* Plugin execution providers: the allocator calls of ONNX Runtime's CUDA plugin EP design,
 * one call each, over a process-wide cuda-arena factory named factory_name (ORT's
 * ep_factory.<factory_name>.arena.* options are addressed to it; two handles with one name
 * share its arenas). backend: "cuda" | "host" | "virtual". version and logger as in
 * cuda_arena_ort_allocator (the logger must outlive the handle). Returns NULL and writes the
 * reason to err on failure. An EP handle is not an address: never dereference it. */
typedef struct cuda_arena_ort_ep cuda_arena_ort_ep;
cuda_arena_ort_ep* cuda_arena_ort_ep_create(const char* backend, const char* factory_name,
                                            const OrtApi* api, uint32_t version,
                                            const OrtLogger* logger, char* err, size_t err_len);
/* From OrtEpFactory::CreateAllocator(this, memory_info, allocator_options, out):
 *   return cuda_arena_ort_ep_create_allocator(ep, memory_info, allocator_options, 0, out);
 * memory_info "Cuda" / "CudaPinned" / "Cpu" with a device id: the device's shared device
 * arena (or memory pool with arena.use_cuda_mempool=1), pinned arena or CPU arena, one more
 * user; of type OrtReadOnlyAllocator: a new plain allocator (initializers bypass the arena).
 * Info answers memory_info itself, which must outlive the allocator (ORT's own, from the
 * OrtEpDevice, does). options: ORT's key/value pairs (NULL: none); arena.* keys and
 * ep_factory.<factory_name>.arena.* keys (prefix stripped; they win) configure a new arena;
 * other keys are ignored. When the shared arena exists, it is joined with its own options and
 * a warning naming the differing keys goes to the logger and to cuda_arena_last_warning.
 * replace != 0: a new shared allocator is made; the old one lives until its users release it.
 * Returns NULL (success, *out set) or an OrtStatus made with the host's CreateStatus (*out
 * NULL; the message starts with the error code, e.g. ERR_ARENA_INVALID_CONFIG). A status needs
 * an OrtApi: where the library was never given one (ep is NULL or not a handle, and no
 * cuda_arena_ort_ep_create or cuda_arena_ort_allocator call succeeded), none can be made, so
 * NULL comes back with *out NULL and the last error set: a NULL *out is a failure. The same
 * holds for cuda_arena_ort_ep_run_end. */
OrtStatus* cuda_arena_ort_ep_create_allocator(cuda_arena_ort_ep* ep, const OrtMemoryInfo* memory_info,
                                              const OrtKeyValuePairs* options, int replace,
                                              OrtAllocator** out);
/* From OrtEpFactory::ReleaseAllocator(this, allocator): one user fewer (all memory back at the
 * last) and the OrtAllocator freed; ORT calls nothing on it afterwards. Anything that is not a
 * live allocator of this handle sets the last error and is not touched. */
void cuda_arena_ort_ep_release_allocator(cuda_arena_ort_ep* ep, OrtAllocator* allocator);
/* From OrtSyncStreamImpl::OnSessionRunEnd(this): stream_handle is the stream's native handle
 * (what its GetHandle returns, the cudaStream_t); the allocators of device_id forget it, so
 * its chunks lose their tag, merge, and any stream may take them. Within a run, a chunk freed
 * on a stream is reused by that stream at once and by other streams after this call (ORT's
 * rule for streams that never waited on each other). Returns NULL or an error status. */
OrtStatus* cuda_arena_ort_ep_run_end(cuda_arena_ort_ep* ep, int device_id, void* stream_handle);
/* Destroys the handle. Allocators ORT has not released let their users go; their structs stay
 * valid (failing safely) until exit. NULL is ignored; a destroyed handle sets the last error. */
void cuda_arena_ort_ep_destroy(cuda_arena_ort_ep* ep);

/* The last failure on this thread: its code (CUDA_ARENA_OK if none) and its message, copied
 * into buf (NUL-terminated, truncated to len). Returns the message length. Calls made from a
 * thread-local destructor that runs after the library's own (a pthread_key destructor, a C++
 * thread_local's) work, but keep no last error: there the code reads CUDA_ARENA_ERR_PANIC and
 * the message is empty, and the call's own return value is its outcome. */
int cuda_arena_last_error_code(void);
size_t cuda_arena_last_error(char* buf, size_t len);
/* The warning of this thread's last cuda_arena_create or cuda_arena_ort_ep_create_allocator
 * (empty if it had none), copied as cuda_arena_last_error does. Returns its length. */
size_t cuda_arena_last_warning(char* buf, size_t len);

/* PyTorch: the entry points of torch.cuda.memory.CUDAPluggableAllocator, with its signatures
 * (a cudaStream_t is a void* here; NULL is the legacy default stream, PyTorch's default).
 *   a = CUDAPluggableAllocator(path, "cuda_arena_torch_alloc", "cuda_arena_torch_free")
 * and, by address, a.allocator().set_init_fn / set_reset_fn / set_memory_fraction_fn /
 * set_record_stream_fn (docs/pytorch.md). Each device gets one user of the process-wide
 * "cuda" factory's shared device allocator (the arena, or the memory pool with
 * arena.use_cuda_mempool=1), configured once from the environment: CUDA_ARENA_CONF holds
 * arena.* pairs, "arena.extend_strategy=1,arena.max_mem=8589934592" (strict: no spaces, no
 * other keys). A bad value is written to stderr once, naming the key, and every allocation
 * then fails (NULL; the last error is CUDA_ARENA_ERR_OUT_OF_MEMORY and names the key).
 * CUDA_ARENA_TORCH_BACKEND=host|virtual replaces the GPU with a simulated one, for tests.
 * Streams are PyTorch's: a block freed on a stream is reused on it at once and on others once
 * that stream's work up to the free has completed (an event recorded on it); PyTorch never
 * resets its streams, and needs not. Nothing unwinds into PyTorch: failures set the last
 * error and, since PyTorch does not check them, are also written to stderr. */
/* torch's alloc_fn: NULL for size 0 and on failure. */
void* cuda_arena_torch_alloc(size_t size, int device, void* stream);
/* torch's free_fn: ptr from cuda_arena_torch_alloc with this device and stream (size unused). */
void cuda_arena_torch_free(void* ptr, size_t size, int device, void* stream);
/* torch's init_fn: reads the environment (a bad value is reported now). */
void cuda_arena_torch_init(int device_count);
/* torch's reset_fn (torch.cuda.empty_cache): memory no block uses goes back to the driver. */
void cuda_arena_torch_empty_cache(void);
/* torch's memory_fraction_fn: device may hold at most fraction (0..1) of its memory from the
 * driver (TotalAllocated), checked after each allocation: one that would hold more gives its
 * block back, returns idle memory and retries once, then fails as out of memory. */
void cuda_arena_torch_set_memory_fraction(double fraction, int device);
/* torch's record_stream_fn: the live block ptr is also used on stream; its free makes its
 * own stream wait (on the GPU) for that stream's work queued so far. */
void cuda_arena_torch_record_stream(void* ptr, void* stream);
/* The counters of device's allocator (ctypes-friendly). CUDA_ARENA_OK or an error code. */
int cuda_arena_torch_stats(int device, cuda_arena_stats* out);
/* The driver counters of device (cuda_arena_device_stats), its allocator set up if it was not. */
int cuda_arena_torch_device_stats(int device, cuda_arena_device_stats* out);

/* Trace recording (docs/recording.md): the allocator's traffic, every user's (other handles
 * of the shared allocator, ONNX Runtime's view of it), written to a new file at path (replaced
 * if it exists) as the trace `cuda-arena replay` reads: alloc (with a stream number), reserve
 * and free lines, in the order the allocator saw them. Failed calls are not recorded. Lines go
 * through two 1 MiB buffers to a writer thread; when both are full, allocating waits for the
 * disk, so memory stays bounded. A write error (a full disk) stops the recording; allocations
 * go on unaffected. A recording already on, or a path that cannot be created, is
 * CUDA_ARENA_ERR_INVALID_ARGUMENT (the message names the path). */
int cuda_arena_start_recording(cuda_arena_allocator* a, const char* path);
/* Stops the recording once everything recorded is in the file. CUDA_ARENA_OK, or
 * CUDA_ARENA_ERR_INVALID_ARGUMENT when none is on or when it had stopped early (the last
 * error gives why; the file holds the whole lines written before). The last destroy of the
 * allocator also stops a recording, writing everything. */
int cuda_arena_stop_recording(cuda_arena_allocator* a);

/* Replaying a trace file (docs/replay-report.md): the trace at path (JSON lines, or a PyTorch
 * memory snapshot, told by its first byte) replayed through a fresh allocator of the config
 * the n keys/values select on backend ("virtual" or "cuda"), as `cuda-arena replay --json`
 * does: a pass for the exact peak held, then a timed pass. Returns the report as one JSON
 * object, {"trace", "backend", "linesSkippedCount", "runs": [{"allocator", "warnings", "ops",
 * "peakRequested", "peakHeld", "failedAllocs", "liveAtEnd", "elapsedNs", "stats": {GetStats'
 * keys}}]}, to give back with cuda_arena_string_free; NULL on failure (the last error says
 * why: an unreadable or malformed file, a bad key, an unknown backend). This call, the
 * recording calls and every call but the allocations, frees and stats hold off pthread_cancel
 * while they run: a thread cancelled meanwhile is cancelled at its next cancellation point
 * after the call returns. */
char* cuda_arena_replay_file(const char* path, const char* backend, const char* const* keys,
                             const char* const* values, size_t n);
/* Gives back a string cuda_arena_replay_file returned; NULL is ignored. */
void cuda_arena_string_free(char* s);

#ifdef __cplusplus
}
#endif

#endif /* CUDA_ARENA_H */
