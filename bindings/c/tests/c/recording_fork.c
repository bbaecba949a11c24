/* `recording_fork TRACE_PATH`: a recording on when the process forks (a pre-fork server's
 * workers). The child allocates far past the recorder's buffers, then stops: its copy of the
 * recording has no writer thread, so it must stop itself (before, the child waited for that
 * thread forever) and write nothing into the parent's file. The parent's recording goes on
 * and holds exactly the parent's 2,000 allocations and frees. Ends with "all checks passed". */
#define _POSIX_C_SOURCE 200809L
#include "cuda_arena.h"

#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
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

static void churn(cuda_arena_allocator* a, int n) {
  for (int i = 0; i < n; i++) {
    void* p = cuda_arena_alloc(a, 4096);
    CHECK(p != NULL);
    CHECK(cuda_arena_free(a, p) == CUDA_ARENA_OK);
  }
}

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  char err[256];
  cuda_arena_allocator* a = cuda_arena_create("host", "Cpu", 0, NULL, NULL, 0, err, sizeof err);
  if (!a) {
    fprintf(stderr, "create: %s\n", err);
    return 1;
  }
  CHECK(cuda_arena_start_recording(a, argv[1]) == CUDA_ARENA_OK);
  churn(a, 1000);
  pid_t pid = fork();
  if (pid < 0) return 2;
  if (pid == 0) {
    alarm(60); /* a hang ends the child with SIGALRM, and the test fails */
    churn(a, 200000);
    CHECK(cuda_arena_stop_recording(a) == CUDA_ARENA_ERR_INVALID_ARGUMENT);
    char why[512];
    cuda_arena_last_error(why, sizeof why);
    CHECK(strstr(why, "forked") != NULL);
    cuda_arena_destroy(a);
    return failures ? 1 : 0;
  }
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  churn(a, 1000);
  CHECK(cuda_arena_stop_recording(a) == CUDA_ARENA_OK);
  cuda_arena_destroy(a);
  if (failures) return 1;
  printf("all checks passed\n");
  return 0;
}
