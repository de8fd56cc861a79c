/* One rank fails in the middle of a run of allreduces; the job must end with a message naming
 * it, within a bounded time (run_fail.sh measures). Usage: test_coll_fail MODE VICTIM
 *   kill      the victim SIGKILLs itself: nothing of it is left to say goodbye
 *   stall     the victim stops calling collectives (sleeps): only a timeout can tell
 *   mismatch  the victim calls a broadcast while the others call an allreduce (a bug in rank
 *             code): the shm transport must name the disagreement
 * A survivor that is still running after 60 s has not noticed: it exits 3 (test failure). */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base.h"
#include "coll.h"

int main(int argc, char **argv) {
    if (argc != 3) nm_fatal("usage: %s kill|stall|mismatch VICTIM", argv[0]);
    const char *mode = argv[1];
    int victim = atoi(argv[2]);
    struct coll *c = coll_init(NULL);
    int me = coll_rank(c);
    enum { N = 4096, FAIL_AT = 200 };
    static float in[N], out[N];
    for (int i = 0; i < N; i++) in[i] = (float)(i % 7);
    double t0 = nm_time_s();
    for (int it = 0;; it++) {
        if (me == victim && it == FAIL_AT) {
            nm_log_info("test_coll_fail: rank %d fails now (%s)", me, mode);
            if (!strcmp(mode, "kill")) raise(SIGKILL);
            if (!strcmp(mode, "stall"))
                for (;;) sleep(1);
            if (!strcmp(mode, "mismatch")) coll_bcast(c, in, sizeof in, me);
        }
        coll_allreduce_sum_f32(c, in, out, N);
        if (nm_time_s() - t0 > 60) {
            nm_log_error("test_coll_fail: rank %d still running after 60 s: the failure of rank "
                         "%d (%s) went unnoticed",
                         me, victim, mode);
            _exit(3);
        }
    }
}
