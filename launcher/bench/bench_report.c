/* Printers of numallm bench's rows in llama-bench's formats (see bench_report.h). */
#include "bench_report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"

bool bench_format_parse(const char *name, enum bench_format *out) {
    static const struct {
        const char *name;
        enum bench_format f;
    } k[] = {{"none", BENCH_FORMAT_NONE}, {"md", BENCH_FORMAT_MD},       {"csv", BENCH_FORMAT_CSV},
             {"json", BENCH_FORMAT_JSON}, {"jsonl", BENCH_FORMAT_JSONL}, {"sql", BENCH_FORMAT_SQL}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (strcmp(name, k[i].name) == 0) {
            *out = k[i].f;
            return true;
        }
    return false;
}

/* ---- statistics (llama-bench: mean, and the sample standard deviation, n - 1) ------------ */

static double mean(const double *v, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += v[i];
    return n > 0 ? s / n : 0;
}

static double sdev(const double *v, int n) {
    if (n <= 1) return 0;
    const double m = mean(v, n);
    double s = 0;
    for (int i = 0; i < n; i++) s += (v[i] - m) * (v[i] - m);
    return sqrt(s / (n - 1));
}

void bench_row_finish(struct bench_row *r) {
    const double tokens = r->n_prompt + r->n_gen;
    for (int i = 0; i < r->n_samples; i++) {
        const double ns = (double)(r->samples_ns[i] ? r->samples_ns[i] : 1);
        r->samples_ts[i] = 1e9 * tokens / ns;
        r->samples_gbs[i] = (double)r->token_bytes * r->n_passes / ns;
    }
}

double bench_row_avg_ts(const struct bench_row *r) { return mean(r->samples_ts, r->n_samples); }
double bench_row_sd_ts(const struct bench_row *r) { return sdev(r->samples_ts, r->n_samples); }
double bench_row_avg_gbs(const struct bench_row *r) { return mean(r->samples_gbs, r->n_samples); }

static void ns_stats(const struct bench_row *r, uint64_t *avg, uint64_t *sd) {
    double v[64];
    for (int i = 0; i < r->n_samples; i++) v[i] = (double)r->samples_ns[i];
    *avg = (uint64_t)mean(v, r->n_samples);
    *sd = (uint64_t)sdev(v, r->n_samples);
}

void bench_row_test_name(const struct bench_row *r, char *buf, size_t len) {
    int n;
    if (r->n_prompt > 0 && r->n_gen == 0) n = snprintf(buf, len, "pp%d", r->n_prompt);
    else if (r->n_gen > 0 && r->n_prompt == 0) n = snprintf(buf, len, "tg%d", r->n_gen);
    else n = snprintf(buf, len, "pp%d+tg%d", r->n_prompt, r->n_gen);
    if (r->n_depth > 0 && n > 0 && (size_t)n < len) snprintf(buf + n, len - (size_t)n, " @ d%d", r->n_depth);
}

/* ---- fields (csv, json, jsonl, sql) -------------------------------------------------------- */

enum field_type { FT_STRING, FT_BOOL, FT_INT, FT_FLOAT };

struct field {
    const char *name;
    enum field_type type;
};

/* llama-bench's fields in its order (mainline, FORMATS.md), then numallm's. */
static const struct field k_fields[] = {
    {"build_commit", FT_STRING},   {"build_number", FT_INT},   {"cpu_info", FT_STRING},
    {"gpu_info", FT_STRING},       {"backends", FT_STRING},    {"model_filename", FT_STRING},
    {"model_type", FT_STRING},     {"model_size", FT_INT},     {"model_n_params", FT_INT},
    {"n_batch", FT_INT},           {"n_ubatch", FT_INT},       {"n_threads", FT_INT},
    {"cpu_mask", FT_STRING},       {"cpu_strict", FT_BOOL},    {"poll", FT_INT},
    {"type_k", FT_STRING},         {"type_v", FT_STRING},      {"n_gpu_layers", FT_INT},
    {"n_cpu_moe", FT_INT},         {"split_mode", FT_STRING},  {"main_gpu", FT_INT},
    {"no_kv_offload", FT_BOOL},    {"flash_attn", FT_INT},     {"devices", FT_STRING},
    {"tensor_split", FT_STRING},   {"tensor_buft_overrides", FT_STRING},
    {"use_mmap", FT_BOOL},         {"embeddings", FT_BOOL},    {"no_op_offload", FT_INT},
    {"no_host", FT_BOOL},          {"fit_target", FT_INT},     {"fit_min_ctx", FT_INT},
    {"n_prompt", FT_INT},          {"n_gen", FT_INT},          {"n_depth", FT_INT},
    {"test_time", FT_STRING},      {"avg_ns", FT_INT},         {"stddev_ns", FT_INT},
    {"avg_ts", FT_FLOAT},          {"stddev_ts", FT_FLOAT},
    /* numallm */
    {"n_ranks", FT_INT},           {"isa", FT_STRING},         {"numa_nodes", FT_STRING},
    {"token_bytes", FT_INT},      {"avg_gbs", FT_FLOAT},      {"stddev_gbs", FT_FLOAT},
    {"bw_gbs", FT_FLOAT},          {"scaling_eff", FT_FLOAT},
};
enum { N_FIELDS = sizeof k_fields / sizeof k_fields[0] };

/* Values as text, in k_fields order; an empty FT_FLOAT/FT_INT value is null (unknown). */
struct values {
    char v[N_FIELDS][1100];
};

static void row_values(const struct bench_row *r, const struct bench_env *e, struct values *out) {
    uint64_t avg_ns, sd_ns;
    ns_stats(r, &avg_ns, &sd_ns);
    int i = 0;
#define V(...) snprintf(out->v[i++], sizeof out->v[0], __VA_ARGS__)
    V("%s", e->build_commit);
    V("%d", e->build_number);
    V("%s", e->cpu_info);
    V("%s", e->gpu_info);
    V("%s", e->backends);
    V("%s", r->model_filename);
    V("%s", r->model_type);
    V("%llu", (unsigned long long)r->model_size);
    V("%llu", (unsigned long long)r->model_n_params);
    V("%d", r->n_batch);
    V("%d", r->n_ubatch);
    V("%d", r->n_threads);
    V("0x0");                               /* cpu_mask: ranks are bound by the plan instead */
    V("0");                                 /* cpu_strict */
    V("50");                                /* poll */
    V("%s", r->type_k);
    V("%s", r->type_k);                     /* one KV cache type for K and V */
    V("%d", r->n_gpu_layers);
    V("0");                                 /* n_cpu_moe */
    V("%s", r->n_ranks > 1 ? "tensor" : "none"); /* split_mode: ranks split every tensor */
    V("0");                                 /* main_gpu */
    V("0");                                 /* no_kv_offload */
    V("0");                                 /* flash_attn */
    V("none");                              /* devices: no GPU rank yet */
    V("0.00");                              /* tensor_split */
    V("none");                              /* tensor_buft_overrides */
    V("0");                                 /* use_mmap: weights are copied to each rank's node */
    V("0");                                 /* embeddings */
    V("0");                                 /* no_op_offload */
    V("0");                                 /* no_host */
    V("0");                                 /* fit_target */
    V("0");                                 /* fit_min_ctx */
    V("%d", r->n_prompt);
    V("%d", r->n_gen);
    V("%d", r->n_depth);
    V("%s", r->test_time);
    V("%llu", (unsigned long long)avg_ns);
    V("%llu", (unsigned long long)sd_ns);
    V("%f", bench_row_avg_ts(r));
    V("%f", bench_row_sd_ts(r));
    V("%d", r->n_ranks);
    V("%s", e->isa);
    V("%s", r->numa_nodes);
    V("%llu", (unsigned long long)r->token_bytes);
    V("%f", bench_row_avg_gbs(r));
    V("%f", sdev(r->samples_gbs, r->n_samples));
    if (r->bw_gbs > 0) V("%f", r->bw_gbs);
    else V("%s", "");
    if (r->scaling_eff >= 0) V("%f", r->scaling_eff);
    else V("%s", "");
#undef V
    NM_ASSERT(i == N_FIELDS);
}

static void put_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"') fputs("\\\"", f);
        else if (*p == '\\') fputs("\\\\", f);
        else if (*p <= 0x1f) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

static void put_json_value(FILE *f, const struct field *fd, const char *v) {
    switch (fd->type) {
    case FT_STRING: put_json_string(f, v); break;
    case FT_BOOL: fputs(strcmp(v, "0") == 0 ? "false" : "true", f); break;
    default: fputs(*v ? v : "null", f); break;
    }
}

static void put_csv(FILE *f, const char *v) {
    fputc('"', f);
    for (; *v; v++) {
        if (*v == '"') fputc('"', f);
        fputc(*v, f);
    }
    fputc('"', f);
}

/* ", "-joined samples (llama-bench joins with an ostream: 6 significant digits for doubles). */
static void put_samples(FILE *f, const struct bench_row *r, bool ts) {
    for (int i = 0; i < r->n_samples; i++) {
        if (i) fputs(", ", f);
        if (ts) fprintf(f, "%g", r->samples_ts[i]);
        else fprintf(f, "%llu", (unsigned long long)r->samples_ns[i]);
    }
}

/* ---- markdown ------------------------------------------------------------------------------- */

/* Columns: llama-bench's widths (negative: left-aligned), display names and fields. */
enum md_col {
    MD_MODEL, MD_SIZE, MD_PARAMS, MD_BACKEND, MD_NGL, MD_THREADS, MD_RANKS, MD_N_BATCH, MD_N_UBATCH,
    MD_TYPE_K, MD_TYPE_V, MD_TEST, MD_TS, MD_GBS, MD_BW, MD_EFF, MD_COUNT
};
static const struct {
    const char *name;
    int width;
} k_md[MD_COUNT] = {
    [MD_MODEL] = {"model", -30},  [MD_SIZE] = {"size", 10},        [MD_PARAMS] = {"params", 10},
    [MD_BACKEND] = {"backend", -10}, [MD_NGL] = {"ngl", 3},        [MD_THREADS] = {"threads", 7},
    [MD_RANKS] = {"ranks", 5},    [MD_N_BATCH] = {"n_batch", 7},   [MD_N_UBATCH] = {"n_ubatch", 8},
    [MD_TYPE_K] = {"type_k", 6},  [MD_TYPE_V] = {"type_v", 6},     [MD_TEST] = {"test", 15},
    [MD_TS] = {"t/s", 20},        [MD_GBS] = {"GB/s", 8},          [MD_BW] = {"bw GB/s", 8},
    [MD_EFF] = {"eff", 5},
};

static bool md_shown(const struct bench_printer *p, enum md_col c) {
    switch (c) {
    case MD_NGL: return p->cols.ngl;
    case MD_N_BATCH: return p->cols.n_batch;
    case MD_N_UBATCH: return p->cols.n_ubatch;
    case MD_TYPE_K: return p->cols.type_k;
    case MD_TYPE_V: return p->cols.type_v;
    default: return true;
    }
}

static void md_cell(const struct bench_printer *p, const struct bench_row *r, enum md_col c, char *buf, size_t len) {
    switch (c) {
    case MD_MODEL: snprintf(buf, len, "%s", r->model_type); break;
    case MD_SIZE:
        if (r->model_size < 1024ull * 1024 * 1024) snprintf(buf, len, "%.2f MiB", r->model_size / 1024.0 / 1024.0);
        else snprintf(buf, len, "%.2f GiB", r->model_size / 1024.0 / 1024.0 / 1024.0);
        break;
    case MD_PARAMS:
        if (r->model_n_params < 1000ull * 1000 * 1000) snprintf(buf, len, "%.2f M", r->model_n_params / 1e6);
        else snprintf(buf, len, "%.2f B", r->model_n_params / 1e9);
        break;
    case MD_BACKEND: snprintf(buf, len, "%s", p->env->backends); break;
    case MD_NGL: snprintf(buf, len, "%d", r->n_gpu_layers); break;
    case MD_THREADS: snprintf(buf, len, "%d", r->n_threads); break;
    case MD_RANKS: snprintf(buf, len, "%d", r->n_ranks); break;
    case MD_N_BATCH: snprintf(buf, len, "%d", r->n_batch); break;
    case MD_N_UBATCH: snprintf(buf, len, "%d", r->n_ubatch); break;
    case MD_TYPE_K:
    case MD_TYPE_V: snprintf(buf, len, "%s", r->type_k); break;
    case MD_TEST: bench_row_test_name(r, buf, len); break;
    case MD_TS: snprintf(buf, len, "%.2f ± %.2f", bench_row_avg_ts(r), bench_row_sd_ts(r)); break;
    case MD_GBS: snprintf(buf, len, "%.2f", bench_row_avg_gbs(r)); break;
    case MD_BW:
        if (r->bw_gbs > 0) snprintf(buf, len, "%.2f", r->bw_gbs);
        else snprintf(buf, len, "-");
        break;
    case MD_EFF:
        if (r->scaling_eff >= 0) snprintf(buf, len, "%.2f", r->scaling_eff);
        else snprintf(buf, len, "-");
        break;
    case MD_COUNT: break;
    }
}

const char *bench_md_legend(void) {
    return "ranks: CPU ranks (MPI processes; one per NUMA node, or an equal share of a node's cores); "
           "threads: threads per rank.\n"
           "GB/s: weight bytes read per second by all ranks together (each rank's weights x forward passes / "
           "time); bw GB/s: measured read bandwidth of the NUMA nodes holding the weights (the ceiling).\n"
           "eff: scaling efficiency = t/s / (ranks x t/s of the same test on 1 rank), at equal threads per rank.";
}

/* ---- printers --------------------------------------------------------------------------------- */

void bench_printer_header(struct bench_printer *p) {
    FILE *f = p->f;
    p->first = true;
    switch (p->format) {
    case BENCH_FORMAT_NONE: return;
    case BENCH_FORMAT_MD:
        fprintf(f, "|");
        for (int c = 0; c < MD_COUNT; c++)
            if (md_shown(p, c)) fprintf(f, " %*s |", k_md[c].width, k_md[c].name);
        fprintf(f, "\n|");
        for (int c = 0; c < MD_COUNT; c++) {
            if (!md_shown(p, c)) continue;
            const int w = abs(k_md[c].width);
            fputc(' ', f);
            for (int k = 0; k < w - 1; k++) fputc('-', f);
            fprintf(f, "%s |", k_md[c].width > 0 ? ":" : "-");
        }
        fprintf(f, "\n");
        break;
    case BENCH_FORMAT_CSV:
        for (int i = 0; i < N_FIELDS; i++) fprintf(f, "%s%s", i ? "," : "", k_fields[i].name);
        fprintf(f, "\n");
        break;
    case BENCH_FORMAT_JSON: fprintf(f, "[\n"); break;
    case BENCH_FORMAT_JSONL: break;
    case BENCH_FORMAT_SQL:
        fprintf(f, "CREATE TABLE IF NOT EXISTS llama_bench (\n");
        for (int i = 0; i < N_FIELDS; i++)
            fprintf(f, "  %s %s%s\n", k_fields[i].name,
                    k_fields[i].type == FT_STRING ? "TEXT" : k_fields[i].type == FT_FLOAT ? "REAL" : "INTEGER",
                    i < N_FIELDS - 1 ? "," : "");
        fprintf(f, ");\n\n");
        break;
    }
    fflush(f);
}

void bench_printer_row(struct bench_printer *p, const struct bench_row *r) {
    FILE *f = p->f;
    if (p->format == BENCH_FORMAT_NONE) return;
    if (p->format == BENCH_FORMAT_MD) {
        fprintf(f, "|");
        for (int c = 0; c < MD_COUNT; c++) {
            if (!md_shown(p, c)) continue;
            char buf[256];
            md_cell(p, r, c, buf, sizeof buf);
            /* llama-bench's width hack: "±" is two bytes in UTF-8 */
            fprintf(f, " %*s |", k_md[c].width + (c == MD_TS ? 1 : 0), buf);
        }
        fprintf(f, "\n");
        fflush(f);
        return;
    }
    struct values *v = malloc(sizeof *v);
    NM_ASSERT(v);
    row_values(r, p->env, v);
    switch (p->format) {
    case BENCH_FORMAT_CSV:
        for (int i = 0; i < N_FIELDS; i++) {
            if (i) fputc(',', f);
            put_csv(f, v->v[i]);
        }
        fprintf(f, "\n");
        break;
    case BENCH_FORMAT_JSON:
        if (!p->first) fprintf(f, ",\n");
        fprintf(f, "  {\n");
        for (int i = 0; i < N_FIELDS; i++) {
            fprintf(f, "    \"%s\": ", k_fields[i].name);
            put_json_value(f, &k_fields[i], v->v[i]);
            fprintf(f, ",\n");
        }
        fprintf(f, "    \"samples_ns\": [ ");
        put_samples(f, r, false);
        fprintf(f, " ],\n    \"samples_ts\": [ ");
        put_samples(f, r, true);
        fprintf(f, " ]\n  }");
        break;
    case BENCH_FORMAT_JSONL:
        fprintf(f, "{");
        for (int i = 0; i < N_FIELDS; i++) {
            fprintf(f, "\"%s\": ", k_fields[i].name);
            put_json_value(f, &k_fields[i], v->v[i]);
            fprintf(f, ", ");
        }
        fprintf(f, "\"samples_ns\": [ ");
        put_samples(f, r, false);
        fprintf(f, " ],\"samples_ts\": [ ");
        put_samples(f, r, true);
        fprintf(f, " ]}\n");
        break;
    case BENCH_FORMAT_SQL:
        fprintf(f, "INSERT INTO llama_bench (");
        for (int i = 0; i < N_FIELDS; i++) fprintf(f, "%s%s", i ? ", " : "", k_fields[i].name);
        fprintf(f, ") VALUES (");
        for (int i = 0; i < N_FIELDS; i++) {
            if (i) fprintf(f, ", ");
            if (!*v->v[i] && k_fields[i].type != FT_STRING) {
                fprintf(f, "NULL");
                continue;
            }
            fputc('\'', f);
            for (const char *s = v->v[i]; *s; s++) {
                if (*s == '\'') fputc('\'', f);
                fputc(*s, f);
            }
            fputc('\'', f);
        }
        fprintf(f, ");\n");
        break;
    default: break;
    }
    p->first = false;
    free(v);
    fflush(f);
}

void bench_printer_footer(struct bench_printer *p, const char *notes) {
    FILE *f = p->f;
    switch (p->format) {
    case BENCH_FORMAT_MD:
        fprintf(f, "\n%s\n", bench_md_legend());
        if (notes && *notes) fprintf(f, "%s%s", notes, notes[strlen(notes) - 1] == '\n' ? "" : "\n");
        fprintf(f, "\nbuild: %s (%d)\n", p->env->build_commit, p->env->build_number);
        break;
    case BENCH_FORMAT_JSON: fprintf(f, "%s]\n", p->first ? "" : "\n"); break;
    default: break;
    }
    fflush(f);
}
