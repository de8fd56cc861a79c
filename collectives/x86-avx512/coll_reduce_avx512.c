/* coll_reduce_body.h compiled with AVX-512 (collectives.cmake sets the flags on this file
 * only); coll_reduce.c calls it when the CPU and the OS support AVX-512F. */
#define COLL_REDUCE_FN coll_reduce_sum_avx512
#include "../coll_reduce_body.h"
