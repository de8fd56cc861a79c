/* The machine from hwloc, copied into plain arrays (see topo.h). */
#include "topo.h"

#include <errno.h>
#include <hwloc.h>
#include <stdlib.h>
#include <string.h>

static const char *source_kind_name(enum topo_source_kind k) {
    switch (k) {
    case TOPO_SOURCE_MACHINE: return "this machine";
    case TOPO_SOURCE_XML: return "XML file";
    case TOPO_SOURCE_SYNTHETIC: return "synthetic topology";
    }
    return "?";
}

/* DRAM nodes get the cores; HBM, NVM or CXL nodes that share their locality hold memory only. */
static bool node_is_primary(hwloc_obj_t n) { return !n->subtype || strcmp(n->subtype, "DRAM") == 0; }

/* The name under which users know a GPU: the compute API's name first (cuda0), then the
 * management library's (nvml0, rsmi0), then the DRM card. */
static int osdev_name_rank(const char *name) {
    static const char *const order[] = {"cuda", "nvml", "rsmi", "opencl", "ze", "card", "renderD"};
    for (size_t i = 0; i < NM_ARRAY_LEN(order); i++)
        if (strncmp(name, order[i], strlen(order[i])) == 0) return (int)i;
    return (int)NM_ARRAY_LEN(order);
}

/* A PCI device counts as a GPU when it is a display/3D controller or a processing accelerator
 * from a GPU vendor, or when a compute API (CUDA, OpenCL, Level Zero) lists it. Display
 * controllers of server management chips (ASPEED, Matrox) are left out. */
static bool pci_is_gpu(hwloc_obj_t pci, bool *has_coproc) {
    *has_coproc = false;
    for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling)
        if (c->type == HWLOC_OBJ_OS_DEVICE && c->attr->osdev.type == HWLOC_OBJ_OSDEV_COPROC) *has_coproc = true;
    const unsigned cls = pci->attr->pcidev.class_id, vendor = pci->attr->pcidev.vendor_id;
    const bool gpu_class = (cls >> 8) == 0x03 || (cls >> 8) == 0x12;
    const bool gpu_vendor = vendor == 0x10de || vendor == 0x1002;
    return *has_coproc || (gpu_class && gpu_vendor);
}

static int node_index_by_os(const struct topo *t, unsigned os) {
    for (int i = 0; i < t->n_nodes; i++)
        if ((unsigned)t->nodes[i].os_index == os) return i;
    return -1;
}

static void find_gpus(hwloc_topology_t h, struct topo *t) {
    int cap = 0;
    for (hwloc_obj_t pci = NULL; (pci = hwloc_get_next_pcidev(h, pci));) {
        bool coproc;
        if (!pci_is_gpu(pci, &coproc)) continue;
        if (t->n_gpus == cap) {
            cap = cap ? 2 * cap : 4;
            t->gpus = realloc(t->gpus, (size_t)cap * sizeof *t->gpus);
            NM_ASSERT(t->gpus);
        }
        struct topo_gpu *g = &t->gpus[t->n_gpus++];
        memset(g, 0, sizeof *g);
        const struct hwloc_pcidev_attr_s *a = &pci->attr->pcidev;
        snprintf(g->pci, sizeof g->pci, "%04x:%02x:%02x.%01x", a->domain, a->bus, a->dev, a->func);
        g->vendor_id = a->vendor_id;
        g->device_id = a->device_id;
        g->cuda = a->vendor_id == 0x10de;
        int best = 1 << 30;
        for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling) {
            if (c->type != HWLOC_OBJ_OS_DEVICE || !c->name) continue;
            const int r = osdev_name_rank(c->name);
            if (r < best) {
                best = r;
                snprintf(g->name, sizeof g->name, "%s", c->name);
            }
        }
        /* The node: the memory local to the nearest CPU-side object. A GPU below a package
         * with sub-NUMA clustering is local to all its nodes; it is placed on the first DRAM
         * node among them that has cores. */
        g->node = -1;
        hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(h, pci);
        if (anc && anc->nodeset) {
            g->n_local_nodes = hwloc_bitmap_weight(anc->nodeset);
            unsigned os;
            hwloc_bitmap_foreach_begin(os, anc->nodeset) {
                const int i = node_index_by_os(t, os);
                if (i < 0) continue;
                if (g->node < 0) g->node = i;
                if (t->nodes[i].n_cores > 0 && t->nodes[g->node].n_cores == 0) g->node = i;
            }
            hwloc_bitmap_foreach_end();
        }
    }
}

static const char *const k_skipped_components[] = {"pci", "opencl", "gl"};

enum nm_status topo_load(const struct topo_source *src, struct topo **out, char *err, size_t errlen) {
    *out = NULL;
    hwloc_topology_t h;
    if (hwloc_topology_init(&h) != 0)
        return nm_errf(err, errlen, NM_ERR_IO, "hwloc_topology_init failed: %s", nm_strerror_errno());
    enum nm_status st = NM_OK;
    int *core_node = NULL;
    struct topo *t = calloc(1, sizeof *t);
    NM_ASSERT(t);

    if (src->kind == TOPO_SOURCE_XML) {
        snprintf(t->source, sizeof t->source, "XML file %s", src->arg);
        if (hwloc_topology_set_xml(h, src->arg) != 0) {
            st = nm_errf(err, errlen, NM_ERR_ARGS, "cannot read the hwloc XML topology %s: %s (write one with "
                         "`lstopo FILE.xml` on the machine to plan for)", src->arg, nm_strerror_errno());
            goto fail;
        }
    } else if (src->kind == TOPO_SOURCE_SYNTHETIC) {
        snprintf(t->source, sizeof t->source, "synthetic topology \"%s\"", src->arg);
        if (hwloc_topology_set_synthetic(h, src->arg) != 0) {
            st = nm_errf(err, errlen, NM_ERR_ARGS, "invalid hwloc synthetic topology \"%s\": expected levels like "
                         "\"pack:2 numa:4 core:8 pu:2\" (HWLOC_SYNTHETIC_VERBOSE=1 says why)", src->arg);
            goto fail;
        }
    } else {
        snprintf(t->source, sizeof t->source, "%s", source_kind_name(src->kind));
    }
    hwloc_topology_set_io_types_filter(h, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    /* PCI devices come from Linux's sysfs; the libpciaccess plugin would add nothing but a leak
     * (it loses ~1 KiB per load), and the OpenCL and GL plugins initialize drivers (seconds with
     * some OpenCL ICDs) to name devices we identify by PCI id. */
    if (src->kind == TOPO_SOURCE_MACHINE)
        for (size_t i = 0; i < NM_ARRAY_LEN(k_skipped_components); i++)
            hwloc_topology_set_components(h, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, k_skipped_components[i]);
    if (hwloc_topology_load(h) != 0) {
        st = nm_errf(err, errlen, src->kind == TOPO_SOURCE_MACHINE ? NM_ERR_IO : NM_ERR_ARGS,
                     "hwloc cannot load the topology of %s: %s", t->source, nm_strerror_errno());
        goto fail;
    }

    hwloc_obj_t pkg0 = hwloc_get_obj_by_type(h, HWLOC_OBJ_PACKAGE, 0);
    const char *model = pkg0 ? hwloc_obj_get_info_by_name(pkg0, "CPUModel") : NULL;
    snprintf(t->cpu_model, sizeof t->cpu_model, "%s", model ? model : "");
    t->n_packages = hwloc_get_nbobjs_by_type(h, HWLOC_OBJ_PACKAGE);

    /* Nodes, in logical order. */
    t->n_nodes = hwloc_get_nbobjs_by_type(h, HWLOC_OBJ_NUMANODE);
    if (t->n_nodes <= 0) {
        st = nm_errf(err, errlen, NM_ERR_UNSUPPORTED, "%s has no NUMA node", t->source);
        goto fail;
    }
    t->nodes = calloc((size_t)t->n_nodes, sizeof *t->nodes);
    NM_ASSERT(t->nodes);
    for (int i = 0; i < t->n_nodes; i++) {
        hwloc_obj_t n = hwloc_get_obj_by_type(h, HWLOC_OBJ_NUMANODE, (unsigned)i);
        struct topo_node *tn = &t->nodes[i];
        tn->os_index = (int)n->os_index;
        hwloc_obj_t p = hwloc_get_ancestor_obj_by_type(h, HWLOC_OBJ_PACKAGE, n);
        tn->package = p ? (int)p->logical_index : -1;
        tn->memory = n->attr->numanode.local_memory;
        tn->subtype = node_is_primary(n) ? NULL : n->subtype;
        t->memory += tn->memory;
    }

    /* Cores (PUs when the topology has no core level), each given to one node: the first
     * DRAM node whose CPUs contain it, else the first node that shares CPUs with it. */
    const hwloc_obj_type_t core_type =
        hwloc_get_nbobjs_by_type(h, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
    const int n_cores = hwloc_get_nbobjs_by_type(h, core_type);
    core_node = malloc((size_t)NM_MAX(n_cores, 1) * sizeof *core_node);
    NM_ASSERT(core_node);
    for (int c = 0; c < n_cores; c++) {
        hwloc_obj_t core = hwloc_get_obj_by_type(h, core_type, (unsigned)c);
        core_node[c] = -1;
        for (int pass = 0; pass < 2 && core_node[c] < 0; pass++)
            for (int i = 0; i < t->n_nodes; i++) {
                hwloc_obj_t n = hwloc_get_obj_by_type(h, HWLOC_OBJ_NUMANODE, (unsigned)i);
                if (pass == 0 ? node_is_primary(n) && hwloc_bitmap_isincluded(core->cpuset, n->cpuset)
                              : hwloc_bitmap_intersects(core->cpuset, n->cpuset)) {
                    core_node[c] = i;
                    break;
                }
            }
    }
    t->cores = calloc((size_t)NM_MAX(n_cores, 1), sizeof *t->cores);
    t->pus = calloc((size_t)NM_MAX(hwloc_get_nbobjs_by_type(h, HWLOC_OBJ_PU), 1), sizeof *t->pus);
    NM_ASSERT(t->cores && t->pus);
    for (int i = 0; i < t->n_nodes; i++) {
        struct topo_node *tn = &t->nodes[i];
        tn->core_begin = t->n_cores;
        for (int c = 0; c < n_cores; c++) {
            if (core_node[c] != i) continue;
            hwloc_obj_t core = hwloc_get_obj_by_type(h, core_type, (unsigned)c);
            struct topo_core *tc = &t->cores[t->n_cores++];
            tc->pu_begin = t->n_pus;
            unsigned pu;
            hwloc_bitmap_foreach_begin(pu, core->cpuset) { t->pus[t->n_pus++] = (int)pu; }
            hwloc_bitmap_foreach_end();
            tc->n_pus = t->n_pus - tc->pu_begin;
            tn->n_pus += tc->n_pus;
        }
        tn->n_cores = t->n_cores - tn->core_begin;
    }
    find_gpus(h, t);
    free(core_node);
    hwloc_topology_destroy(h);
    *out = t;
    return NM_OK;
fail:
    free(core_node);
    topo_free(t);
    hwloc_topology_destroy(h);
    return st;
}

void topo_free(struct topo *t) {
    if (!t) return;
    free(t->nodes);
    free(t->cores);
    free(t->pus);
    free(t->gpus);
    free(t);
}

int topo_cpu_nodes(const struct topo *t) {
    int n = 0;
    for (int i = 0; i < t->n_nodes; i++) n += t->nodes[i].n_cores > 0;
    return n;
}

int topo_cuda_gpu_node(const struct topo *t) {
    for (int i = 0; i < t->n_gpus; i++)
        if (t->gpus[i].cuda && t->gpus[i].node >= 0) return t->nodes[t->gpus[i].node].os_index;
    return -1;
}

int topo_cpu_nodes_in_package(const struct topo *t, int pkg) {
    int n = 0;
    for (int i = 0; i < t->n_nodes; i++) n += t->nodes[i].n_cores > 0 && t->nodes[i].package == pkg;
    return n;
}

static int cmp_int(const void *a, const void *b) {
    const int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

size_t topo_cpulist_format(const int *ids, int n, char *buf, size_t len) {
    int *s = malloc((size_t)NM_MAX(n, 1) * sizeof *s);
    NM_ASSERT(s);
    memcpy(s, ids, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_int);
    size_t used = 0;
    if (len) buf[0] = 0;
    for (int i = 0; i < n;) {
        int j = i;
        while (j + 1 < n && s[j + 1] <= s[j] + 1) j++;
        char item[32];
        int k = s[i] == s[j] ? snprintf(item, sizeof item, "%s%d", used ? "," : "", s[i])
                             : snprintf(item, sizeof item, "%s%d-%d", used ? "," : "", s[i], s[j]);
        if (used + (size_t)k < len) memcpy(buf + used, item, (size_t)k + 1);
        else if (len) buf[len - 1] = 0;
        used += (size_t)k;
        i = j + 1;
    }
    free(s);
    return used;
}

int topo_cpulist_parse(const char *list, int **ids) {
    int cap = 64, n = 0;
    int *v = malloc((size_t)cap * sizeof *v);
    NM_ASSERT(v);
    const char *p = list;
    while (*p) {
        char *end;
        errno = 0;
        long a = strtol(p, &end, 10), b;
        if (errno || end == p || a < 0 || a > 1 << 20) goto bad;
        b = a;
        if (*end == '-') {
            p = end + 1;
            b = strtol(p, &end, 10);
            if (errno || end == p || b < a || b > 1 << 20) goto bad;
        }
        for (long x = a; x <= b; x++) {
            if (n == cap) {
                cap *= 2;
                v = realloc(v, (size_t)cap * sizeof *v);
                NM_ASSERT(v);
            }
            v[n++] = (int)x;
        }
        if (*end == ',') end++;
        else if (*end) goto bad;
        p = end;
    }
    qsort(v, (size_t)n, sizeof *v, cmp_int);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (m == 0 || v[m - 1] != v[i]) v[m++] = v[i];
    *ids = v;
    return m;
bad:
    free(v);
    *ids = NULL;
    return -1;
}

int topo_cores_in_affinity(void) {
    hwloc_topology_t h;
    if (hwloc_topology_init(&h) != 0) return 0;
    int n = 0;
    if (hwloc_topology_load(h) == 0) {
        hwloc_bitmap_t set = hwloc_bitmap_alloc();
        if (set && hwloc_get_cpubind(h, set, HWLOC_CPUBIND_THREAD) == 0) {
            const hwloc_obj_type_t type =
                hwloc_get_nbobjs_by_type(h, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
            for (hwloc_obj_t c = NULL; (c = hwloc_get_next_obj_by_type(h, type, c));)
                n += hwloc_bitmap_intersects(c->cpuset, set);
        }
        hwloc_bitmap_free(set);
    }
    hwloc_topology_destroy(h);
    return n;
}

const char *topo_bytes_str(uint64_t bytes, char *buf, size_t len) {
    const double b = (double)bytes;
    if (bytes >= (1ull << 30)) snprintf(buf, len, "%.1f GiB", b / (1ull << 30));
    else if (bytes >= (1ull << 20)) snprintf(buf, len, "%.1f MiB", b / (1ull << 20));
    else if (bytes >= 1024) snprintf(buf, len, "%.1f KiB", b / 1024);
    else snprintf(buf, len, "%llu B", (unsigned long long)bytes);
    return buf;
}

/* CPUs of node i as a list. */
static void node_cpus(const struct topo *t, int i, char *buf, size_t len) {
    const struct topo_node *n = &t->nodes[i];
    if (n->n_cores == 0) {
        snprintf(buf, len, "-");
        return;
    }
    const struct topo_core *c0 = &t->cores[n->core_begin], *cl = &t->cores[n->core_begin + n->n_cores - 1];
    topo_cpulist_format(t->pus + c0->pu_begin, cl->pu_begin + cl->n_pus - c0->pu_begin, buf, len);
}

void topo_print(const struct topo *t, FILE *f) {
    char b1[32], cpus[4096];
    const int cpu_nodes = topo_cpu_nodes(t);
    fprintf(f, "machine: %s\n", t->source);
    if (t->cpu_model[0]) fprintf(f, "  cpu: %s\n", t->cpu_model);
    fprintf(f, "  %d package%s, %d NUMA node%s", t->n_packages, t->n_packages == 1 ? "" : "s", t->n_nodes,
            t->n_nodes == 1 ? "" : "s");
    if (cpu_nodes != t->n_nodes) fprintf(f, " (%d with cores, %d memory only)", cpu_nodes, t->n_nodes - cpu_nodes);
    fprintf(f, ", %d cores, %d CPUs, %s\n", t->n_cores, t->n_pus, topo_bytes_str(t->memory, b1, sizeof b1));
    if (t->n_packages > 0 && cpu_nodes > t->n_packages)
        fprintf(f, "  sub-NUMA clustering: %d NUMA nodes per package (each is planned as a node)\n",
                cpu_nodes / t->n_packages);
    fprintf(f, "  %-5s %-8s %6s %5s %11s  %s\n", "node", "package", "cores", "CPUs", "memory", "cpus");
    for (int i = 0; i < t->n_nodes; i++) {
        const struct topo_node *n = &t->nodes[i];
        char pkg[16];
        if (n->package >= 0) snprintf(pkg, sizeof pkg, "%d", n->package);
        else snprintf(pkg, sizeof pkg, "-");
        node_cpus(t, i, cpus, sizeof cpus);
        fprintf(f, "  %-5d %-8s %6d %5d %11s  %s%s%s\n", n->os_index, pkg, n->n_cores, n->n_pus,
                topo_bytes_str(n->memory, b1, sizeof b1), cpus, n->n_cores ? "" : "  memory only: ",
                n->n_cores ? "" : (n->subtype ? n->subtype : "no cores"));
    }
    if (t->n_gpus == 0) {
        fprintf(f, "  GPUs: none\n");
        return;
    }
    fprintf(f, "  %-5s %-8s %-13s %-10s %s\n", "GPU", "node", "pci", "id", "name");
    for (int i = 0; i < t->n_gpus; i++) {
        const struct topo_gpu *g = &t->gpus[i];
        char node[32], id[16];
        if (g->node < 0) snprintf(node, sizeof node, "?");
        else snprintf(node, sizeof node, "%d%s", t->nodes[g->node].os_index, g->n_local_nodes > 1 ? "*" : "");
        snprintf(id, sizeof id, "%04x:%04x", g->vendor_id, g->device_id);
        fprintf(f, "  %-5d %-8s %-13s %-10s %s%s\n", i, node, g->pci, id, g->name[0] ? g->name : "-",
                g->cuda ? "" : " (not CUDA: the GPU rank cannot use it)");
    }
    for (int i = 0; i < t->n_gpus; i++)
        if (t->gpus[i].n_local_nodes > 1) {
            fprintf(f, "  * attached to its package, local to %d nodes; the first is shown\n",
                    t->gpus[i].n_local_nodes);
            break;
        }
}
