/* exchange: (a) one-way core-to-core latency (ping-pong / 2) for pairs or a whole matrix;
 * (b) one all-to-all exchange of a V-byte vector among N pinned participants. */
#include "sl.h"

#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[]
    = "usage: exchange --mode M --cpus LIST [options]\n"
      "  --mode M        pingpong: one-way latency = round trip / 2 on two padded flag lines,\n"
      "                            for --pairs or every pair of --cpus;\n"
      "                  diss:     each participant writes its slice of a shared vector, a\n"
      "                            dissemination barrier, then everyone reads the whole vector;\n"
      "                  fid:      flag-in-data: each 64 B line carries 56 B payload + an 8 B "
      "step\n"
      "                            tag; readers poll every line's tag, no barrier;\n"
      "                  fid-cld:  fid, and each written line is CLDEMOTEd after its tag store\n"
      "                            (a NOP where CPUID lacks CLDEMOTE; meta says which)\n"
      "                  rep:      per-NUMA-node replicas written with non-temporal stores, a\n"
      "                            dissemination barrier, readers read their node's replica\n"
      "                            (64-byte stores with AVX-512, 2 x 32 bytes with AVX2;\n"
      "                            meta nt_store says which)\n"
      "                  hier:     shared vector, hierarchical barrier: gather to each group's\n"
      "                            leader, dissemination among leaders, release per group\n"
      "                  hier-umwait: hier, waiting with UMONITOR/UMWAIT (needs waitpkg)\n"
      "  --cpus LIST     participants in kernel cpulist syntax (0-3,8)\n"
      "  --pairs LIST    pingpong only: A:B,C:D (default: every pair of --cpus)\n"
      "  --groups G      hier modes: cpulists separated by '/', e.g. 0-31/32-63 (default: the\n"
      "                  NUMA node of each CPU from sysfs); the first CPU of a group leads it\n"
      "  --bytes V       vector bytes for diss/fid/rep (default 2560)\n"
      "  --iters N       timed samples (default 20000 exchanges; 300 pingpong samples)\n"
      "  --warmup N      untimed first (default 2000 exchanges; 10 pingpong samples)\n"
      "  --roundtrips K  pingpong round trips per sample (default 100)\n"
      "  --timeout S     exit 1 if the run takes longer (default 600; 0 = none)\n"
      "  --help          this text\n"
      "Output: JSON lines; meta, then latency_p50, latency_p99, latency_min in us with dims mode,\n"
      "participants, bytes (and src, dst for pingpong). An exchange's time is the step from the\n"
      "last participant finishing one exchange to the last finishing the next. Every reader "
      "checks\n"
      "the vector it read. Exit: 0 ok, 1 check failed, 2 usage error, 3 unsupported here.\n";

enum { M_PINGPONG, M_DISS, M_FID, M_REP, M_FID_CLD, M_HIER, M_HIER_UMWAIT };
static const char* const mode_names[]
    = { "pingpong", "diss", "fid", "rep", "fid-cld", "hier", "hier-umwait", NULL };

typedef struct {
    _Alignas(SL_PAD) volatile uint64_t v;
} padded;

static inline bool is_fid(int mode) { return mode == M_FID || mode == M_FID_CLD; }
static inline bool is_hier(int mode) { return mode == M_HIER || mode == M_HIER_UMWAIT; }

static struct {
    int mode, iters, warmup, roundtrips, n, rounds;
    size_t bytes, lines;
    sl_cpus cpus;
    /* all-to-all */
    uint64_t* vec[2]; /* diss/fid: shared vector per parity */
    uint64_t** rep[2]; /* rep: replica per node per parity */
    bool nt64; /* rep: 64-byte AVX-512 non-temporal stores (else 2 x 32-byte AVX2) */
    int nnodes, node_of[SL_MAX_CPUS];
    padded* flags; /* dissemination: rounds x n */
    /* hier: groups of participants; group_of[i], leader = first member, members per group */
    int ngroups, group_of[SL_MAX_CPUS], group_size[SL_MAX_CPUS], leader_of_group[SL_MAX_CPUS];
    int lrounds; /* dissemination rounds among the leaders */
    padded* arrive; /* per participant: episode it arrived at (its leader gathers these) */
    padded* release; /* per group: episode its leader released */
    padded* lflags; /* leaders' dissemination: lrounds x ngroups */
    uint64_t** ends; /* per participant, per iteration */
    int bad; /* a reader saw a wrong vector */
    /* pingpong */
    padded ping, pong;
    int pp_cpu[2];
    double* pp_samples;
    pthread_barrier_t phase;
} g;

/* ---------------- pingpong ---------------- */

static void* pp_main(void* arg)
{
    const int side = (int)(intptr_t)arg;
    sl_pin_self(g.pp_cpu[side]);
    pthread_barrier_wait(&g.phase);
    const int total = g.warmup + g.iters;
    uint64_t seq = 0;
    const double ghz = sl_tsc_ghz();
    for (int s = 0; s < total; s++) {
        const uint64_t t0 = sl_rdtsc();
        for (int k = 0; k < g.roundtrips; k++) {
            seq++;
            if (side == 0) {
                __atomic_store_n(&g.ping.v, seq, __ATOMIC_RELEASE);
                while (__atomic_load_n(&g.pong.v, __ATOMIC_ACQUIRE) != seq)
                    _mm_pause();
            } else {
                while (__atomic_load_n(&g.ping.v, __ATOMIC_ACQUIRE) != seq)
                    _mm_pause();
                __atomic_store_n(&g.pong.v, seq, __ATOMIC_RELEASE);
            }
        }
        const uint64_t t1 = sl_rdtsc();
        if (side == 0 && s >= g.warmup)
            g.pp_samples[s - g.warmup] = (double)(t1 - t0) / ghz / g.roundtrips / 2.0 * 1e-3;
    }
    return NULL;
}

static void emit(const char* name, double v, int src, int dst)
{
    sl_metric_begin(name, v, "us");
    sl_json_str("mode", mode_names[g.mode]);
    sl_json_int("participants", g.mode == M_PINGPONG ? 2 : g.n);
    sl_json_int("bytes", g.mode == M_PINGPONG ? SL_CACHE_LINE : (long long)g.bytes);
    if (src >= 0) {
        sl_json_int("src", src);
        sl_json_int("dst", dst);
    }
    if (is_hier(g.mode))
        sl_json_int("groups", g.ngroups);
    if (g.mode == M_FID_CLD)
        sl_json_bool("cldemote", sl_cpu_features()->cldemote);
    sl_json_end();
}

static void run_pair(int a, int b)
{
    g.pp_cpu[0] = a;
    g.pp_cpu[1] = b;
    g.ping.v = g.pong.v = 0;
    pthread_barrier_init(&g.phase, NULL, 2);
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        if (pthread_create(&t[i], NULL, pp_main, (void*)(intptr_t)i))
            sl_fatal("pthread_create failed");
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&g.phase);
    const double min = sl_quantile(g.pp_samples, g.iters, 0.0);
    emit("latency_p50", sl_quantile(g.pp_samples, g.iters, 0.5), a, b);
    emit("latency_p99", sl_quantile(g.pp_samples, g.iters, 0.99), a, b);
    emit("latency_min", min, a, b);
}

/* ---------------- all-to-all ---------------- */

static inline uint64_t word_value(uint64_t it, uint64_t w) { return it * 0x100000001ull + w; }

static void diss_barrier(int me, uint64_t episode)
{
    for (int r = 0; r < g.rounds; r++) {
        const int to = (me + (1 << r)) % g.n;
        __atomic_store_n(&g.flags[r * g.n + to].v, episode, __ATOMIC_RELEASE);
        while (__atomic_load_n(&g.flags[r * g.n + me].v, __ATOMIC_ACQUIRE) < episode)
            _mm_pause();
    }
}

/* CLDEMOTE: hint to move the line from this core's caches to a shared level. The encoding is a
 * NOP on CPUs without it (architectural hint space), so the mode runs everywhere. */
static inline void cldemote(const void* p)
{
    __asm__ volatile("cldemote %0" ::"m"(*(const char*)p));
}

/* wait until *p >= want: pause-spin, or UMONITOR/UMWAIT (C0.1, the faster wake-up) with a
 * deadline so a missed wake-up costs at most ~10k TSC cycles */
__attribute__((target("waitpkg"))) static void wait_umwait(volatile uint64_t* p, uint64_t want)
{
    while (__atomic_load_n(p, __ATOMIC_ACQUIRE) < want) {
        _umonitor((void*)p);
        if (__atomic_load_n(p, __ATOMIC_ACQUIRE) >= want)
            break;
        _umwait(1, sl_rdtsc() + 10000);
    }
}

static inline void wait_at_least(volatile uint64_t* p, uint64_t want)
{
    if (g.mode == M_HIER_UMWAIT) {
        wait_umwait(p, want);
        return;
    }
    while (__atomic_load_n(p, __ATOMIC_ACQUIRE) < want)
        _mm_pause();
}

/* gather to the group leader, dissemination among leaders, release to the group */
static void hier_barrier(int me, uint64_t episode)
{
    const int grp = g.group_of[me];
    if (g.leader_of_group[grp] != me) {
        __atomic_store_n(&g.arrive[me].v, episode, __ATOMIC_RELEASE);
        wait_at_least(&g.release[grp].v, episode);
        return;
    }
    for (int i = 0; i < g.n; i++)
        if (i != me && g.group_of[i] == grp)
            wait_at_least(&g.arrive[i].v, episode);
    for (int r = 0; r < g.lrounds; r++) {
        const int to = (grp + (1 << r)) % g.ngroups;
        __atomic_store_n(&g.lflags[r * g.ngroups + to].v, episode, __ATOMIC_RELEASE);
        wait_at_least(&g.lflags[r * g.ngroups + grp].v, episode);
    }
    __atomic_store_n(&g.release[grp].v, episode, __ATOMIC_RELEASE);
}

/* rep mode: my slice into one replica with non-temporal stores (sfence by the caller) */
SL_TARGET_AVX512 static void write_slice_nt(uint64_t* v, size_t lo, size_t hi, uint64_t it)
{
    for (size_t l = lo; l < hi; l++) {
        const __m512i val = _mm512_add_epi64(_mm512_set1_epi64((long long)word_value(it, l * 8)),
            _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0));
        _mm512_stream_si512((void*)(v + l * 8), val);
    }
}

/* the same slice with two 32-byte non-temporal stores per line, where AVX-512 is missing
 * (write-combining still fills the whole line before it leaves the core; meta says which) */
SL_TARGET_AVX2 static void write_slice_nt32(uint64_t* v, size_t lo, size_t hi, uint64_t it)
{
    for (size_t l = lo; l < hi; l++) {
        const __m256i base = _mm256_set1_epi64x((long long)word_value(it, l * 8));
        _mm256_stream_si256(
            (__m256i*)(void*)(v + l * 8), _mm256_add_epi64(base, _mm256_set_epi64x(3, 2, 1, 0)));
        _mm256_stream_si256((__m256i*)(void*)(v + l * 8 + 4),
            _mm256_add_epi64(base, _mm256_set_epi64x(7, 6, 5, 4)));
    }
}

static void* a2a_main(void* arg)
{
    const int me = (int)(intptr_t)arg;
    sl_pin_self(g.cpus.cpu[me]);
    const size_t lo = g.lines * me / g.n, hi = g.lines * (me + 1) / g.n;
    const int node = g.node_of[me];
    /* payload words per line: 8, or 7 + tag in fid mode */
    const size_t pw = is_fid(g.mode) ? 7 : 8;
    const size_t words = g.lines * pw;
    const uint64_t base_sum = words * (words - 1) / 2;
    pthread_barrier_wait(&g.phase);
    const int total = g.warmup + g.iters;
    for (int s = 0; s < total; s++) {
        const uint64_t it = (uint64_t)s + 1;
        const int par = (int)(it & 1);
        /* write my slice */
        if (g.mode == M_REP) {
            for (int nd = 0; nd < g.nnodes; nd++) {
                if (g.nt64)
                    write_slice_nt(g.rep[par][nd], lo, hi, it);
                else
                    write_slice_nt32(g.rep[par][nd], lo, hi, it);
            }
            _mm_sfence();
        } else {
            uint64_t* v = g.vec[par];
            for (size_t l = lo; l < hi; l++) {
                for (size_t w = 0; w < pw; w++)
                    v[l * 8 + w] = word_value(it, l * pw + w);
                if (is_fid(g.mode))
                    __atomic_store_n(&v[l * 8 + 7], it, __ATOMIC_RELEASE);
                if (g.mode == M_FID_CLD)
                    cldemote(&v[l * 8]);
            }
        }
        if (is_hier(g.mode))
            hier_barrier(me, it);
        else if (!is_fid(g.mode))
            diss_barrier(me, it);
        /* read the whole vector and check it */
        const uint64_t* v = g.mode == M_REP ? g.rep[par][node] : g.vec[par];
        uint64_t sum = 0;
        for (size_t l = 0; l < g.lines; l++) {
            if (is_fid(g.mode))
                while (__atomic_load_n(&v[l * 8 + 7], __ATOMIC_ACQUIRE) != it)
                    _mm_pause();
            for (size_t w = 0; w < pw; w++)
                sum += v[l * 8 + w];
        }
        g.ends[me][s] = sl_rdtsc();
        if (sum != words * it * 0x100000001ull + base_sum)
            __atomic_store_n(&g.bad, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

static void* alloc_lines(size_t lines)
{
    void* p = aligned_alloc(4096, (lines * 64 + 4095) / 4096 * 4096);
    memset(p, 0, lines * 64);
    return p;
}

static const char* groups_arg;

/* groups from --groups ("0-31/32-63", each a cpulist of participants), else one per NUMA node
 * (node_of); the first participant of a group in --cpus order leads it */
static void setup_groups(void)
{
    for (int i = 0; i < g.n; i++)
        g.group_of[i] = -1;
    g.ngroups = 0;
    if (groups_arg) {
        char* copy = strdup(groups_arg);
        for (char *save = NULL, *tok = strtok_r(copy, "/", &save); tok;
             tok = strtok_r(NULL, "/", &save)) {
            sl_cpus part;
            sl_parse_cpus("--groups", tok, &part);
            for (int k = 0; k < part.n; k++) {
                int idx = -1;
                for (int i = 0; i < g.n; i++)
                    idx = g.cpus.cpu[i] == part.cpu[k] ? i : idx;
                if (idx < 0)
                    sl_usage_error(
                        "--groups '%s': cpu %d is not in --cpus", groups_arg, part.cpu[k]);
                if (g.group_of[idx] >= 0)
                    sl_usage_error(
                        "--groups '%s': cpu %d is in two groups", groups_arg, part.cpu[k]);
                g.group_of[idx] = g.ngroups;
            }
            g.ngroups++;
        }
        free(copy);
        for (int i = 0; i < g.n; i++)
            if (g.group_of[i] < 0)
                sl_usage_error(
                    "--groups '%s': cpu %d of --cpus is in no group", groups_arg, g.cpus.cpu[i]);
    } else {
        for (int i = 0; i < g.n; i++)
            g.group_of[i] = g.node_of[i];
        g.ngroups = g.nnodes;
    }
    for (int grp = 0; grp < g.ngroups; grp++) {
        g.group_size[grp] = 0;
        g.leader_of_group[grp] = -1;
    }
    for (int i = 0; i < g.n; i++) {
        const int grp = g.group_of[i];
        if (g.leader_of_group[grp] < 0)
            g.leader_of_group[grp] = i;
        g.group_size[grp]++;
    }
    g.lrounds = 0;
    while ((1 << g.lrounds) < g.ngroups)
        g.lrounds++;
    g.arrive = aligned_alloc(SL_PAD, sizeof(padded) * (size_t)g.n);
    g.release = aligned_alloc(SL_PAD, sizeof(padded) * (size_t)g.ngroups);
    g.lflags = aligned_alloc(SL_PAD, sizeof(padded) * (size_t)(g.lrounds + 1) * g.ngroups);
    memset(g.arrive, 0, sizeof(padded) * (size_t)g.n);
    memset(g.release, 0, sizeof(padded) * (size_t)g.ngroups);
    memset(g.lflags, 0, sizeof(padded) * (size_t)(g.lrounds + 1) * g.ngroups);
}

/* participants' NUMA nodes (rep replicas, hier's default groups) and the hier groups; before
 * any output, so a bad --groups is a usage error with nothing on stdout */
static void setup_nodes(void)
{
    g.n = g.cpus.n;
    int node_ids[SL_MAX_CPUS];
    g.nnodes = 0;
    for (int i = 0; i < g.n; i++) {
        const int node = sl_cpu_node(g.cpus.cpu[i]);
        int idx = -1;
        for (int j = 0; j < g.nnodes; j++)
            idx = node_ids[j] == node ? j : idx;
        if (idx < 0) {
            idx = g.nnodes;
            node_ids[g.nnodes++] = node;
        }
        g.node_of[i] = idx;
    }
    if (is_hier(g.mode))
        setup_groups();
}

static void run_all_to_all(void)
{
    g.n = g.cpus.n;
    g.rounds = 0;
    while ((1 << g.rounds) < g.n)
        g.rounds++;
    g.lines = is_fid(g.mode) ? (g.bytes + 55) / 56 : (g.bytes + 63) / 64;
    g.flags = aligned_alloc(SL_PAD, sizeof(padded) * (size_t)(g.rounds + 1) * g.n);
    memset(g.flags, 0, sizeof(padded) * (size_t)(g.rounds + 1) * g.n);
    for (int par = 0; par < 2; par++) {
        g.vec[par] = alloc_lines(g.lines);
        g.rep[par] = calloc((size_t)g.nnodes, sizeof(uint64_t*));
        for (int nd = 0; nd < g.nnodes; nd++)
            g.rep[par][nd] = alloc_lines(g.lines);
    }
    const int total = g.warmup + g.iters;
    g.ends = calloc((size_t)g.n, sizeof(uint64_t*));
    for (int i = 0; i < g.n; i++)
        g.ends[i] = calloc((size_t)total, sizeof(uint64_t));
    pthread_barrier_init(&g.phase, NULL, (unsigned)g.n);
    pthread_t* t = calloc((size_t)g.n, sizeof(pthread_t));
    for (int i = 0; i < g.n; i++)
        if (pthread_create(&t[i], NULL, a2a_main, (void*)(intptr_t)i))
            sl_fatal("pthread_create failed");
    for (int i = 0; i < g.n; i++)
        pthread_join(t[i], NULL);
    if (g.bad)
        sl_check_failed(
            "exchange %s: a participant read a vector with a wrong checksum", mode_names[g.mode]);
    const double ghz = sl_tsc_ghz();
    double* us = calloc((size_t)g.iters, sizeof(double));
    uint64_t prev = 0;
    for (int s = g.warmup - 1; s < total; s++) {
        uint64_t last = 0;
        for (int i = 0; i < g.n; i++)
            last = g.ends[i][s] > last ? g.ends[i][s] : last;
        if (s >= g.warmup)
            us[s - g.warmup] = (double)(last - prev) / ghz * 1e-3;
        prev = last;
    }
    emit("latency_p50", sl_quantile(us, g.iters, 0.5), -1, -1);
    emit("latency_p99", sl_quantile(us, g.iters, 0.99), -1, -1);
    emit("latency_min", sl_quantile(us, g.iters, 0.0), -1, -1);
}

typedef int cpu_pair[2]; /* pingpong: two CPUs */

/* the flags that aren't in g */
typedef struct {
    const char *mode_arg, *pairs_arg;
    int have_cpus, iters, warmup;
    double timeout;
} exchange_args;

static void parse_args(int argc, char** argv, exchange_args* a)
{
    a->iters = -1;
    a->warmup = -1;
    g.bytes = 2560;
    g.roundtrips = 100;
    a->timeout = 600;
    const sl_opt opts[] = { { "mode", required_argument, SL_STR(&a->mode_arg) },
        { "cpus", required_argument, SL_CPUS(&g.cpus), .seen = &a->have_cpus },
        { "pairs", required_argument, SL_STR(&a->pairs_arg) },
        { "bytes", required_argument, SL_SIZE(&g.bytes) },
        { "groups", required_argument, SL_STR(&groups_arg) },
        { "iters", required_argument, SL_INT(&a->iters, 1, 100000000) },
        { "warmup", required_argument, SL_INT(&a->warmup, 1, 100000000) },
        { "roundtrips", required_argument, SL_INT(&g.roundtrips, 1, 1000000) },
        { "timeout", required_argument, SL_TIMEOUT(&a->timeout) }, SL_OPT_END };
    sl_parse_options(argc, argv, usage, opts);
}

static void check_args(const exchange_args* a)
{
    if (!a->mode_arg)
        sl_usage_error("--mode is required (see --help)");
    g.mode = sl_parse_choice("--mode", a->mode_arg, mode_names);
    if (a->pairs_arg && g.mode != M_PINGPONG)
        sl_usage_error("--pairs only applies to --mode pingpong");
    if (groups_arg && !is_hier(g.mode))
        sl_usage_error("--groups only applies to --mode hier and hier-umwait");
    if (g.bytes > (64u << 20))
        sl_usage_error("--bytes %zu: at most 64M", g.bytes);
}

/* --pairs A:B[,C:D...]; without --cpus, --cpus is every CPU the pairs name */
static cpu_pair* parse_pairs(const exchange_args* a, int* npairs_out)
{
    const char* pairs_arg = a->pairs_arg;
    cpu_pair* pairs = NULL;
    int npairs = 0;
    char* copy = strdup(pairs_arg);
    pairs = calloc(strlen(pairs_arg) / 2 + 2, sizeof(*pairs));
    for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        char* colon = strchr(tok, ':');
        if (!colon)
            sl_usage_error("--pairs '%s': expected A:B[,C:D...]", pairs_arg);
        *colon = 0;
        sl_cpus one;
        sl_parse_cpus("--pairs", tok, &one);
        const int first = one.cpu[0];
        if (one.n != 1)
            sl_usage_error("--pairs '%s': each side is one CPU", pairs_arg);
        sl_parse_cpus("--pairs", colon + 1, &one);
        if (one.n != 1 || one.cpu[0] == first)
            sl_usage_error("--pairs '%s': each pair is two different CPUs", pairs_arg);
        pairs[npairs][0] = first;
        pairs[npairs++][1] = one.cpu[0];
    }
    free(copy);
    if (!a->have_cpus) {
        g.cpus.n = 0;
        for (int p = 0; p < npairs; p++)
            for (int s = 0; s < 2; s++) {
                bool seen = false;
                for (int i = 0; i < g.cpus.n; i++)
                    seen |= g.cpus.cpu[i] == pairs[p][s];
                if (!seen)
                    g.cpus.cpu[g.cpus.n++] = pairs[p][s];
            }
    }
    *npairs_out = npairs;
    return pairs;
}

/* pingpong pairs: from --pairs, else every pair of --cpus */
static cpu_pair* plan_pingpong(const exchange_args* a, int* npairs_out)
{
    cpu_pair* pairs = NULL;
    int npairs = 0;
    if (a->pairs_arg) {
        pairs = parse_pairs(a, &npairs);
    } else {
        if (!a->have_cpus)
            sl_usage_error("--cpus or --pairs is required (see --help)");
        if (g.cpus.n < 2)
            sl_usage_error("--cpus: pingpong needs at least 2 CPUs");
        pairs = calloc((size_t)g.cpus.n * g.cpus.n, sizeof(*pairs));
        for (int i = 0; i < g.cpus.n; i++)
            for (int j = i + 1; j < g.cpus.n; j++) {
                pairs[npairs][0] = g.cpus.cpu[i];
                pairs[npairs++][1] = g.cpus.cpu[j];
            }
    }
    g.iters = a->iters > 0 ? a->iters : 300;
    g.warmup = a->warmup > 0 ? a->warmup : 10;
    *npairs_out = npairs;
    return pairs;
}

/* the all-to-all modes: participants, ISA, node groups */
static void plan_all_to_all(const exchange_args* a)
{
    if (!a->have_cpus)
        sl_usage_error("--cpus is required (see --help)");
    if (g.cpus.n < 2)
        sl_usage_error("--cpus: an exchange needs at least 2 participants");
    const char* why = "";
    if (g.mode == M_REP) {
        g.nt64 = sl_have_avx512(&why);
        if (!g.nt64 && !sl_have_avx2(&why))
            sl_unsupported("--mode rep needs AVX-512 or AVX2 non-temporal stores: %s", why);
    }
    if (g.mode == M_HIER_UMWAIT && !sl_have_waitpkg(&why))
        sl_unsupported("--mode hier-umwait: %s", why);
    g.iters = a->iters > 0 ? a->iters : 20000;
    g.warmup = a->warmup > 0 ? a->warmup : 2000;
    setup_nodes();
}

static void report_meta(int npairs)
{
    sl_meta_begin(&g.cpus);
    sl_json_str("mode", mode_names[g.mode]);
    sl_json_int("iters", g.iters);
    sl_json_int("warmup", g.warmup);
    if (g.mode == M_PINGPONG) {
        sl_json_int("roundtrips", g.roundtrips);
        sl_json_int("pairs", npairs);
    } else {
        sl_json_int("bytes", (long long)g.bytes);
    }
    /* CPUID: fid-cld's CLDEMOTE is a NOP without it; hier-umwait needs waitpkg */
    sl_json_bool("cldemote_supported", sl_cpu_features()->cldemote);
    sl_json_bool("waitpkg_supported", sl_cpu_features()->waitpkg);
    if (g.mode == M_REP) /* 64-byte (AVX-512) or 2 x 32-byte (AVX2) non-temporal stores */
        sl_json_str("nt_store", g.nt64 ? "nt64" : "nt32x2");
    if (is_hier(g.mode))
        sl_json_str("groups", groups_arg ? groups_arg : "numa-nodes");
    sl_json_int("page_size", 4096);
    sl_json_end();
}

int main(int argc, char** argv)
{
    sl_prog = "exchange";
    exchange_args a = { 0 };
    parse_args(argc, argv, &a);
    check_args(&a);
    cpu_pair* pairs = NULL;
    int npairs = 0;
    if (g.mode == M_PINGPONG)
        pairs = plan_pingpong(&a, &npairs);
    else
        plan_all_to_all(&a);
    sl_watchdog(a.timeout);
    sl_tsc_ghz();
    report_meta(npairs);
    if (g.mode == M_PINGPONG) {
        g.pp_samples = calloc((size_t)g.iters, sizeof(double));
        for (int p = 0; p < npairs; p++)
            run_pair(pairs[p][0], pairs[p][1]);
    } else {
        run_all_to_all();
    }
    return 0;
}
