/* The rank plan (see plan.h). */
#include "plan.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "model.h"
#include "shard.h"

const char *plan_layout_name(enum plan_layout l) {
    switch (l) {
    case PLAN_LAYOUT_MACHINE: return "one rank on the whole machine, in-process";
    case PLAN_LAYOUT_NODE: return "one per NUMA node";
    case PLAN_LAYOUT_NODE_SPLIT: return "several per NUMA node";
    case PLAN_LAYOUT_PACKAGE: return "one per package";
    }
    return "?";
}

/* Fill rank r's CPUs, cores and PUs from cores [c0, c1) of the topology. */
static void rank_set_cores(const struct topo *t, struct plan_rank *r, int c0, int c1) {
    int *ids = malloc((size_t)NM_MAX(t->n_pus, 1) * sizeof *ids), n = 0;
    NM_ASSERT(ids);
    for (int c = c0; c < c1; c++)
        for (int k = 0; k < t->cores[c].n_pus; k++) ids[n++] = t->pus[t->cores[c].pu_begin + k];
    const size_t len = topo_cpulist_format(ids, n, NULL, 0) + 1;
    r->cpus = malloc(len);
    NM_ASSERT(r->cpus);
    topo_cpulist_format(ids, n, r->cpus, len);
    r->n_cores += c1 - c0;
    r->n_pus += n;
    free(ids);
}

/* Append the CPUs of another core range to a rank that already has some (package ranks). */
static void rank_add_cores(const struct topo *t, struct plan_rank *r, int c0, int c1) {
    if (!r->cpus) {
        rank_set_cores(t, r, c0, c1);
        return;
    }
    int *old, n_old = topo_cpulist_parse(r->cpus, &old);
    NM_ASSERT(n_old >= 0);
    int *ids = malloc((size_t)(n_old + t->n_pus + 1) * sizeof *ids), n = n_old;
    NM_ASSERT(ids);
    memcpy(ids, old, (size_t)n_old * sizeof *ids);
    for (int c = c0; c < c1; c++)
        for (int k = 0; k < t->cores[c].n_pus; k++) ids[n++] = t->pus[t->cores[c].pu_begin + k];
    free(r->cpus);
    const size_t len = topo_cpulist_format(ids, n, NULL, 0) + 1;
    r->cpus = malloc(len);
    NM_ASSERT(r->cpus);
    topo_cpulist_format(ids, n, r->cpus, len);
    r->n_cores += c1 - c0;
    r->n_pus += n - n_old;
    free(ids);
    free(old);
}

static void nodes_str(const int *os, int n, char *buf, size_t len) { topo_cpulist_format(os, n, buf, len); }

/* "1 (in-process, the whole machine), 2 (one per package), 8 (one per NUMA node), 16, 24 ... 112
 * (several per node, a multiple of 8)": the rank counts plan_make accepts. */
static void valid_counts(const struct topo *t, int cpu_nodes, int min_cores, bool per_package, char *buf,
                         size_t len) {
    size_t n = (size_t)snprintf(buf, len, "1 (in-process, the whole machine)");
#define APPEND(...) (n += n < len ? (size_t)snprintf(buf + n, len - n, __VA_ARGS__) : 0)
    if (per_package) APPEND(", %d (one per package)", t->n_packages);
    if (cpu_nodes > 1) APPEND(", %d (one per NUMA node)", cpu_nodes);
    if (min_cores == 2) APPEND(", %d (2 per node)", 2 * cpu_nodes);
    else if (min_cores > 2)
        APPEND(", %d, %d ... %d (several per node, a multiple of %d)", 2 * cpu_nodes, 3 * cpu_nodes,
               min_cores * cpu_nodes, cpu_nodes);
#undef APPEND
}

static void note_add(struct plan *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note_add(struct plan *p, const char *fmt, ...) {
    size_t used = strlen(p->note);
    if (used && used + 2 < sizeof p->note) {
        strcat(p->note, "\n");
        used++;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->note + used, sizeof p->note - used, fmt, ap);
    va_end(ap);
}

enum nm_status plan_make(const struct topo *t, const struct plan_request *req, struct plan **out, char *err,
                         size_t errlen) {
    *out = NULL;
    const int cpu_nodes = topo_cpu_nodes(t);
    if (cpu_nodes == 0 || t->n_cores == 0)
        return nm_errf(err, errlen, NM_ERR_UNSUPPORTED, "%s has no cores", t->source);
    if (req->n_ranks < 0)
        return nm_errf(err, errlen, NM_ERR_ARGS, "--ranks %d: expected auto or a positive count", req->n_ranks);
    if (req->n_threads < 0)
        return nm_errf(err, errlen, NM_ERR_ARGS, "-t %d: expected a positive count", req->n_threads);
    int min_cores = 1 << 30, max_cores = 0;
    for (int i = 0; i < t->n_nodes; i++)
        if (t->nodes[i].n_cores > 0) {
            min_cores = NM_MIN(min_cores, t->nodes[i].n_cores);
            max_cores = NM_MAX(max_cores, t->nodes[i].n_cores);
        }

    const int n = req->n_ranks ? req->n_ranks : cpu_nodes;
    struct plan *p = calloc(1, sizeof *p);
    NM_ASSERT(p);
    p->n_ranks = n;
    p->ranks_per_node = 1;
    p->nodes_per_rank = 1;
    p->memory_only_nodes = cpu_nodes < t->n_nodes;
    bool packages_even = t->n_packages > 1 && cpu_nodes > t->n_packages && cpu_nodes % t->n_packages == 0;
    for (int k = 0; packages_even && k < t->n_packages; k++)
        packages_even = topo_cpu_nodes_in_package(t, k) == cpu_nodes / t->n_packages;
    if (n == 1) {
        p->layout = PLAN_LAYOUT_MACHINE;
        p->nodes_per_rank = t->n_nodes;
    } else if (n == cpu_nodes) {
        p->layout = PLAN_LAYOUT_NODE;
    } else if (n > cpu_nodes && n % cpu_nodes == 0 && n / cpu_nodes <= min_cores) {
        p->layout = PLAN_LAYOUT_NODE_SPLIT;
        p->ranks_per_node = n / cpu_nodes;
    } else if (n == t->n_packages && packages_even) {
        p->layout = PLAN_LAYOUT_PACKAGE;
        p->nodes_per_rank = cpu_nodes / t->n_packages;
    } else {
        char valid[256], cores[32];
        valid_counts(t, cpu_nodes, min_cores, packages_even, valid, sizeof valid);
        if (min_cores == max_cores) snprintf(cores, sizeof cores, "%d", min_cores);
        else snprintf(cores, sizeof cores, "%d to %d", min_cores, max_cores);
        free(p);
        return nm_errf(err, errlen, NM_ERR_ARGS,
                       "--ranks %d does not fit %s (%d package%s, %d NUMA node%s with cores, %s cores per node): "
                       "a rank owns whole NUMA nodes or an equal share of one node's cores; counts that work: %s",
                       n, t->source, t->n_packages, t->n_packages == 1 ? "" : "s", cpu_nodes, cpu_nodes == 1 ? "" : "s",
                       cores, valid);
    }

    p->ranks = calloc((size_t)n, sizeof *p->ranks);
    NM_ASSERT(p->ranks);
    int r = 0;
    if (p->layout == PLAN_LAYOUT_MACHINE) {
        struct plan_rank *pr = &p->ranks[0];
        pr->node = -1;
        pr->package = -1;
        int *os = malloc((size_t)t->n_nodes * sizeof *os);
        NM_ASSERT(os);
        for (int i = 0; i < t->n_nodes; i++) os[i] = t->nodes[i].os_index;
        nodes_str(os, t->n_nodes, pr->nodes, sizeof pr->nodes);
        free(os);
        rank_set_cores(t, pr, 0, t->n_cores);
        pr->mem_bytes = t->memory;
        r = 1;
    } else if (p->layout == PLAN_LAYOUT_PACKAGE) {
        for (int k = 0; k < t->n_packages; k++) {
            struct plan_rank *pr = &p->ranks[r++];
            int os[256], n_os = 0;
            pr->node = -1;
            pr->package = k;
            for (int i = 0; i < t->n_nodes; i++) {
                const struct topo_node *tn = &t->nodes[i];
                if (tn->package != k || tn->n_cores == 0) continue;
                if (pr->node < 0) pr->node = tn->os_index;
                if (n_os < (int)NM_ARRAY_LEN(os)) os[n_os++] = tn->os_index;
                rank_add_cores(t, pr, tn->core_begin, tn->core_begin + tn->n_cores);
                pr->mem_bytes += tn->memory;
            }
            nodes_str(os, n_os, pr->nodes, sizeof pr->nodes);
        }
    } else {
        const int k = p->ranks_per_node;
        const int per = min_cores / k;
        for (int i = 0; i < t->n_nodes; i++) {
            const struct topo_node *tn = &t->nodes[i];
            if (tn->n_cores == 0) continue;
            /* Open MPI's ppr:K:numa:pe=C with --bind-to core hands each rank the next C cores of
             * its node in logical order; NODE gives the rank the whole node. */
            for (int j = 0; j < k; j++) {
                struct plan_rank *pr = &p->ranks[r++];
                pr->node = tn->os_index;
                pr->package = tn->package;
                snprintf(pr->nodes, sizeof pr->nodes, "%d", tn->os_index);
                if (k == 1) rank_set_cores(t, pr, tn->core_begin, tn->core_begin + tn->n_cores);
                else rank_set_cores(t, pr, tn->core_begin + j * per, tn->core_begin + (j + 1) * per);
                pr->mem_bytes = tn->memory / (uint64_t)k;
            }
        }
        if (k > 1 && min_cores % k)
            note_add(p, "%d ranks per node with %d cores each leave %d core%s of every node idle", k, per,
                     min_cores - k * per, min_cores - k * per == 1 ? "" : "s");
    }
    NM_ASSERT(r == n);

    int rank_min = 1 << 30, rank_max = 0;
    for (int i = 0; i < n; i++) {
        p->ranks[i].rank = i;
        rank_min = NM_MIN(rank_min, p->ranks[i].n_cores);
        rank_max = NM_MAX(rank_max, p->ranks[i].n_cores);
    }
    p->cores_per_rank = rank_min;
    p->threads_from_user = req->n_threads > 0;
    p->n_threads = p->threads_from_user ? req->n_threads : rank_min;
    for (int i = 0; i < n; i++) p->ranks[i].n_threads = p->n_threads;
    if (!p->threads_from_user && rank_max != rank_min)
        note_add(p, "ranks have %d to %d cores: every rank runs %d threads (-t sets another count)", rank_min, rank_max,
                 rank_min);
    if (p->threads_from_user && p->n_threads > rank_min)
        note_add(p, "-t %d is more than the %d core%s of the smallest rank: threads will share cores", p->n_threads,
                 rank_min, rank_min == 1 ? "" : "s");
    if (p->memory_only_nodes && p->layout != PLAN_LAYOUT_MACHINE)
        note_add(p, "%d NUMA node%s hold%s memory only (HBM, CXL or NVM): no rank is placed on them",
                 t->n_nodes - cpu_nodes, t->n_nodes - cpu_nodes == 1 ? "" : "s",
                 t->n_nodes - cpu_nodes == 1 ? "s" : "");

    /* GPUs: the CPU rank that owns each GPU's node (where a GPU rank would take cores). */
    p->n_gpus = t->n_gpus;
    p->gpus = calloc((size_t)NM_MAX(t->n_gpus, 1), sizeof *p->gpus);
    NM_ASSERT(p->gpus);
    for (int g = 0; g < t->n_gpus; g++) {
        struct plan_gpu *pg = &p->gpus[g];
        pg->gpu = g;
        pg->node = t->gpus[g].node >= 0 ? t->nodes[t->gpus[g].node].os_index : -1;
        pg->near_rank = -1;
        const int pkg = t->gpus[g].node >= 0 ? t->nodes[t->gpus[g].node].package : -1;
        for (int i = 0; i < n && pg->near_rank < 0 && pg->node >= 0; i++) {
            const struct plan_rank *pr = &p->ranks[i];
            if (p->layout == PLAN_LAYOUT_MACHINE || pr->node == pg->node ||
                (p->layout == PLAN_LAYOUT_PACKAGE && pr->package == pkg))
                pg->near_rank = i;
        }
    }
    *out = p;
    return NM_OK;
}

void plan_free(struct plan *p) {
    if (!p) return;
    for (int i = 0; i < p->n_ranks; i++) free(p->ranks[i].cpus);
    free(p->ranks);
    free(p->gpus);
    free(p);
}

void plan_set_weight_bytes(struct plan *p, int rank, uint64_t bytes) {
    NM_ASSERT(rank >= 0 && rank < p->n_ranks);
    p->ranks[rank].weight_bytes = bytes;
    p->ranks[rank].fits = bytes <= p->ranks[rank].mem_bytes;
    p->has_weights = true;
}

enum nm_status plan_add_model(struct plan *p, const char *name, const struct gguf_file *f,
                              const struct model_config *c, char *err, size_t errlen) {
    for (int r = 0; r < p->n_ranks; r++) {
        uint64_t b;
        enum nm_status st = shard_weight_bytes(f, c, r, p->n_ranks, &b, err, errlen);
        if (st) return st;
        plan_set_weight_bytes(p, r, b);
    }
    snprintf(p->model, sizeof p->model, "%s", name ? name : "");
    return NM_OK;
}

enum nm_status plan_check_memory(const struct plan *p, const struct topo *t, char *err, size_t errlen) {
    if (!p->has_weights) return NM_OK;
    int bad = -1, n_bad = 0;
    for (int i = 0; i < p->n_ranks; i++)
        if (!p->ranks[i].fits) {
            if (bad < 0) bad = i;
            n_bad++;
        }
    if (bad < 0) return NM_OK;
    const struct plan_rank *r = &p->ranks[bad];
    char need[32], have[32], where[192], others[64] = "", more[160] = "";
    topo_bytes_str(r->weight_bytes, need, sizeof need);
    topo_bytes_str(r->mem_bytes, have, sizeof have);
    if (p->layout == PLAN_LAYOUT_MACHINE) snprintf(where, sizeof where, "the machine has %s in all", have);
    else if (p->layout == PLAN_LAYOUT_PACKAGE)
        snprintf(where, sizeof where, "package %d (NUMA nodes %s) has %s", r->package, r->nodes, have);
    else if (p->ranks_per_node > 1)
        snprintf(where, sizeof where, "its share of NUMA node %d (%d ranks share it) is %s", r->node,
                 p->ranks_per_node, have);
    else snprintf(where, sizeof where, "NUMA node %d has %s", r->node, have);
    if (n_bad > 1) snprintf(others, sizeof others, " (%d of the %d ranks do not fit)", n_bad, p->n_ranks);
    const int cpu_nodes = topo_cpu_nodes(t);
    if (p->layout == PLAN_LAYOUT_MACHINE && cpu_nodes > 1)
        snprintf(more, sizeof more, "; or run one rank per NUMA node (--ranks auto, %d ranks)", cpu_nodes);
    return nm_errf(err, errlen, NM_ERR_NOMEM,
                   "rank %d does not fit: its weights%s%s need %s but %s%s. Each rank keeps its slice of the "
                   "weights in its own node's memory: use a smaller quantization of the model (Q4_0 or Q4_K "
                   "instead of Q8_0 or F16) or a machine with more memory per NUMA node%s",
                   bad, p->model[0] ? " of " : "", p->model, need, where, others, more);
}

void plan_print(const struct plan *p, const struct topo *t, FILE *f) {
    char b1[32], b2[32];
    if (p->layout == PLAN_LAYOUT_MACHINE)
        fprintf(f, "plan: 1 rank on the whole machine, in-process without mpirun, %d thread%s (-t %d)\n",
                p->n_threads, p->n_threads == 1 ? "" : "s", p->n_threads);
    else
        fprintf(f, "plan: %d ranks, %s, %d thread%s each (-t %d)\n", p->n_ranks, plan_layout_name(p->layout),
                p->n_threads, p->n_threads == 1 ? "" : "s", p->n_threads);
    if (p->layout == PLAN_LAYOUT_NODE_SPLIT)
        fprintf(f, "  %d ranks per NUMA node, %d core%s each\n", p->ranks_per_node, p->cores_per_rank,
                p->cores_per_rank == 1 ? "" : "s");
    if (p->has_weights)
        fprintf(f, "  weights%s%s, bytes per rank against its memory:\n", p->model[0] ? " of " : "", p->model);
    else fprintf(f, "  no model given: -m MODEL.gguf adds the bytes of weights per rank and checks they fit\n");
    fprintf(f, "  %-5s %-6s %5s %7s  %-20s %11s %11s  %s\n", "rank", "node", "cores", "threads", "cpus", "weights",
            "memory", "fits");
    for (int i = 0; i < p->n_ranks; i++) {
        const struct plan_rank *r = &p->ranks[i];
        const char *fits = "-";
        if (p->has_weights) {
            fits = !r->fits ? "NO" : r->weight_bytes > r->mem_bytes / 10 * 9 ? "tight" : "yes";
        }
        fprintf(f, "  %-5d %-6s %5d %7d  %-20s %11s %11s  %s\n", r->rank, r->nodes, r->n_cores, r->n_threads, r->cpus,
                p->has_weights ? topo_bytes_str(r->weight_bytes, b1, sizeof b1) : "-",
                topo_bytes_str(r->mem_bytes, b2, sizeof b2), fits);
    }
    if (p->has_weights)
        fprintf(f, "  (weights only: the KV cache and activations come on top; \"tight\" is above 90%%)\n");
    for (int g = 0; g < p->n_gpus; g++) {
        const struct plan_gpu *pg = &p->gpus[g];
        const struct topo_gpu *tg = &t->gpus[pg->gpu];
        if (pg->node < 0) {
            fprintf(f, "  GPU %d (%s): its NUMA node is unknown\n", g, tg->name[0] ? tg->name : tg->pci);
            continue;
        }
        fprintf(f, "  GPU %d (%s) is on node %d, next to rank %d: with -ngl the GPU rank runs on cores of node %d as a "
                   "second app context\n",
                g, tg->name[0] ? tg->name : tg->pci, pg->node, pg->near_rank, pg->node);
    }
    if (p->note[0]) {
        const char *s = p->note;
        while (*s) {
            const char *e = strchr(s, '\n');
            const int len = e ? (int)(e - s) : (int)strlen(s);
            fprintf(f, "  note: %.*s\n", len, s);
            s += len + (e ? 1 : 0);
        }
    }
}
