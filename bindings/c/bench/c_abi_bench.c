/* Per-call costs of the C ABI, for the numbers in docs/c-and-cpp.md (issue 11, items 7
 * and 14). Not a test: it asserts nothing about time.
 *
 *   pairs:   cuda_arena_alloc + cuda_arena_free of 1 KiB, repeated.
 *   streams: N distinct stream tokens, each used once (alloc_on_stream, free) and then reset
 *            with cuda_arena_reset_stream, as a host does when a stream's work is done; the
 *            cost of alloc_on_stream over the last 1000 tokens, for N = 1k and 16k.
 *
 * Build against a release build (cargo build --release -p cuda-arena-c) and run:
 *   cc -O2 -std=c11 bindings/c/bench/c_abi_bench.c -Ibindings/c/include -Ltarget/release \
 *      -lcuda_arena -Wl,-rpath,$PWD/target/release -o target/c_abi_bench
 *   target/c_abi_bench [host|virtual|cuda]
 */
#define _POSIX_C_SOURCE 199309L
#include "cuda_arena.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static cuda_arena_allocator* create(const char* backend) {
  char err[512];
  cuda_arena_allocator* a = cuda_arena_create(backend, "Cuda", 0, NULL, NULL, 0, err, sizeof err);
  if (a == NULL) {
    fprintf(stderr, "create failed: %s\n", err);
    exit(1);
  }
  return a;
}

static void pairs(const char* backend) {
  cuda_arena_allocator* a = create(backend);
  const int n = 2000000;
  double best = 1e30;
  for (int round = 0; round < 5; round++) {
    double t0 = now_ns();
    for (int i = 0; i < n; i++) {
      void* p = cuda_arena_alloc(a, 1024);
      if (p == NULL || cuda_arena_free(a, p) != CUDA_ARENA_OK) {
        fprintf(stderr, "alloc/free failed\n");
        exit(1);
      }
    }
    double per = (now_ns() - t0) / n;
    if (per < best) best = per;
  }
  printf("%s: cuda_arena_alloc + cuda_arena_free: %.1f ns per pair (best of 5 x %d)\n", backend, best, n);
  cuda_arena_destroy(a);
}

static void streams(const char* backend, int n) {
  cuda_arena_allocator* a = create(backend);
  const int last = 1000;
  double in_last = 0, t_all = now_ns();
  for (int i = 0; i < n; i++) {
    void* token = (void*)(uintptr_t)(0x10000 + (uintptr_t)i * 64);
    double t0 = now_ns();
    void* p = cuda_arena_alloc_on_stream(a, 4096, token);
    double dt = now_ns() - t0;
    if (p == NULL) {
      char msg[512];
      cuda_arena_last_error(msg, sizeof msg);
      fprintf(stderr, "alloc_on_stream failed at token %d: %s\n", i, msg);
      exit(1);
    }
    if (i >= n - last) in_last += dt;
    cuda_arena_free(a, p);
    cuda_arena_reset_stream(a, token);
  }
  double all = (now_ns() - t_all) / n;
  cuda_arena_stats s;
  cuda_arena_get_stats(a, &s);
  printf("%s: %6d distinct tokens: alloc_on_stream %.2f us over the last %d; %.2f us per token "
         "(alloc_on_stream + free + reset); arena holds %llu bytes\n",
         backend, n, in_last / last / 1000.0, last, all / 1000.0, (unsigned long long)s.total_allocated);
  cuda_arena_destroy(a);
}

int main(int argc, char** argv) {
  const char* backend = argc > 1 ? argv[1] : "host";
  pairs(backend);
  streams(backend, 1000);
  streams(backend, 16000);
  return 0;
}
