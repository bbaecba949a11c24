/* A C host using cuda-arena through its header: allocate, write, free, stats, errors.
 * Built and run by tests/c_program.rs on the `host` and `virtual` backends, under valgrind
 * (and on `cuda` when asked). */
#include "cuda_arena.h"
#include <stdio.h>
#include <string.h>

static int failures = 0;
#define CHECK(cond)                                                      \
  do {                                                                   \
    if (!(cond)) {                                                       \
      char msg[256];                                                     \
      cuda_arena_last_error(msg, sizeof msg);                            \
      fprintf(stderr, "FAILED %s:%d: %s (last error: %s)\n", __FILE__, __LINE__, #cond, msg); \
      failures++;                                                        \
    }                                                                    \
  } while (0)

int main(int argc, char** argv) {
  const char* backend = argc > 1 ? argv[1] : "host";
  /* On cuda, pinned memory, so that this program can touch it; on host "Cuda" is host memory;
   * on virtual the addresses have no memory behind them (the header says so). */
  const int on_cuda = strcmp(backend, "cuda") == 0;
  const int has_memory = strcmp(backend, "virtual") != 0;
  const char* memory = on_cuda ? "CudaPinned" : "Cuda";
  const char* keys[] = {"arena.extend_strategy", "arena.max_mem"};
  const char* values[] = {"1", "1073741824"};
  char err[256] = {0};

  CHECK(strcmp(cuda_arena_version(), CUDA_ARENA_VERSION) == 0);

  cuda_arena_allocator* a = cuda_arena_create(backend, memory, 0, keys, values, 2, err, sizeof err);
  CHECK(a != NULL);
  if (a == NULL) {
    fprintf(stderr, "create failed: %s\n", err);
    return 1;
  }

  char* p = (char*)cuda_arena_alloc(a, 1000);
  CHECK(p != NULL);
  CHECK(((size_t)p % 256) == 0);
  /* Host and pinned memory are host-addressable: write and read it directly. */
  if (has_memory && p != NULL) {
    memset(p, 0x5a, 1000);
    CHECK(p[999] == 0x5a);
  }

  cuda_arena_stats s;
  CHECK(cuda_arena_get_stats(a, &s) == CUDA_ARENA_OK);
  CHECK(s.in_use == 1024 && s.requested_in_use == 1000 && s.num_allocs == 1 && s.limit == 1073741824);

  void* r = cuda_arena_reserve(a, 4096);
  CHECK(r != NULL);
  /* Streams are for device memory: on cuda the pinned arena has none, so a device arena takes
   * the stream allocation, on CUDA's per-thread default stream (CU_STREAM_PER_THREAD). */
  cuda_arena_allocator* d = on_cuda ? cuda_arena_create(backend, "Cuda", 0, keys, values, 2, err, sizeof err) : a;
  CHECK(d != NULL);
  int token;
  void* stream = on_cuda ? (void*)0x2 : (void*)&token;
  void* q = cuda_arena_alloc_on_stream(d, 256, stream);
  CHECK(q != NULL);

  CHECK(cuda_arena_free(a, p + 1) == CUDA_ARENA_ERR_UNKNOWN_POINTER);
  CHECK(cuda_arena_last_error_code() == CUDA_ARENA_ERR_UNKNOWN_POINTER);
  CHECK(cuda_arena_free(a, p) == CUDA_ARENA_OK);
  CHECK(cuda_arena_last_error_code() == CUDA_ARENA_OK);
  CHECK(cuda_arena_free(a, p) == CUDA_ARENA_ERR_UNKNOWN_POINTER);
  CHECK(cuda_arena_free(a, NULL) == CUDA_ARENA_OK);
  CHECK(cuda_arena_free(a, r) == CUDA_ARENA_OK);
  CHECK(cuda_arena_free(d, q) == CUDA_ARENA_OK);
  /* The stream's work is done: its chunks are free for every stream, its token forgotten. */
  CHECK(cuda_arena_reset_stream(d, stream) == CUDA_ARENA_OK);

  CHECK(cuda_arena_alloc(a, 0) == NULL && cuda_arena_last_error_code() == CUDA_ARENA_OK);
  CHECK(cuda_arena_alloc(a, (size_t)1 << 40) == NULL);
  CHECK(cuda_arena_last_error_code() == CUDA_ARENA_ERR_OUT_OF_MEMORY);

  CHECK(cuda_arena_shrink(a) == CUDA_ARENA_OK);
  CHECK(cuda_arena_get_stats(a, &s) == CUDA_ARENA_OK);
  /* Shrink gave back all it held: regions (pinned, on cuda), or mappings (the default device
   * arena maps pages). */
  CHECK(s.in_use == 0 && s.total_allocated == 0 && s.num_arena_shrinkages >= 1);
  if (on_cuda) {
    CHECK(cuda_arena_shrink(d) == CUDA_ARENA_OK);
    CHECK(cuda_arena_get_stats(d, &s) == CUDA_ARENA_OK);
    CHECK(s.in_use == 0 && s.total_allocated == 0);
    cuda_arena_destroy(d);
  }

  /* Bad input is an error code and a message, never a crash. */
  CHECK(cuda_arena_alloc(NULL, 16) == NULL && cuda_arena_last_error_code() == CUDA_ARENA_ERR_INVALID_ARGUMENT);
  CHECK(cuda_arena_get_stats(a, NULL) == CUDA_ARENA_ERR_INVALID_ARGUMENT);
  const char* bad_keys[] = {"arena.max_mem"};
  const char* bad_values[] = {"4096abc"};
  CHECK(cuda_arena_create(backend, memory, 0, bad_keys, bad_values, 1, err, sizeof err) == NULL);
  CHECK(cuda_arena_last_error_code() == CUDA_ARENA_ERR_INVALID_CONFIG);
  CHECK(strstr(err, "arena.max_mem") != NULL);
  CHECK(cuda_arena_create("tpu", memory, 0, NULL, NULL, 0, err, sizeof err) == NULL);
  CHECK(cuda_arena_last_error_code() == CUDA_ARENA_ERR_INVALID_ARGUMENT);
  CHECK(cuda_arena_create(backend, "Cuda", 7, NULL, NULL, 0, err, sizeof err) == NULL);

  cuda_arena_destroy(a);
  cuda_arena_destroy(NULL);
  if (failures == 0) printf("c smoke test on %s: all checks passed\n", backend);
  return failures == 0 ? 0 : 1;
}
