/* The C ABI's contract at its edges, one case per run: `contract BACKEND CASE`.
 * Built and run by tests/c_program.rs (under valgrind there, so a leak, an invalid read or
 * a write to memory the program does not own fails the test). Never touches the memory it
 * allocates, so it runs on "virtual" too. Issue 11, items 7, 14 and 15. */
#define _DEFAULT_SOURCE
#include "cuda_arena.h"
#include <dlfcn.h>
#include <pthread.h>
#include <sys/wait.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures = 0;
#define CHECK(cond)                                                                            \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      char msg_[512];                                                                          \
      cuda_arena_last_error(msg_, sizeof msg_);                                                \
      fprintf(stderr, "FAILED %s:%d: %s (last error %d: %s)\n", __FILE__, __LINE__, #cond,   \
              cuda_arena_last_error_code(), msg_);                                             \
      failures++;                                                                              \
    }                                                                                          \
  } while (0)

static const char* backend;

static cuda_arena_allocator* make(const char* memory, const char* key, const char* value) {
  char err[512] = "not written";
  const char* keys[] = {key};
  const char* values[] = {value};
  cuda_arena_allocator* a = cuda_arena_create(backend, memory, 0, keys, values, key ? 1 : 0, err, sizeof err);
  if (a == NULL) fprintf(stderr, "create failed: %s\n", err);
  return a;
}

/* A stream token: any non-NULL value names a stream on host and virtual. */
static void* token(uintptr_t i) { return (void*)(0x1000 + i * 16); }

static uint64_t total_allocated(cuda_arena_allocator* a) {
  cuda_arena_stats s;
  memset(&s, 0xff, sizeof s);
  CHECK(cuda_arena_get_stats(a, &s) == CUDA_ARENA_OK);
  return s.total_allocated;
}

/* Item 14: a second create with other options joins the shared arena, which keeps its own
 * options, and says so in err and through cuda_arena_last_warning. */
static void second_create_with_other_options_warns(void) {
  cuda_arena_allocator* first = make("Cuda", NULL, NULL);
  CHECK(first != NULL);
  char warning[512];
  CHECK(cuda_arena_last_warning(warning, sizeof warning) == 0 && warning[0] == '\0');

  const char* keys[] = {"arena.max_mem"};
  const char* values[] = {"4096"};
  char err[512] = "not written";
  cuda_arena_allocator* second = cuda_arena_create(backend, "Cuda", 0, keys, values, 1, err, sizeof err);
  CHECK(second != NULL);
  CHECK(cuda_arena_last_error_code() == CUDA_ARENA_OK);
  CHECK(strstr(err, "arena.max_mem") != NULL);
  size_t len = cuda_arena_last_warning(warning, sizeof warning);
  CHECK(len == strlen(err) && strcmp(warning, err) == 0);
  /* The arena kept its options: unlimited, so 1 MiB fits where max_mem=4096 would not. */
  cuda_arena_stats s;
  CHECK(cuda_arena_get_stats(second, &s) == CUDA_ARENA_OK && s.limit == -1);
  void* p = cuda_arena_alloc(second, 1 << 20);
  CHECK(p != NULL);
  CHECK(cuda_arena_free(first, p) == CUDA_ARENA_OK);

  /* Same options: no warning, and err is an empty string. */
  char err2[64] = "not written";
  cuda_arena_allocator* third = cuda_arena_create(backend, "Cuda", 0, NULL, NULL, 0, err2, sizeof err2);
  CHECK(third != NULL && err2[0] == '\0');
  CHECK(cuda_arena_last_warning(NULL, 0) == 0);

  /* A truncated warning is still NUL-terminated; the full length is returned. */
  char small[8];
  cuda_arena_allocator* fourth = make("Cuda", "arena.max_mem", "4096");
  CHECK(fourth != NULL);
  CHECK(cuda_arena_last_warning(small, sizeof small) == len && strlen(small) == sizeof small - 1);
  cuda_arena_destroy(first);
  cuda_arena_destroy(second);
  cuda_arena_destroy(third);
  cuda_arena_destroy(fourth);
  /* The last user is gone: the next create makes a new arena with its own options. */
  cuda_arena_allocator* again = make("Cuda", "arena.max_mem", "4096");
  CHECK(again != NULL);
  CHECK(cuda_arena_last_warning(NULL, 0) == 0);
  CHECK(cuda_arena_get_stats(again, &s) == CUDA_ARENA_OK && s.limit == 4096);
  cuda_arena_destroy(again);
}

/* Item 7: a chunk freed on a stream waits for that stream until the host resets it. */
static void reset_stream_frees_a_streams_chunks_for_every_stream(void) {
  /* ORT's rule, kept bit for bit by the region arena (the default mode may also hand the chunk
   * over after waiting for the device). */
  cuda_arena_allocator* a = make("Cuda", "arena.use_virtual_memory", "0");
  cuda_arena_allocator* b = make("Cuda", NULL, NULL); /* another user of the same arena */
  CHECK(a != NULL && b != NULL);
  void* p = cuda_arena_alloc_on_stream(a, 4096, token(1));
  CHECK(p != NULL);
  CHECK(cuda_arena_free(a, p) == CUDA_ARENA_OK);
  CHECK(cuda_arena_alloc_on_stream(a, 4096, token(1)) == p); /* its own stream: at once */
  CHECK(cuda_arena_free(a, p) == CUDA_ARENA_OK);
  void* q = cuda_arena_alloc_on_stream(a, 4096, token(2));
  CHECK(q != NULL && q != p); /* another stream: not before the reset */
  CHECK(cuda_arena_free(a, q) == CUDA_ARENA_OK);
  CHECK(cuda_arena_reset_stream(b, token(1)) == CUDA_ARENA_OK); /* any user may reset */
  CHECK(cuda_arena_reset_stream(b, token(2)) == CUDA_ARENA_OK);
  void* r = cuda_arena_alloc_on_stream(a, 4096, token(3));
  CHECK(r == p || r == q);
  CHECK(cuda_arena_free(a, r) == CUDA_ARENA_OK);
  /* Unknown and NULL tokens: nothing to do. */
  CHECK(cuda_arena_reset_stream(a, token(99)) == CUDA_ARENA_OK);
  CHECK(cuda_arena_reset_stream(a, NULL) == CUDA_ARENA_OK);
  /* A chunk still in use when its stream is reset loses the tag when freed. */
  void* live = cuda_arena_alloc_on_stream(a, 4096, token(4));
  CHECK(live != NULL);
  CHECK(cuda_arena_reset_stream(a, token(4)) == CUDA_ARENA_OK);
  CHECK(cuda_arena_free(a, live) == CUDA_ARENA_OK);
  void* other = cuda_arena_alloc_on_stream(a, 4096, token(5));
  CHECK(other == live);
  CHECK(cuda_arena_free(a, other) == CUDA_ARENA_OK);
  CHECK(cuda_arena_reset_stream(a, token(3)) == CUDA_ARENA_OK);
  CHECK(cuda_arena_reset_stream(a, token(5)) == CUDA_ARENA_OK);
  cuda_arena_destroy(b);
  cuda_arena_destroy(a);
}

/* Item 7: at most CUDA_ARENA_MAX_STREAMS tokens are remembered; past that a new one is a
 * coded error that says what to do, and resets make room. With resets, any number of
 * distinct tokens over time leaves the allocator as small as one. */
static void stream_tokens_are_bounded_and_resets_make_room(void) {
  cuda_arena_allocator* a = make("Cuda", NULL, NULL);
  CHECK(a != NULL);
  for (uintptr_t i = 0; i < CUDA_ARENA_MAX_STREAMS - 1; i++) {
    void* p = cuda_arena_alloc_on_stream(a, 256, token(i));
    CHECK(p != NULL);
    CHECK(cuda_arena_free(a, p) == CUDA_ARENA_OK);
  }
  /* A failed call with a new token leaves it unremembered. */
  CHECK(cuda_arena_alloc_on_stream(a, SIZE_MAX, token(100000)) == NULL);
  CHECK(cuda_arena_last_error_code() == CUDA_ARENA_ERR_OUT_OF_MEMORY);
  void* last = cuda_arena_alloc_on_stream(a, 256, token(CUDA_ARENA_MAX_STREAMS - 1));
  CHECK(last != NULL);
  CHECK(cuda_arena_alloc_on_stream(a, 256, token(100001)) == NULL);
  CHECK(cuda_arena_last_error_code() == CUDA_ARENA_ERR_INVALID_ARGUMENT);
  char msg[512];
  cuda_arena_last_error(msg, sizeof msg);
  CHECK(strstr(msg, "cuda_arena_reset_stream") != NULL);
  /* A known token still works; a reset makes room for one more. */
  void* known = cuda_arena_alloc_on_stream(a, 256, token(0));
  CHECK(known != NULL);
  CHECK(cuda_arena_free(a, known) == CUDA_ARENA_OK);
  CHECK(cuda_arena_reset_stream(a, token(0)) == CUDA_ARENA_OK);
  void* fresh = cuda_arena_alloc_on_stream(a, 256, token(100001));
  CHECK(fresh != NULL);
  CHECK(cuda_arena_free(a, fresh) == CUDA_ARENA_OK);
  CHECK(cuda_arena_free(a, last) == CUDA_ARENA_OK);
  CHECK(cuda_arena_reset_stream(a, token(100001)) == CUDA_ARENA_OK);
  for (uintptr_t i = 0; i < CUDA_ARENA_MAX_STREAMS; i++) CHECK(cuda_arena_reset_stream(a, token(i)) == CUDA_ARENA_OK);

  /* Many more distinct tokens than the bound, each reset when done. */
  uint64_t one = 0;
  for (uintptr_t i = 0; i < 5 * CUDA_ARENA_MAX_STREAMS; i++) {
    void* p = cuda_arena_alloc_on_stream(a, 4096, token(200000 + i));
    CHECK(p != NULL);
    CHECK(cuda_arena_free(a, p) == CUDA_ARENA_OK);
    CHECK(cuda_arena_reset_stream(a, token(200000 + i)) == CUDA_ARENA_OK);
    if (i == 0) one = total_allocated(a);
  }
  CHECK(total_allocated(a) == one);
  /* Nothing of them is remembered: the whole bound is free for new tokens. */
  for (uintptr_t i = 0; i < CUDA_ARENA_MAX_STREAMS; i++) CHECK(cuda_arena_alloc_on_stream(a, 256, token(300000 + i)) != NULL);
  CHECK(cuda_arena_alloc_on_stream(a, 256, token(400000)) == NULL);
  CHECK(cuda_arena_last_error_code() == CUDA_ARENA_ERR_INVALID_ARGUMENT);
  cuda_arena_destroy(a); /* the last user: every chunk and every token goes */

  /* Allocators without streams refuse a token, and do not count it. */
  cuda_arena_allocator* cpu = make("Cpu", NULL, NULL);
  CHECK(cpu != NULL);
  CHECK(cuda_arena_alloc_on_stream(cpu, 256, token(1)) == NULL);
  CHECK(cuda_arena_last_error_code() == CUDA_ARENA_ERR_INVALID_ARGUMENT);
  void* plain = cuda_arena_alloc_on_stream(cpu, 256, NULL); /* NULL: a plain allocation */
  CHECK(plain != NULL);
  CHECK(cuda_arena_free(cpu, plain) == CUDA_ARENA_OK);
  cuda_arena_destroy(cpu);
}

/* Item 14: a destroyed handle is dead: every call with it is CUDA_ARENA_ERR_RELEASED, a
 * second destroy included, and other users of the arena are unaffected. */
static void a_destroyed_handle_is_released_not_a_crash(void) {
  cuda_arena_allocator* a = make("Cuda", NULL, NULL);
  cuda_arena_allocator* b = make("Cuda", NULL, NULL);
  CHECK(a != NULL && b != NULL && a != b);
  void* p = cuda_arena_alloc(a, 1000);
  CHECK(p != NULL);
  cuda_arena_destroy(a);
  CHECK(cuda_arena_last_error_code() == CUDA_ARENA_OK);
  cuda_arena_destroy(a);
  CHECK(cuda_arena_last_error_code() == CUDA_ARENA_ERR_RELEASED);
  CHECK(cuda_arena_alloc(a, 16) == NULL && cuda_arena_last_error_code() == CUDA_ARENA_ERR_RELEASED);
  CHECK(cuda_arena_alloc_on_stream(a, 16, token(1)) == NULL && cuda_arena_last_error_code() == CUDA_ARENA_ERR_RELEASED);
  CHECK(cuda_arena_reserve(a, 16) == NULL && cuda_arena_last_error_code() == CUDA_ARENA_ERR_RELEASED);
  CHECK(cuda_arena_free(a, p) == CUDA_ARENA_ERR_RELEASED);
  CHECK(cuda_arena_shrink(a) == CUDA_ARENA_ERR_RELEASED);
  CHECK(cuda_arena_reset_stream(a, token(1)) == CUDA_ARENA_ERR_RELEASED);
  cuda_arena_stats s;
  CHECK(cuda_arena_get_stats(a, &s) == CUDA_ARENA_ERR_RELEASED);
  cuda_arena_device_stats d;
  CHECK(cuda_arena_get_device_stats(a, &d) == CUDA_ARENA_ERR_RELEASED);
  /* The other user still has the arena, and p in it. */
  CHECK(cuda_arena_get_stats(b, &s) == CUDA_ARENA_OK && s.requested_in_use == 1000);
  CHECK(cuda_arena_free(b, p) == CUDA_ARENA_OK);
  /* New handles never take a dead one's value, so the dead one stays dead. */
  for (int i = 0; i < 100; i++) {
    cuda_arena_allocator* c = make("Cuda", NULL, NULL);
    CHECK(c != NULL && c != a);
    cuda_arena_destroy(c);
    CHECK(cuda_arena_alloc(a, 16) == NULL && cuda_arena_last_error_code() == CUDA_ARENA_ERR_RELEASED);
  }
  cuda_arena_destroy(b);
  cuda_arena_destroy(b);
  CHECK(cuda_arena_last_error_code() == CUDA_ARENA_ERR_RELEASED);
}

/* Items 14 and 15: NULL anywhere is CUDA_ARENA_ERR_INVALID_ARGUMENT (or a documented no-op),
 * never a crash or a write through it. */
static void null_arguments_are_coded_errors(void) {
  char err[256];
  const char* keys[] = {"arena.max_mem", NULL};
  const char* values[] = {"4096", NULL};
  CHECK(cuda_arena_create(NULL, "Cuda", 0, NULL, NULL, 0, err, sizeof err) == NULL);
  CHECK(cuda_arena_last_error_code() == CUDA_ARENA_ERR_INVALID_ARGUMENT && strstr(err, "backend") != NULL);
  CHECK(cuda_arena_create(backend, NULL, 0, NULL, NULL, 0, err, sizeof err) == NULL);
  CHECK(cuda_arena_last_error_code() == CUDA_ARENA_ERR_INVALID_ARGUMENT && strstr(err, "memory") != NULL);
  CHECK(cuda_arena_create(backend, "Cuda", 0, NULL, values, 1, err, sizeof err) == NULL);
  CHECK(cuda_arena_last_error_code() == CUDA_ARENA_ERR_INVALID_ARGUMENT);
  CHECK(cuda_arena_create(backend, "Cuda", 0, keys, NULL, 1, err, sizeof err) == NULL);
  CHECK(cuda_arena_last_error_code() == CUDA_ARENA_ERR_INVALID_ARGUMENT);
  CHECK(cuda_arena_create(backend, "Cuda", 0, keys, values, 2, err, sizeof err) == NULL);
  CHECK(cuda_arena_last_error_code() == CUDA_ARENA_ERR_INVALID_ARGUMENT);
  CHECK(cuda_arena_create(backend, "Cuda", -1, NULL, NULL, 0, NULL, 100) == NULL);
  CHECK(cuda_arena_last_error_code() == CUDA_ARENA_ERR_INVALID_ARGUMENT);
  char untouched[4] = "abc";
  CHECK(cuda_arena_create(backend, "Cuda", -1, NULL, NULL, 0, untouched, 0) == NULL);
  CHECK(strcmp(untouched, "abc") == 0);
  char one[1] = {'x'};
  CHECK(cuda_arena_create(backend, "Cuda", -1, NULL, NULL, 0, one, sizeof one) == NULL && one[0] == '\0');

  void* t = token(1);
  cuda_arena_stats s;
  CHECK(cuda_arena_alloc(NULL, 16) == NULL && cuda_arena_last_error_code() == CUDA_ARENA_ERR_INVALID_ARGUMENT);
  CHECK(cuda_arena_alloc_on_stream(NULL, 16, t) == NULL && cuda_arena_last_error_code() == CUDA_ARENA_ERR_INVALID_ARGUMENT);
  CHECK(cuda_arena_reserve(NULL, 16) == NULL && cuda_arena_last_error_code() == CUDA_ARENA_ERR_INVALID_ARGUMENT);
  CHECK(cuda_arena_free(NULL, t) == CUDA_ARENA_ERR_INVALID_ARGUMENT);
  CHECK(cuda_arena_shrink(NULL) == CUDA_ARENA_ERR_INVALID_ARGUMENT);
  CHECK(cuda_arena_get_stats(NULL, &s) == CUDA_ARENA_ERR_INVALID_ARGUMENT);
  cuda_arena_device_stats ds;
  CHECK(cuda_arena_get_device_stats(NULL, &ds) == CUDA_ARENA_ERR_INVALID_ARGUMENT);
  CHECK(cuda_arena_reset_stream(NULL, t) == CUDA_ARENA_ERR_INVALID_ARGUMENT);
  cuda_arena_destroy(NULL);
  CHECK(cuda_arena_last_error(NULL, 0) > 0);
  CHECK(cuda_arena_last_warning(NULL, 0) == 0);

  cuda_arena_allocator* a = make("Cuda", NULL, NULL);
  CHECK(a != NULL);
  CHECK(cuda_arena_get_stats(a, NULL) == CUDA_ARENA_ERR_INVALID_ARGUMENT);
  CHECK(cuda_arena_get_device_stats(a, NULL) == CUDA_ARENA_ERR_INVALID_ARGUMENT);
  CHECK(cuda_arena_free(a, NULL) == CUDA_ARENA_OK);
  cuda_arena_destroy(a);
}

/* Issue 25: the device's driver counters, as deviceStats gives them: pages mapped and
 * unmapped, bytes outstanding (what the arena holds), and the waits for the device (an unmap of
 * pages used on no stream waits once). */
static void device_stats_count_mappings_and_waits(void) {
  cuda_arena_allocator* a = make("Cuda", NULL, NULL);
  CHECK(a != NULL);
  cuda_arena_device_stats before;
  memset(&before, 0xff, sizeof before);
  CHECK(cuda_arena_get_device_stats(a, &before) == CUDA_ARENA_OK);
  void* p = cuda_arena_alloc(a, 8 << 20);
  CHECK(p != NULL);
  cuda_arena_device_stats d;
  CHECK(cuda_arena_get_device_stats(a, &d) == CUDA_ARENA_OK);
  CHECK(d.raw_allocs > before.raw_allocs && d.raw_bytes_outstanding == total_allocated(a));
  CHECK(d.device_waits == before.device_waits);
  CHECK(cuda_arena_free(a, p) == CUDA_ARENA_OK);
  CHECK(cuda_arena_shrink(a) == CUDA_ARENA_OK);
  CHECK(cuda_arena_get_device_stats(a, &d) == CUDA_ARENA_OK);
  CHECK(d.raw_frees > before.raw_frees && d.raw_bytes_outstanding == 0);
  CHECK(d.device_waits == before.device_waits + 1 && d.stream_waits == before.stream_waits);
  cuda_arena_destroy(a);
}

/* Size 0 is NULL and no error; sizes that cannot be met fail before anything changes. */
static void size_zero_and_size_max(void) {
  cuda_arena_allocator* a = make("Cuda", NULL, NULL);
  CHECK(a != NULL);
  CHECK(cuda_arena_alloc(a, 0) == NULL && cuda_arena_last_error_code() == CUDA_ARENA_OK);
  CHECK(cuda_arena_reserve(a, 0) == NULL && cuda_arena_last_error_code() == CUDA_ARENA_OK);
  CHECK(cuda_arena_alloc_on_stream(a, 0, token(1)) == NULL && cuda_arena_last_error_code() == CUDA_ARENA_OK);
  CHECK(cuda_arena_alloc(a, SIZE_MAX) == NULL && cuda_arena_last_error_code() == CUDA_ARENA_ERR_OUT_OF_MEMORY);
  CHECK(cuda_arena_reserve(a, SIZE_MAX) == NULL && cuda_arena_last_error_code() == CUDA_ARENA_ERR_OUT_OF_MEMORY);
  CHECK(cuda_arena_alloc_on_stream(a, SIZE_MAX, token(1)) == NULL && cuda_arena_last_error_code() == CUDA_ARENA_ERR_OUT_OF_MEMORY);
  CHECK(cuda_arena_alloc(a, SIZE_MAX / 2) == NULL && cuda_arena_last_error_code() == CUDA_ARENA_ERR_OUT_OF_MEMORY);
  cuda_arena_stats s;
  CHECK(cuda_arena_get_stats(a, &s) == CUDA_ARENA_OK);
  CHECK(s.in_use == 0 && s.num_allocs == 0 && s.num_reserves == 0 && s.total_allocated == 0);
  cuda_arena_destroy(a);
}

/* Issue 25, with CUDA_ARENA_SIM_STREAM_EVENTS set (the cuda backend's path: a host stream's
 * frees come free for other streams once an event recorded behind them has completed).
 * Past the headroom, a stream alone gets its own free pages back rather than mapping new ones
 * beside them, whether its work is done at once or only once waited for: ten 2 MiB pages on
 * one token, the middle five freed (one free run of 10 MiB), then 12 MiB that fit nowhere.
 * Mapped beside the free run they would hold 32 MiB for a peak of 22. */
static void own_frees_on_a_host_stream_are_unmapped_past_the_headroom(void) {
  const size_t page = 2u << 20;
  cuda_arena_allocator* a = make("Cuda", NULL, NULL);
  CHECK(a != NULL);
  void* pages[10];
  for (int i = 0; i < 10; i++) {
    pages[i] = cuda_arena_alloc_on_stream(a, page, token(1));
    CHECK(pages[i] != NULL);
  }
  for (int i = 4; i < 9; i++) CHECK(cuda_arena_free(a, pages[i]) == CUDA_ARENA_OK);
  void* big = cuda_arena_alloc_on_stream(a, 6 * page, token(1));
  CHECK(big != NULL);
  cuda_arena_stats s;
  CHECK(cuda_arena_get_stats(a, &s) == CUDA_ARENA_OK);
  CHECK(s.max_in_use == 11 * page);
  CHECK(s.total_allocated <= s.max_in_use + s.max_in_use / 50 + page);
  CHECK(s.num_arena_shrinkages > 0);
  /* Its own stream's work was waited for (while still running), never the whole device's. */
  cuda_arena_device_stats d;
  CHECK(cuda_arena_get_device_stats(a, &d) == CUDA_ARENA_OK);
  CHECK(d.device_waits == 0);
  const char* events = getenv("CUDA_ARENA_SIM_STREAM_EVENTS");
  if (events != NULL && strcmp(events, "pending") == 0) {
    CHECK(d.stream_waits > 0);
  } else {
    CHECK(d.stream_waits == 0);
  }
  CHECK(cuda_arena_free(a, big) == CUDA_ARENA_OK);
  for (int i = 0; i < 10; i++) {
    if (i < 4 || i == 9) CHECK(cuda_arena_free(a, pages[i]) == CUDA_ARENA_OK);
  }
  CHECK(cuda_arena_reset_stream(a, token(1)) == CUDA_ARENA_OK);
  cuda_arena_destroy(a);
}

/* Issue 25, with CUDA_ARENA_SIM_STREAM_EVENTS set: two tokens taking turns on one buffer,
 * never reset, settle after their first turns: nothing more is mapped or unmapped, whether a
 * token's frees come free for the other at once (one page serves both) or never (a page
 * each). */
static void two_streams_taking_turns_settle_without_a_reset(void) {
  cuda_arena_allocator* a = make("Cuda", NULL, NULL);
  CHECK(a != NULL);
  cuda_arena_stats before, after;
  for (uintptr_t turn = 0; turn < 110; turn++) {
    if (turn == 10) CHECK(cuda_arena_get_stats(a, &before) == CUDA_ARENA_OK);
    void* p = cuda_arena_alloc_on_stream(a, 1u << 20, token(1 + turn % 2));
    CHECK(p != NULL);
    CHECK(cuda_arena_free(a, p) == CUDA_ARENA_OK);
  }
  CHECK(cuda_arena_get_stats(a, &after) == CUDA_ARENA_OK);
  CHECK(after.total_allocated == before.total_allocated);
  CHECK(after.total_allocated <= (4u << 20));
  CHECK(after.num_arena_extensions == before.num_arena_extensions);
  CHECK(after.num_arena_shrinkages == before.num_arena_shrinkages);
  CHECK(cuda_arena_reset_stream(a, token(1)) == CUDA_ARENA_OK);
  CHECK(cuda_arena_reset_stream(a, token(2)) == CUDA_ARENA_OK);
  cuda_arena_destroy(a);
}

/* Run with CUDA_ARENA_SIM_STREAM_EVENTS set to a value that is not a mode: the create fails
 * with a coded error naming the variable, and a later create (the variable unchanged) fails
 * the same way: nothing half-made is left behind. */
static void an_unknown_simulated_events_mode_fails_the_create(void) {
  for (int i = 0; i < 2; i++) {
    char err[512] = "not written";
    cuda_arena_allocator* a = cuda_arena_create(backend, "Cuda", 0, NULL, NULL, 0, err, sizeof err);
    CHECK(a == NULL);
    CHECK(cuda_arena_last_error_code() == CUDA_ARENA_ERR_INVALID_ARGUMENT);
    CHECK(strstr(err, "CUDA_ARENA_SIM_STREAM_EVENTS") != NULL);
  }
}

/* A free from a thread-local destructor that runs after the library's own (a pthread_key's;
 * glibc runs them after the C++-style ones the library registers) frees: nothing leaks, and
 * an allocation there works too. */
static cuda_arena_allocator* in_destructor;
static int destructor_free = -1, destructor_alloc_freed = -1;
static void free_at_thread_exit(void* p) {
  destructor_free = cuda_arena_free(in_destructor, p);
  void* q = cuda_arena_alloc(in_destructor, 64);
  destructor_alloc_freed = q != NULL ? cuda_arena_free(in_destructor, q) : -2;
}
static pthread_key_t exit_key;
static void* allocate_and_leave(void* unused) {
  (void)unused;
  void* p = cuda_arena_alloc(in_destructor, 1000);
  CHECK(p != NULL);
  pthread_setspecific(exit_key, p);
  return NULL;
}
static void a_free_from_a_thread_exit_destructor_frees(void) {
  in_destructor = make("Cuda", NULL, NULL);
  CHECK(in_destructor != NULL);
  CHECK(pthread_key_create(&exit_key, free_at_thread_exit) == 0);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, allocate_and_leave, NULL) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  CHECK(destructor_free == CUDA_ARENA_OK);
  CHECK(destructor_alloc_freed == CUDA_ARENA_OK);
  cuda_arena_stats s;
  CHECK(cuda_arena_get_stats(in_destructor, &s) == CUDA_ARENA_OK);
  CHECK(s.in_use == 0 && s.num_allocs == 2);
  pthread_key_delete(exit_key);
  cuda_arena_destroy(in_destructor);
}

/* A thread cancelled (pthread_cancel) while the library reads a file is cancelled outside the
 * library, or not at all: glibc aborted the process when the unwind met the library's guard. */
static void* replay_until_cancelled(void* path) {
  char* report = cuda_arena_replay_file((const char*)path, "virtual", NULL, NULL, 0);
  cuda_arena_string_free(report);
  return NULL;
}
static void a_thread_cancelled_during_a_replay_is_cancelled_outside_the_library(void) {
  char path[] = "/tmp/cuda-arena-cancel-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  FILE* f = fdopen(fd, "w");
  CHECK(f != NULL);
  for (int i = 1; i <= 40000; i++) fprintf(f, "{\"op\":\"alloc\",\"id\":%d,\"size\":%d,\"stream\":0}\n{\"op\":\"free\",\"id\":%d}\n", i, 256 * (i % 97 + 1), i);
  fclose(f);
  for (int delay_us = 0; delay_us <= 4000; delay_us += 1000) {
    pthread_t t;
    CHECK(pthread_create(&t, NULL, replay_until_cancelled, path) == 0);
    if (delay_us > 0) usleep(delay_us);
    CHECK(pthread_cancel(t) == 0);
    void* result = (void*)1;
    CHECK(pthread_join(t, &result) == 0);
    CHECK(result == NULL || result == PTHREAD_CANCELED);
  }
  unlink(path);
}

/* A second copy of the library in the process (CUDA_ARENA_LIB_COPY, loaded RTLD_LOCAL, as two
 * packages each shipping it would be) hands out other values, and refuses this copy's. */
static void a_handle_of_another_copy_of_the_library_is_no_handle(void) {
  const char* path = getenv("CUDA_ARENA_LIB_COPY");
  CHECK(path != NULL);
  if (path == NULL) return;
  void* copy = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  CHECK(copy != NULL);
  if (copy == NULL) return;
  typedef cuda_arena_allocator* (*create_fn)(const char*, const char*, int, const char* const*,
                                             const char* const*, size_t, char*, size_t);
  typedef void* (*alloc_fn)(cuda_arena_allocator*, size_t);
  typedef void (*destroy_fn)(cuda_arena_allocator*);
  create_fn other_create = (create_fn)dlsym(copy, "cuda_arena_create");
  alloc_fn other_alloc = (alloc_fn)dlsym(copy, "cuda_arena_alloc");
  destroy_fn other_destroy = (destroy_fn)dlsym(copy, "cuda_arena_destroy");
  CHECK(other_create && other_alloc && other_destroy);
  if (!(other_create && other_alloc && other_destroy)) return;
  cuda_arena_allocator* mine = make("Cuda", NULL, NULL);
  char err[256];
  cuda_arena_allocator* theirs = other_create(backend, "Cuda", 0, NULL, NULL, 0, err, sizeof err);
  CHECK(mine != NULL && theirs != NULL && mine != theirs);
  CHECK(cuda_arena_alloc(theirs, 4096) == NULL);
  CHECK(cuda_arena_last_error_code() != CUDA_ARENA_OK);
  CHECK(other_alloc(mine, 4096) == NULL);
  other_destroy(theirs);
  cuda_arena_destroy(mine);
}

/* Threads allocate and free on two stream tokens while another thread resets them over and
 * over: a reset never releases a stream under a call that found it in its thread's cache
 * (valgrind sees any use after it), every call is served, and what is left is returned. */
static cuda_arena_allocator* resetting;
static int allocating_done[3];
static void* allocate_on_two_streams(void* arg) {
  size_t k = (size_t)arg;
  for (int i = 0; i < 4000; i++) {
    void* stream = (void*)(size_t)(0x1000 + 0x100 * ((i / 50 + k) % 2));
    void* p = cuda_arena_alloc_on_stream(resetting, 256 * (size_t)(1 + (i + k) % 7), stream);
    CHECK(p != NULL);
    if (p != NULL) CHECK(cuda_arena_free(resetting, p) == CUDA_ARENA_OK);
  }
  __atomic_store_n(&allocating_done[k], 1, __ATOMIC_RELEASE);
  return NULL;
}
static void threads_allocate_on_streams_another_thread_resets(void) {
  resetting = make("Cuda", NULL, NULL);
  CHECK(resetting != NULL);
  pthread_t t[3];
  for (size_t k = 0; k < 3; k++) CHECK(pthread_create(&t[k], NULL, allocate_on_two_streams, (void*)k) == 0);
  int resets = 0;
  for (;;) {
    int done = 0;
    for (int k = 0; k < 3; k++) done += __atomic_load_n(&allocating_done[k], __ATOMIC_ACQUIRE);
    if (done == 3) break;
    CHECK(cuda_arena_reset_stream(resetting, (void*)(size_t)(0x1000 + 0x100 * (resets++ % 2))) == CUDA_ARENA_OK);
    sched_yield();
  }
  for (int k = 0; k < 3; k++) CHECK(pthread_join(t[k], NULL) == 0);
  cuda_arena_stats s;
  CHECK(cuda_arena_get_stats(resetting, &s) == CUDA_ARENA_OK);
  CHECK(s.in_use == 0 && s.num_allocs == 12000);
  cuda_arena_destroy(resetting);
}

/* A child of fork(2) (which may not inherit the parent's registration for process-wide
 * barriers) allocates on streams and resets them from its own threads: it is served, and a
 * reset returns. */
static void* child_allocates_on_a_stream(void* unused) {
  (void)unused;
  for (int i = 0; i < 200; i++) {
    void* p = cuda_arena_alloc_on_stream(resetting, 4096, (void*)(size_t)0x3000);
    CHECK(p != NULL);
    if (p != NULL) CHECK(cuda_arena_free(resetting, p) == CUDA_ARENA_OK);
  }
  return NULL;
}
static void a_forked_child_allocates_and_resets_streams(void) {
  resetting = make("Cuda", NULL, NULL);
  CHECK(resetting != NULL);
  void* p = cuda_arena_alloc_on_stream(resetting, 4096, (void*)(size_t)0x3000);
  CHECK(p != NULL && cuda_arena_free(resetting, p) == CUDA_ARENA_OK);
  CHECK(cuda_arena_reset_stream(resetting, (void*)(size_t)0x3000) == CUDA_ARENA_OK);
  fflush(stdout);
  pid_t child = fork();
  CHECK(child >= 0);
  if (child == 0) {
    pthread_t t;
    CHECK(pthread_create(&t, NULL, child_allocates_on_a_stream, NULL) == 0);
    for (int i = 0; i < 200; i++) {
      CHECK(cuda_arena_reset_stream(resetting, (void*)(size_t)0x3000) == CUDA_ARENA_OK);
    }
    CHECK(pthread_join(t, NULL) == 0);
    child_allocates_on_a_stream(NULL);
    CHECK(cuda_arena_reset_stream(resetting, (void*)(size_t)0x3000) == CUDA_ARENA_OK);
    _exit(failures == 0 ? 0 : 1);
  }
  int status = -1;
  CHECK(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  cuda_arena_destroy(resetting);
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: contract host|virtual CASE\n");
    return 2;
  }
  backend = argv[1];
  const char* name = argv[2];
  static const struct {
    const char* name;
    void (*run)(void);
  } cases[] = {
      {"second_create_with_other_options_warns", second_create_with_other_options_warns},
      {"reset_stream_frees_a_streams_chunks_for_every_stream", reset_stream_frees_a_streams_chunks_for_every_stream},
      {"stream_tokens_are_bounded_and_resets_make_room", stream_tokens_are_bounded_and_resets_make_room},
      {"a_destroyed_handle_is_released_not_a_crash", a_destroyed_handle_is_released_not_a_crash},
      {"null_arguments_are_coded_errors", null_arguments_are_coded_errors},
      {"size_zero_and_size_max", size_zero_and_size_max},
      {"device_stats_count_mappings_and_waits", device_stats_count_mappings_and_waits},
      {"own_frees_on_a_host_stream_are_unmapped_past_the_headroom",
       own_frees_on_a_host_stream_are_unmapped_past_the_headroom},
      {"two_streams_taking_turns_settle_without_a_reset", two_streams_taking_turns_settle_without_a_reset},
      {"an_unknown_simulated_events_mode_fails_the_create", an_unknown_simulated_events_mode_fails_the_create},
      {"a_free_from_a_thread_exit_destructor_frees", a_free_from_a_thread_exit_destructor_frees},
      {"a_handle_of_another_copy_of_the_library_is_no_handle", a_handle_of_another_copy_of_the_library_is_no_handle},
      {"a_thread_cancelled_during_a_replay_is_cancelled_outside_the_library",
       a_thread_cancelled_during_a_replay_is_cancelled_outside_the_library},
      {"threads_allocate_on_streams_another_thread_resets", threads_allocate_on_streams_another_thread_resets},
      {"a_forked_child_allocates_and_resets_streams", a_forked_child_allocates_and_resets_streams},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (strcmp(cases[i].name, name) == 0) {
      cases[i].run();
      if (failures == 0) printf("contract %s on %s: all checks passed\n", name, backend);
      return failures == 0 ? 0 : 1;
    }
  }
  fprintf(stderr, "unknown case %s\n", name);
  return 2;
}
