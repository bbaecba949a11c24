// Issue 25 on the GPU: a server that makes a CUDA stream per request and never resets it in the
// arena. Each request creates a stream, allocates three buffers of 64 KiB-2 MiB on it through
// cuda_arena_alloc_on_stream, queues work on them (a kernel that spins SPIN_US microseconds,
// then a memset of each), frees them (the frees are stream-ordered: the arena records events),
// and is done W requests later (synchronized and destroyed, never reset). What the arena
// holds should follow the requests in flight, not the number of streams there have been.
//
// Build there (nvcc): nvcc -O2 -o prs per_request_streams.cu -I.device -L.device -lcuda_arena
// Run: ./prs REQUESTS W SPIN_US [arena.key=value ...]; RETIRE=N (environment, default 0) keeps
// each done stream N more requests before destroying it, so that new streams do not get the
// handles of those just destroyed (the driver hands the same values out again at once).
// Prints a line per checkpoint: requests, held (total_allocated) MiB, max in use MiB, the
// driver-measured delta (cudaMemGetInfo) MiB, seconds.
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_arena.h"

__global__ void spin(long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

static double now_s() {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

#define CHECK(x)                                                          \
  do {                                                                    \
    cudaError_t e_ = (x);                                                 \
    if (e_ != cudaSuccess) {                                              \
      fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));            \
      return 1;                                                           \
    }                                                                     \
  } while (0)

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s REQUESTS W SPIN_US [arena.key=value ...]\n", argv[0]);
    return 2;
  }
  long requests = atol(argv[1]);
  int w = atoi(argv[2]);
  long spin_us = atol(argv[3]);
  if (requests < 1 || w < 1 || w > 100000 || spin_us < 0) {
    fprintf(stderr, "REQUESTS and W must be at least 1 (W at most 100000), SPIN_US at least 0\n");
    return 2;
  }
  const char* keys[16];
  const char* values[16];
  static char kv[16][128];
  int n = 0;
  for (int i = 4; i < argc && n < 16; i++, n++) {
    snprintf(kv[n], sizeof kv[n], "%s", argv[i]);
    char* eq = strchr(kv[n], '=');
    if (!eq) {
      fprintf(stderr, "not key=value: %s\n", argv[i]);
      return 2;
    }
    *eq = 0;
    keys[n] = kv[n];
    values[n] = eq + 1;
  }
  CHECK(cudaSetDevice(0));
  CHECK(cudaFree(0));
  int clock_khz = 0;
  CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  long long cycles = (long long)spin_us * clock_khz / 1000;
  size_t free0, total;
  CHECK(cudaMemGetInfo(&free0, &total));
  char err[512];
  cuda_arena_allocator* a = cuda_arena_create("cuda", "Cuda", 0, keys, values, n, err, sizeof err);
  if (!a) {
    fprintf(stderr, "create: %s\n", err);
    return 1;
  }
  cudaStream_t* ring = (cudaStream_t*)calloc(w, sizeof(cudaStream_t));
  const char* retire_env = getenv("RETIRE");
  long retire = retire_env ? atol(retire_env) : 0;
  if (retire < 0 || retire > 100000) {
    fprintf(stderr, "RETIRE must be 0 to 100000\n");
    return 2;
  }
  cudaStream_t* retired = (cudaStream_t*)calloc(retire > 0 ? retire : 1, sizeof(cudaStream_t));
  long distinct = 0;  // distinct handle values seen, among the last 4096
  void* seen[4096] = {0};
  uint64_t seed = 12345;
  size_t driver_peak = 0;
  double t0 = now_s();
  long next_report = 1000;
  for (long i = 0; i < requests; i++) {
    int slot = (int)(i % w);
    if (ring[slot]) {  // the request W back is done: its host waits for it and drops its stream
      CHECK(cudaStreamSynchronize(ring[slot]));
      if (retire > 0) {
        long r = i % retire;
        if (retired[r]) CHECK(cudaStreamDestroy(retired[r]));
        retired[r] = ring[slot];
      } else {
        CHECK(cudaStreamDestroy(ring[slot]));
      }
    }
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    ring[slot] = s;
    {
      uintptr_t h = ((uintptr_t)s >> 4) % 4096;
      if (seen[h] != (void*)s) distinct++;
      seen[h] = (void*)s;
    }
    void* p[3];
    for (int k = 0; k < 3; k++) {
      seed ^= seed << 13;
      seed ^= seed >> 7;
      seed ^= seed << 17;
      size_t size = (1 + seed % 32) * 64 * 1024;
      p[k] = cuda_arena_alloc_on_stream(a, size, (void*)s);
      if (!p[k]) {
        fprintf(stderr, "request %ld: allocation of %zu failed (code %d)\n", i, size,
                cuda_arena_last_error_code());
        return 1;
      }
      if (k == 0) spin<<<1, 1, 0, s>>>(cycles);
      CHECK(cudaMemsetAsync(p[k], 0, size, s));
    }
    for (int k = 0; k < 3; k++) {
      if (cuda_arena_free(a, p[k]) != 0) {
        fprintf(stderr, "request %ld: free failed (code %d)\n", i, cuda_arena_last_error_code());
        return 1;
      }
    }
    if (i + 1 == next_report || i + 1 == requests) {
      size_t f, t;
      CHECK(cudaMemGetInfo(&f, &t));
      if (free0 - f > driver_peak) driver_peak = free0 - f;
      cuda_arena_stats st;
      cuda_arena_get_stats(a, &st);
      printf("requests %ld new handles %ld held %.1f MiB max_in_use %.1f MiB driver %.1f MiB "
             "(peak %.1f) %.2f s\n",
             i + 1, distinct, st.total_allocated / 1048576.0, st.max_in_use / 1048576.0,
             (free0 - f) / 1048576.0, driver_peak / 1048576.0, now_s() - t0);
      fflush(stdout);
      next_report = next_report < 10000 ? next_report * 10 : next_report + 20000;
    }
  }
  for (int k = 0; k < w; k++)
    if (ring[k]) {
      CHECK(cudaStreamSynchronize(ring[k]));
      CHECK(cudaStreamDestroy(ring[k]));
    }
  for (long k = 0; k < retire; k++)
    if (retired[k]) CHECK(cudaStreamDestroy(retired[k]));
  cuda_arena_destroy(a);
  return 0;
}
