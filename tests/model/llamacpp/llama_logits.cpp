// llama_logits MODEL OUT.lgt STEPS ID,ID,...: llama.cpp's logits for a token sequence, in the LGT1
// format of ../shared/data/quant (README there; quant_hub.py reads it): the ids decoded as one
// batch with every row's logits, then STEPS single-token steps, each feeding the previous row's
// argmax. CPU, 2 threads, F32 KV cache, flash attention off, the settings of the shared files.
// Prints "# tokens: ..." (all fed ids) on stdout. Built against a llama.cpp checkout by
// hub_cases.sh; not part of numallm's build.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "llama.h"

static int argmax(const float *v, int n) {
    int a = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[a]) a = i;
    return a;
}

static void put_row(FILE *f, int pos, int token, const float *logits, int n_vocab) {
    fwrite(&pos, 4, 1, f);
    fwrite(&token, 4, 1, f);
    fwrite(logits, 4, (size_t)n_vocab, f);
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s MODEL OUT.lgt STEPS ID,ID,...\n", argv[0]);
        return 2;
    }
    const int steps = atoi(argv[3]);
    std::vector<llama_token> ids;
    for (const char *p = argv[4]; *p;) {
        ids.push_back(atoi(p));
        p = strchr(p, ',');
        if (!p) break;
        p++;
    }
    if (ids.empty() || ids.size() > 512 || steps < 0) {
        fprintf(stderr, "%s: 1 to 512 ids and STEPS >= 0\n", argv[0]);
        return 2;
    }
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) return 1;
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(ids.size() + (size_t)steps + 16);
    cp.n_batch = cp.n_ubatch = 512;
    cp.n_threads = cp.n_threads_batch = 2;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.type_k = cp.type_v = GGML_TYPE_F32;
    llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) return 1;
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    FILE *f = fopen(argv[2], "wb");
    if (!f) {
        perror(argv[2]);
        return 1;
    }
    const int n_rows = (int)ids.size() + steps;
    fwrite("LGT1", 1, 4, f);
    fwrite(&n_vocab, 4, 1, f);
    fwrite(&n_rows, 4, 1, f);

    llama_batch b = llama_batch_init(512, 0, 1);
    b.n_tokens = (int)ids.size();
    for (int i = 0; i < b.n_tokens; i++) {
        b.token[i] = ids[(size_t)i];
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = 1;
    }
    if (llama_decode(ctx, b)) return 1;
    printf("# tokens:");
    llama_token next = 0;
    for (int i = 0; i < b.n_tokens; i++) {
        const float *l = llama_get_logits_ith(ctx, i);
        put_row(f, i, ids[(size_t)i], l, n_vocab);
        printf(" %d", ids[(size_t)i]);
        next = argmax(l, n_vocab);
    }
    for (int s = 0, pos = (int)ids.size(); s < steps; s++, pos++) {
        b.n_tokens = 1;
        b.token[0] = next;
        b.pos[0] = pos;
        b.n_seq_id[0] = 1;
        b.seq_id[0][0] = 0;
        b.logits[0] = 1;
        if (llama_decode(ctx, b)) return 1;
        const float *l = llama_get_logits_ith(ctx, 0);
        put_row(f, pos, next, l, n_vocab);
        printf(" %d", next);
        next = argmax(l, n_vocab);
    }
    printf("\n");
    fclose(f);
    llama_batch_free(b);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
