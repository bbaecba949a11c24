/* Replays a trace file through the C ABI and prints the report: `replay FILE BACKEND
 * [KEY VALUE]...`. Exit 0 with the JSON on stdout, or 1 with the last error on stderr. */
#include "cuda_arena.h"
#include <stdio.h>

int main(int argc, char** argv) {
    if (argc < 3 || (argc - 3) % 2 != 0) {
        fprintf(stderr, "usage: replay FILE BACKEND [KEY VALUE]...\n");
        return 2;
    }
    const char* keys[16];
    const char* values[16];
    size_t n = 0;
    for (int i = 3; i + 1 < argc && n < 16; i += 2, n++) {
        keys[n] = argv[i];
        values[n] = argv[i + 1];
    }
    char* report = cuda_arena_replay_file(argv[1], argv[2], keys, values, n);
    if (report == NULL) {
        char err[512];
        cuda_arena_last_error(err, sizeof err);
        fprintf(stderr, "%d: %s\n", cuda_arena_last_error_code(), err);
        return 1;
    }
    puts(report);
    cuda_arena_string_free(report);
    return 0;
}
