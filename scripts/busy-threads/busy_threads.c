/* Busy threads: T threads at once, each on a stream token of its own, allocate N buffers of
 * random sizes (4 KiB to 1 MiB) every round; then each frees another thread's buffers (or its
 * own with OWN_FREES=1). Prints the most bytes the arena held (sampled once a round, when every
 * thread has allocated: the round's live peak) over the live peak. Run by
 * scripts/busy-threads/run.sh:
 *   busy_threads BACKEND stream|nostream [arena.key=value ...]
 * Addresses are never touched, so it runs on "virtual". */
#define _POSIX_C_SOURCE 200809L
#include "cuda_arena.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef T
#define T 8
#endif
#ifndef ROUNDS
#define ROUNDS 200
#endif
#define N 64
#define MAX_KEYS 8

static cuda_arena_allocator* arena;
static int use_stream = 1;
static int own_frees = 0;
static void* bufs[T][N];
static pthread_barrier_t barrier;
static atomic_ullong live, live_peak;
static uint64_t held_peak; /* written by thread 0 alone, between barriers */

static void add_live(uint64_t bytes) {
  unsigned long long now = atomic_fetch_add(&live, bytes) + bytes;
  unsigned long long seen = atomic_load(&live_peak);
  while (now > seen && !atomic_compare_exchange_weak(&live_peak, &seen, now)) {
  }
}

static void* run(void* arg) {
  int me = (int)(intptr_t)arg;
  unsigned seed = 1234u + (unsigned)me;
  void* token = (void*)(uintptr_t)(0x1000 + 16 * me);
  for (int round = 0; round < ROUNDS; round++) {
    for (int i = 0; i < N; i++) {
      size_t size = 4096 + (size_t)(rand_r(&seed) % 1024) * 1024;
      bufs[me][i] = use_stream ? cuda_arena_alloc_on_stream(arena, size, token) : cuda_arena_alloc(arena, size);
      if (bufs[me][i] == NULL) {
        fprintf(stderr, "allocation of %zu bytes failed\n", size);
        exit(1);
      }
      add_live(size);
    }
    pthread_barrier_wait(&barrier);
    if (me == 0) {
      cuda_arena_stats s;
      if (cuda_arena_get_stats(arena, &s) == CUDA_ARENA_OK && s.total_allocated > held_peak) held_peak = s.total_allocated;
    }
    pthread_barrier_wait(&barrier);
    int victim = own_frees ? me : (me + 1 + round) % T;
    for (int i = 0; i < N; i++) cuda_arena_free(arena, bufs[victim][i]);
    pthread_barrier_wait(&barrier);
    if (me == 0) atomic_store(&live, 0);
    pthread_barrier_wait(&barrier);
  }
  return NULL;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: busy_threads BACKEND stream|nostream [arena.key=value ...]\n");
    return 2;
  }
  use_stream = strcmp(argv[2], "nostream") != 0;
  own_frees = getenv("OWN_FREES") != NULL;
  const char* keys[MAX_KEYS];
  const char* values[MAX_KEYS];
  char pairs[MAX_KEYS][128];
  size_t n = 0;
  for (int i = 3; i < argc && n < MAX_KEYS; i++, n++) {
    snprintf(pairs[n], sizeof pairs[n], "%s", argv[i]);
    char* eq = strchr(pairs[n], '=');
    if (eq == NULL) {
      fprintf(stderr, "%s: expected key=value\n", argv[i]);
      return 2;
    }
    *eq = 0;
    keys[n] = pairs[n];
    values[n] = eq + 1;
  }
  char err[512];
  arena = cuda_arena_create(argv[1], "Cuda", 0, keys, values, n, err, sizeof err);
  if (arena == NULL) {
    fprintf(stderr, "create: %s\n", err);
    return 1;
  }
  pthread_barrier_init(&barrier, NULL, T);
  pthread_t threads[T];
  for (int i = 0; i < T; i++) pthread_create(&threads[i], NULL, run, (void*)(intptr_t)i);
  for (int i = 0; i < T; i++) pthread_join(threads[i], NULL);
  cuda_arena_stats s;
  cuda_arena_get_stats(arena, &s);
  printf("held peak %.1f MiB, live peak %.1f MiB, held peak / live peak %.3f, extensions %llu, shrinkages %llu\n",
         held_peak / 1048576.0, atomic_load(&live_peak) / 1048576.0,
         (double)held_peak / (double)atomic_load(&live_peak), (unsigned long long)s.num_arena_extensions,
         (unsigned long long)s.num_arena_shrinkages);
  cuda_arena_destroy(arena);
  return 0;
}
