/* The avx2 kernel table: each kernel file fills the slots it implements. */
#include "avx2.h"

void kern_isa_avx2_fill(struct kern_isa *t) {
    avx2_fill_packed(t);
    avx2_fill_attn(t);
    avx2_fill_blocks(t);
    avx2_fill_act(t);
}
