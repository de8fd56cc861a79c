/* `numallm bench collectives` runs the OSU-style collectives benchmark of
 * tests/bench/bench_coll.c on every rank of a job started through the launcher (launch.h). That
 * file is compiled here a second time with its main renamed to bench_coll_main, so that its own
 * executable, its command line and its output stay as they are (bench_worker.c calls it). */
#ifdef NM_HAVE_MPI
int bench_coll_main(int argc, char **argv);
#define main bench_coll_main
#include "../../tests/bench/bench_coll.c"
#undef main
#else
typedef int bench_coll_main_unused; /* without MPI there is nothing to compare (bench_worker.c says so) */
#endif
