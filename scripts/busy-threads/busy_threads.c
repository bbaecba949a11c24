/* Busy threads: T threads at once, each on a stream token of its own, allocate N buffers of
 * random sizes (4 KiB to 1 MiB) every round; then each frees another thread's buffers (or its
 * own with OWN_FREES=1). Prints the most bytes the arena held (sampled once a round, at the
 * live peak of the round) over the live peak. Run by scripts/busy-threads/run.sh:
 *   busy_threads BACKEND stream|nostream [arena.key=value ...]
 * Addresses are never touched, so it runs on "virtual". */
#include "cuda_arena.h"
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#ifndef T
#define T 8
#endif
#define N 64
#ifndef ROUNDS
#define ROUNDS 200
#endif
static cuda_arena_allocator* a; static int use_stream = 1;
static void* bufs[T][N];
static pthread_barrier_t bar;
static atomic_ullong live, peak; static unsigned long long hpeak;
static void note(long long d){ unsigned long long l = atomic_fetch_add(&live, d) + d; unsigned long long p = atomic_load(&peak); while (l > p && !atomic_compare_exchange_weak(&peak, &p, l)); }
static void* run(void* arg) {
  int me = (int)(intptr_t)arg; unsigned s = 1234 + me;
  for (int round = 0; round < ROUNDS; round++) {
    for (int i = 0; i < N; i++) { size_t sz = 4096 + (rand_r(&s) % 1024) * 1024; bufs[me][i] = use_stream ? cuda_arena_alloc_on_stream(a, sz, (void*)(uintptr_t)(0x1000 + 16 * me)) : cuda_arena_alloc(a, sz); if (!bufs[me][i]) { printf("fail\n"); exit(1);} note(sz); }
    pthread_barrier_wait(&bar);
    if (me == 0) { cuda_arena_stats st; cuda_arena_get_stats(a, &st); if (st.total_allocated > hpeak) hpeak = st.total_allocated; }
    pthread_barrier_wait(&bar);
    int victim = getenv("OWN_FREES") ? me : (me + 1 + round) % T;  /* free another thread's buffers */
    for (int i = 0; i < N; i++) { cuda_arena_free(a, bufs[victim][i]); }
    pthread_barrier_wait(&bar);
    if (me == 0) atomic_store(&live, 0);
    pthread_barrier_wait(&bar);
  }
  return NULL;
}
int main(int argc, char** argv) {
  char err[256];
  use_stream = argc < 3 || strcmp(argv[2], "nostream") != 0;
  const char* keys[8]; const char* values[8]; char kv[8][128]; int n = 0;
  for (int i = 3; i < argc && n < 8; i++, n++) { snprintf(kv[n], sizeof kv[n], "%s", argv[i]); char* eq = strchr(kv[n], '='); *eq = 0; keys[n] = kv[n]; values[n] = eq + 1; }
  a = cuda_arena_create(argv[1], "Cuda", 0, keys, values, n, err, sizeof err);
  if (!a) { printf("create: %s\n", err); return 1; }
  pthread_barrier_init(&bar, NULL, T);
  pthread_t th[T]; for (int i = 0; i < T; i++) pthread_create(&th[i], NULL, run, (void*)(intptr_t)i);
  for (int i = 0; i < T; i++) pthread_join(th[i], NULL);
  cuda_arena_stats s; cuda_arena_get_stats(a, &s);
  printf("held peak %.1f MiB ", hpeak/1048576.0); printf("peak live %.1f MiB  max_in_use %.1f MiB  held %.1f MiB  held/max_in_use %.3f shrinks %llu ext %llu\n", peak / 1048576.0, s.max_in_use / 1048576.0, s.total_allocated / 1048576.0, (double)s.total_allocated / s.max_in_use, (unsigned long long)s.num_arena_shrinkages, (unsigned long long)s.num_arena_extensions);
  cuda_arena_destroy(a);
}
