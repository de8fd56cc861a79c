/* The avx512 kernel table: each kernel file fills the slots it implements. */
#include "avx512.h"

void kern_isa_avx512_fill(struct kern_isa *t) {
    avx512_fill_q(t);
    avx512_fill_k(t);
    avx512_fill_q5(t);
    avx512_fill_k23(t);
    avx512_fill_iq4(t);
    avx512_fill_iq(t);
    t->note = avx512_fill_iq_vbmi(t);
    avx512_fill_f(t);
    avx512_fill_act(t);
    avx512_fill_packed(t);
    avx512_fill_attn(t);
}
