// Runs a command with transparent huge pages disabled for it (prctl PR_SET_THP_DISABLE, kept
// across execve): for memory-bars.sh's WRAP, to see whether huge pages move a replay's time.
#include <stdio.h>
#include <sys/prctl.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: thp_off COMMAND [ARGS...]\n");
    return 2;
  }
  if (prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0) {
    perror("prctl(PR_SET_THP_DISABLE)");
    return 1;
  }
  execvp(argv[1], argv + 1);
  perror("execvp");
  return 127;
}
