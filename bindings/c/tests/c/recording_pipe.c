/* A C host (SIGPIPE at its default: the signal ends the process) records to a pipe whose
 * reader goes away mid-recording, as `| head` or a FIFO's reader that exits does. The library's
 * writer thread must not end the process: the recording stops with the reason, allocations go
 * on, stop_recording reports it. Ends with "all checks passed". */
#define _POSIX_C_SOURCE 200809L
#include "cuda_arena.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int failures = 0;

#define CHECK(cond)                                                        \
  do {                                                                     \
    if (!(cond)) {                                                         \
      char why[256];                                                       \
      cuda_arena_last_error(why, sizeof why);                              \
      fprintf(stderr, "%s:%d: %s (last error: %s)\n", __FILE__, __LINE__,  \
              #cond, why);                                                 \
      failures++;                                                          \
    }                                                                      \
  } while (0)

int main(void) {
  signal(SIGPIPE, SIG_DFL);
  int fds[2];
  if (pipe(fds) != 0) return 2;
  char path[64];
  snprintf(path, sizeof path, "/dev/fd/%d", fds[1]);
  char err[256];
  cuda_arena_allocator* a = cuda_arena_create("host", "Cpu", 0, NULL, NULL, 0, err, sizeof err);
  if (!a) {
    fprintf(stderr, "create: %s\n", err);
    return 1;
  }
  CHECK(cuda_arena_start_recording(a, path) == CUDA_ARENA_OK);
  close(fds[0]); /* the reader goes */
  /* Far more than the recorder's two 1 MiB buffers, so that its thread writes. */
  for (int i = 0; i < 200000; i++) {
    void* p = cuda_arena_alloc(a, 4096);
    CHECK(p != NULL);
    CHECK(cuda_arena_free(a, p) == CUDA_ARENA_OK);
  }
  CHECK(cuda_arena_stop_recording(a) == CUDA_ARENA_ERR_INVALID_ARGUMENT);
  char why[512];
  cuda_arena_last_error(why, sizeof why);
  CHECK(strstr(why, "stopped early") != NULL);
  cuda_arena_destroy(a);
  close(fds[1]);
  if (failures) return 1;
  printf("all checks passed\n");
  return 0;
}
