/* The layout planner (layout.h) on simulated CPU feature sets: AMX + everything, AVX-512 VNNI
 * without AMX, AMX in CPUID but refused by the OS, AVX2 only, plain. For every supported type
 * and use: the layout, whether it is a downgrade, that the reason names what is missing, that
 * embeddings, norms, biases and F32 are never packed, that the chosen layout supports the type,
 * and that layout_report counts downgrades (what --strict turns into an error). */
#include "ktest.h"
#include "layout.h"

/* Every supported type: the older nine, then whatever the block decoder interface has. */
static enum dtype k_all[DTYPE_COUNT];
static int n_all;

static struct cpu_features cpu_avx512(void) {
    return (struct cpu_features){.avx2 = true, .fma = true, .f16c = true, .avx512f = true, .avx512bw = true,
                                 .avx512vl = true, .avx512vnni = true, .avx512bf16 = true, .avx512dq = true,
                                 .os_avx512 = true};
}

static void expect(const struct cpu_features *cpu, const char *cpu_name, enum tensor_use use, enum dtype t,
                   enum weight_layout want, bool want_down, const char *reason_has) {
    struct layout_why why;
    const enum weight_layout got = layout_plan(use, t, cpu, &why);
    if (got != want || why.downgrade != want_down)
        ktest_fail("layout_plan(%s, %s) on %s: %s%s, want %s%s", tensor_use_name(use), dtype_get(t)->name, cpu_name,
                   weight_layout_name(got), why.downgrade ? " (downgrade)" : "", weight_layout_name(want),
                   want_down ? " (downgrade)" : "");
    if (!weight_layout_supports(got, t))
        ktest_fail("layout_plan(%s, %s) on %s: %s does not support the type", tensor_use_name(use), dtype_get(t)->name,
                   cpu_name, weight_layout_name(got));
    if (want_down && reason_has && !strstr(why.reason, reason_has))
        ktest_fail("layout_plan(%s, %s) on %s: reason \"%s\" does not say \"%s\"", tensor_use_name(use),
                   dtype_get(t)->name, cpu_name, why.reason, reason_has);
    if (!want_down && why.reason[0])
        ktest_fail("layout_plan(%s, %s) on %s: no downgrade but reason \"%s\"", tensor_use_name(use), dtype_get(t)->name,
                   cpu_name, why.reason);
    if (why.kernels == NULL || why.kernels[0] == '\0') ktest_fail("layout_plan: no kernels named");
}

int main(int argc, char **argv) {
    ktest_init(argc, argv);
    for (int t = 0; t < DTYPE_COUNT; t++)
        if (dtype_get((uint32_t)t)) k_all[n_all++] = (enum dtype)t;
    struct cpu_features amx = cpu_avx512();
    amx.amx_tile = amx.amx_int8 = amx.amx_bf16 = amx.amx_os_perm = true;
    const struct cpu_features vnni = cpu_avx512();
    struct cpu_features refused = amx;
    refused.amx_os_perm = false;
    const struct cpu_features avx2 = {.avx2 = true, .fma = true, .f16c = true};
    const struct cpu_features plain = {0};
    struct {
        const struct cpu_features *cpu;
        const char *name;
    } cpus[] = {{&amx, "amx"}, {&vnni, "avx512-vnni"}, {&refused, "amx-refused"}, {&avx2, "avx2"}, {&plain, "plain"}};
    for (size_t ci = 0; ci < NM_ARRAY_LEN(cpus); ci++) {
        const struct cpu_features *c = cpus[ci].cpu;
        const bool has512 = c != &avx2 && c != &plain, hasamx = c == &amx;
        for (int ti = 0; ti < n_all; ti++) {
            const enum dtype t = k_all[ti];
            /* never packed, never a downgrade */
            expect(c, cpus[ci].name, TENSOR_USE_ROWS, t, WEIGHT_LAYOUT_ROWS, false, NULL);
            expect(c, cpus[ci].name, TENSOR_USE_VECTOR, t, WEIGHT_LAYOUT_ROWS, false, NULL);
            if (t == DTYPE_F32) {
                expect(c, cpus[ci].name, TENSOR_USE_MATMUL, t, WEIGHT_LAYOUT_ROWS, !has512,
                       c == &avx2 ? "AVX-512" : "XCR0");
                continue;
            }
            if (!weight_layout_supports(WEIGHT_LAYOUT_Q_TILE16, t) && t != DTYPE_F16 && t != DTYPE_BF16) {
                /* GGUF blocks as stored: AVX-512 kernels where the build has them for the type, and
                 * the AMX-BF16 tiles for prompts where the CPU has them */
                const bool fast = has512 && kern_isa_avx512_has(t);
                expect(c, cpus[ci].name, TENSOR_USE_MATMUL, t, WEIGHT_LAYOUT_ROWS, !fast || !hasamx,
                       c == &refused ? "refused" : !hasamx ? "AMX-BF16" : "no AVX-512 kernel for");
                if (c == &avx2 || c == &plain) { /* the avx2 path's kernel over the type's decoder */
                    struct layout_why w;
                    layout_plan(TENSOR_USE_MATMUL, t, c, &w);
                    const bool want = c == &avx2 && kern_isa_avx2_has(t);
                    if ((strstr(w.kernels, "AVX2") != NULL) != want)
                        ktest_fail("layout_plan(matmul, %s) on %s: kernels \"%s\"", dtype_get(t)->name, cpus[ci].name,
                                   w.kernels);
                }
                continue;
            }
            const bool fl = t == DTYPE_F16 || t == DTYPE_BF16;
            const enum weight_layout packed = fl ? WEIGHT_LAYOUT_F_PAIR16 : WEIGHT_LAYOUT_Q_TILE16;
            const char *why = c == &refused ? "refused" : has512 ? (fl ? "no AMX-BF16" : "no AMX-INT8") : "AMX";
            /* without AVX-512, the avx2 path's packed kernel (it has every packed type) */
            const bool packs = has512 || c == &avx2;
            expect(c, cpus[ci].name, TENSOR_USE_MATMUL, t, packs ? packed : WEIGHT_LAYOUT_ROWS, !hasamx, why);
            if (c == &avx2) {
                struct layout_why w;
                layout_plan(TENSOR_USE_MATMUL, t, c, &w);
                if (!strstr(w.kernels, "AVX2"))
                    ktest_fail("layout_plan(matmul, %s) on avx2: kernels \"%s\" do not say AVX2", dtype_get(t)->name, w.kernels);
            }
        }
    }
    /* the start-up table and --strict's count */
    const struct layout_tensor_class classes[] = {
        {"token_embd", TENSOR_USE_ROWS, DTYPE_Q4_0},  {"blk.*.attn_norm", TENSOR_USE_VECTOR, DTYPE_F32},
        {"blk.*.attn_q", TENSOR_USE_MATMUL, DTYPE_Q4_0}, {"blk.*.ffn_down", TENSOR_USE_MATMUL, DTYPE_Q6_K},
        {"output", TENSOR_USE_MATMUL, DTYPE_BF16},
    };
    char err[256] = "";
    if (layout_report(classes, (int)NM_ARRAY_LEN(classes), &amx, err, sizeof err) != 0 || err[0])
        ktest_fail("layout_report on amx: downgrades reported (%s)", err);
    const int nd = layout_report(classes, (int)NM_ARRAY_LEN(classes), &vnni, err, sizeof err);
    if (nd != 3 || !strstr(err, "blk.*.attn_q") || !strstr(err, "--strict"))
        ktest_fail("layout_report on avx512-vnni: %d downgrades (want 3), message \"%s\"", nd, err);
    /* this machine's real features: print what it gets */
    struct layout_why why;
    const enum weight_layout l = layout_plan(TENSOR_USE_MATMUL, DTYPE_Q4_0, cpu_features_get(), &why);
    printf("this CPU: q4_0 matmul -> %s (%s)%s%s\n", weight_layout_name(l), why.kernels, why.downgrade ? "; downgrade: " : "",
           why.reason);
    return ktest_finish("test_layout");
}
