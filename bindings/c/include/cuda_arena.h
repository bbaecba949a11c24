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
/* cu_stream: a CUstream (cuda backend) or any non-NULL token naming a stream (NULL: as
 * cuda_arena_alloc). A chunk freed after use on a stream is reused on that stream at once and
 * on others once the stream is reset. Each token the allocator has not seen is remembered
 * until cuda_arena_reset_stream; with CUDA_ARENA_MAX_STREAMS remembered, a new token fails
 * with CUDA_ARENA_ERR_INVALID_ARGUMENT. Only for stream-aware allocators ("Cuda" memory). */
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
/* One user fewer; the last destroy returns all memory (live allocations included). Destroy
 * each handle exactly once. After it the handle is dead: a second destroy, or any other call
 * with it, does nothing and sets the last error to CUDA_ARENA_ERR_RELEASED (calls that return
 * a code return it). Pointers the handle gave out are not valid after the last destroy.
 * NULL is ignored. */
void cuda_arena_destroy(cuda_arena_allocator* a);

/* The last failure on this thread: its code (CUDA_ARENA_OK if none) and its message, copied
 * into buf (NUL-terminated, truncated to len). Returns the message length. */
int cuda_arena_last_error_code(void);
size_t cuda_arena_last_error(char* buf, size_t len);
/* The warning of this thread's last cuda_arena_create (empty if it had none), copied as
 * cuda_arena_last_error does. Returns its length. */
size_t cuda_arena_last_warning(char* buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* CUDA_ARENA_H */
