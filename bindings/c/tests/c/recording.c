/* Trace recording from C: `recording BACKEND TRACE_PATH BAD_PATH`. Records a session of
 * allocations, reserves and frees to TRACE_PATH and prints the largest sum of requested bytes
 * live at once, as the program counted it ("peak_requested N"); checks the error cases; ends
 * with "all checks passed". The test replays the file and compares the peaks. */
#include "cuda_arena.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

#define CHECK(cond)                                                    \
  do {                                                                 \
    if (!(cond)) {                                                     \
      char why[256];                                                   \
      cuda_arena_last_error(why, sizeof why);                          \
      fprintf(stderr, "%s:%d: %s (last error: %s)\n", __FILE__, __LINE__, \
              #cond, why);                                             \
      failures++;                                                      \
    }                                                                  \
  } while (0)

enum { LIVE = 64 };

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: recording BACKEND TRACE_PATH BAD_PATH\n");
    return 2;
  }
  char err[256];
  cuda_arena_allocator* a = cuda_arena_create(argv[1], "Cpu", 0, NULL, NULL, 0, err, sizeof err);
  if (!a) {
    fprintf(stderr, "create: %s\n", err);
    return 1;
  }
  CHECK(cuda_arena_stop_recording(a) == CUDA_ARENA_ERR_INVALID_ARGUMENT);
  CHECK(cuda_arena_start_recording(a, NULL) == CUDA_ARENA_ERR_INVALID_ARGUMENT);
  CHECK(cuda_arena_start_recording(a, argv[3]) == CUDA_ARENA_ERR_INVALID_ARGUMENT);
  char why[512];
  cuda_arena_last_error(why, sizeof why);
  CHECK(strstr(why, argv[3]) != NULL);

  CHECK(cuda_arena_start_recording(a, argv[2]) == CUDA_ARENA_OK);
  CHECK(cuda_arena_start_recording(a, argv[2]) == CUDA_ARENA_ERR_INVALID_ARGUMENT);

  void* live[LIVE] = {0};
  size_t sizes[LIVE] = {0};
  size_t requested = 0, peak = 0;
  for (unsigned i = 0; i < 2000; i++) {
    unsigned slot = (i * 37u) % LIVE;
    if (live[slot]) {
      CHECK(cuda_arena_free(a, live[slot]) == CUDA_ARENA_OK);
      requested -= sizes[slot];
      live[slot] = NULL;
    }
    size_t size = 1 + (i * 7919u) % 100000u;
    live[slot] = i % 7 == 0 ? cuda_arena_reserve(a, size) : cuda_arena_alloc(a, size);
    CHECK(live[slot] != NULL);
    sizes[slot] = size;
    requested += size;
    if (requested > peak) peak = requested;
  }
  for (unsigned slot = 0; slot < LIVE; slot++) {
    if (live[slot]) CHECK(cuda_arena_free(a, live[slot]) == CUDA_ARENA_OK);
  }
  CHECK(cuda_arena_stop_recording(a) == CUDA_ARENA_OK);
  CHECK(cuda_arena_stop_recording(a) == CUDA_ARENA_ERR_INVALID_ARGUMENT);

  cuda_arena_destroy(a);
  CHECK(cuda_arena_start_recording(a, argv[2]) == CUDA_ARENA_ERR_RELEASED);
  CHECK(cuda_arena_stop_recording(a) == CUDA_ARENA_ERR_RELEASED);

  printf("peak_requested %zu\n", peak);
  if (failures) return 1;
  printf("all checks passed\n");
  return 0;
}
