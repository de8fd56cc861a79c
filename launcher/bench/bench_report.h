/* numallm bench's results and their printers, in llama-bench's shapes (FORMATS.md, "Benchmark
 * report shape users know"): md (the default), csv, json, jsonl and sql, with llama-bench's
 * fields in llama-bench's order and numallm's own appended after them:
 *   n_ranks      CPU ranks of the job (MPI processes; 1 = in-process)
 *   isa          kernel path the ranks chose ("avx512", "ref")
 *   numa_nodes   NUMA nodes holding the ranks' weights ("0", "0,1")
 *   token_bytes  weight bytes of all ranks together that one forward pass reads (all they hold
 *                for a dense model; for MoE the experts the router picks, n_expert_used of n_expert)
 *   avg_gbs, stddev_gbs  weight bytes read per second by all ranks (token_bytes x forward
 *                passes / time), mean and sample deviation over the repetitions
 *   bw_gbs       measured read bandwidth of those NUMA nodes (the ceiling); null when not measured
 *   scaling_eff  t/s / (n_ranks x t/s of the same test on 1 rank at the same threads per rank);
 *                null without such a 1-rank row
 * Every column of the markdown table is made from these fields, so the JSON carries every figure
 * the table shows: model = model_type, size = model_size, params = model_n_params, backend =
 * backends, ngl = n_gpu_layers, threads = n_threads, ranks = n_ranks, n_batch, n_ubatch, type_k,
 * type_v, test = n_prompt/n_gen/n_depth, t/s = avg_ts ± stddev_ts, GB/s = avg_gbs, bw GB/s =
 * bw_gbs, eff = scaling_eff (tests/bench_cli/check_bench.py checks this mapping). */
#ifndef NM_BENCH_REPORT_H
#define NM_BENCH_REPORT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

enum bench_format {
    BENCH_FORMAT_NONE,
    BENCH_FORMAT_MD,
    BENCH_FORMAT_CSV,
    BENCH_FORMAT_JSON,
    BENCH_FORMAT_JSONL,
    BENCH_FORMAT_SQL,
};
/* "md", "csv", ...; false for another name. */
bool bench_format_parse(const char *name, enum bench_format *out);

/* What is the same for every row of one run. */
struct bench_env {
    char build_commit[48];
    int build_number;
    char cpu_info[256];
    char gpu_info[512];
    const char *backends; /* "CPU" */
    const char *isa;      /* kern_isa_get()->name */
};

/* One test of one configuration: a row of the table. */
struct bench_row {
    char model_filename[1024];
    char model_type[128];     /* model_describe: "qwen2 494M Q4_0" */
    uint64_t model_size;      /* bytes of all tensors */
    uint64_t model_n_params;
    int n_batch, n_ubatch, n_threads, n_gpu_layers, n_ranks;
    const char *type_k;       /* "f16", "f32" (static strings) */
    int n_prompt, n_gen, n_depth;
    char test_time[32];       /* RFC 3339, UTC */
    int n_samples;
    uint64_t samples_ns[64];  /* one per repetition */
    double samples_ts[64];    /* 1e9 * (n_prompt + n_gen) / ns */
    double samples_gbs[64];
    uint64_t token_bytes;    /* see the file comment */
    int n_passes;             /* forward passes per repetition */
    char numa_nodes[64];
    double bw_gbs;            /* <= 0: not measured */
    double scaling_eff;       /* < 0: no 1-rank row to compare with */
};

/* Fill samples_ts/samples_gbs from samples_ns (call after setting the samples). */
void bench_row_finish(struct bench_row *r);
double bench_row_avg_ts(const struct bench_row *r);
double bench_row_sd_ts(const struct bench_row *r);
double bench_row_avg_gbs(const struct bench_row *r);
/* "pp512", "tg128", "pp512+tg128", with " @ d512" for a depth. */
void bench_row_test_name(const struct bench_row *r, char *buf, size_t len);

/* Optional markdown columns: shown when the parameter was given (llama-bench shows those with
 * more than one value or a non-default one). */
struct bench_columns {
    bool ngl, n_batch, n_ubatch, type_k, type_v;
};

struct bench_printer {
    enum bench_format format;
    FILE *f;
    const struct bench_env *env;
    struct bench_columns cols;
    bool first; /* json: no separator before the first row */
};

/* Print the format's opening (md: the table's header; csv: the field names; json: "["; sql:
 * CREATE TABLE; nothing for jsonl and none), then one row per call as it arrives (each row is
 * flushed, so a long run can be followed), then the footer. p->f stays the caller's. */
void bench_printer_header(struct bench_printer *p);
void bench_printer_row(struct bench_printer *p, const struct bench_row *r);
/* notes: lines printed under a markdown table, before the build line (ignored by the other
 * formats, which must stay parseable); may be NULL. */
void bench_printer_footer(struct bench_printer *p, const char *notes);

/* The markdown legend: what ranks, GB/s, bw GB/s and eff mean (a few lines, no trailing blank). */
const char *bench_md_legend(void);

#endif
