/* residency: does each worker's weight slice stay in its core's L2 while other traffic runs?
 * Every worker streams its own slice (first-touched on its core) once per step with the read
 * kernel of the host, after the scenario's interference phase; the weight pass alone is timed.
 * After the run, one more interference phase, then each owner core times every line of its slice
 * against calibrated L1/L2/L3/DRAM latencies (a userspace measurement, see held.h).
 * With --lock, slices are pseudo-locked into L2 through /dev/pseudo_lock (lock.c). */
#include "held.h"
#include "kernels.h"
#include "lock.h"
#include "sl.h"

#include <sys/resource.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[]
    = "usage: residency --slice BYTES --cpus LIST [options]\n"
      "Each worker streams its own weight slice every step under an interference scenario:\n"
      "  A none; B per-node 256 B slot broadcast (32 slots) + a shared hidden vector;\n"
      "  C KV stream from DRAM (--kv-step per step from a --kv-bytes buffer per worker);\n"
      "  D LLC-resident KV (--llc-kv per worker) + DRAM streamers on --hk-cpus; E = C + a q "
      "block.\n"
      "  --slice BYTES       weight bytes per worker, a multiple of 4 KiB (e.g. 256K, 1280K)\n"
      "  --cpus LIST         workers, one per core (default: CPU 0)\n"
      "  --scenario X        A | B | C | D | E (default A)\n"
      "  --kernel K          auto | amx | avx512 | avx2 (default auto: the best this CPU has)\n"
      "  --seconds S         timed run length (default 1); --steps N instead runs N steps\n"
      "  --warmup N          untimed weight passes first (default 3)\n"
      "  --kv-bytes B        C/E: per-worker KV buffer (default 256M)\n"
      "  --kv-step B         C/E: KV bytes read per step (default 256K)\n"
      "  --llc-kv B          D: per-worker LLC-resident KV read per step (default 2M)\n"
      "  --hk-cpus LIST      D: CPUs running DRAM streamers (required for D; ignored by A-C, E,\n"
      "                      so one command line can serve every scenario)\n"
      "  --stream-bytes B    D: buffer of each streamer (default 256M)\n"
      "  --q-bytes B         E: q block read per step (default 64K)\n"
      "  --hidden-bytes B    B: shared hidden vector (default 10K)\n"
      "  --gap-ns N          spin N ns after each interference phase, before the weight pass\n"
      "                      (default 0)\n"
      "  --no-held           skip the held-fraction measurement\n"
      "  --held-stride N     time one line of every N (default 4: a timed miss brings its\n"
      "                      neighbours in, adjacent-line / region prefetch)\n"
      "  --lock              lock each slice into its owner's L2 with /dev/pseudo_lock\n"
      "  --device PATH       the pseudo-lock device (default /dev/pseudo_lock)\n"
      "  --lock-ways N       with --lock: the module must reserve N L2 ways (else exit 3)\n"
      "  --page MODE         4k | thp | hugetlb (default thp)\n"
      "  --timeout S         exit 1 if the run takes longer (default 600; 0 = none)\n"
      "  --help              this text\n"
      "Output: JSON lines; meta, then per worker (dim cpu): weight_bw (GB/s), step_p50, step_p99,\n"
      "step_max, first_mean, last_mean (us), drift (%), cal_l1..cal_dram and thresholds (cycles),\n"
      "held_fraction, lines_*; then summary records (dim cpu \"all\"). Exit: 0 ok, 1 check "
      "failed,\n"
      "2 usage error, 3 unsupported here.\n";

static const char* const scenario_names[] = { "A", "B", "C", "D", "E", NULL };
static const char* const kernel_names[] = { "auto", "amx", "avx512", "avx2", NULL };
enum { SC_A, SC_B, SC_C, SC_D, SC_E };
enum { KN_AUTO, KN_AMX, KN_AVX512, KN_AVX2 };

#define SLOTS 32
#define SLOT_BYTES 256
#define MAX_NODES 64
#define STEP_CAP 4000000 /* --seconds: at most this many steps are kept per worker */

typedef struct {
    int cpu, node, rank_in_node;
    pthread_t thread;
    sl_buf slice, kv, scratch;
    size_t page_size, kv_pos;
    double* us; /* step times */
    int steps;
    int bad_checksum;
    double checksum, expected;
    held_cal cal;
    int held_tries, held_preempted;
    held_count held;
    lock_region lk;
} worker;

typedef struct {
    int cpu;
    pthread_t thread;
    sl_buf buf;
    uint64_t sink;
} streamer;

static struct {
    int scenario, n, nhk, warmup, steps_fixed, held, lock;
    unsigned held_stride;
    double seconds, gap_ns;
    kernel_id kernel;
    size_t slice, kv_bytes, kv_step, llc_kv, stream_bytes, q_bytes, hidden_bytes;
    sl_page_mode page;
    sl_cpus cpus, hk;
    worker* w;
    streamer* s;
    char* slots[MAX_NODES]; /* B: SLOTS x SLOT_BYTES per node */
    char* hidden; /* B: shared by every worker */
    char* q; /* E: shared q block */
    pthread_barrier_t phase, done; /* phase: workers + streamers + main; done: workers + main */
    volatile int stop_streamers;
    uint64_t sink;
    const char* device;
    lock_dev dev;
} g;

static uint64_t read_lines(const char* p, size_t bytes)
{
    uint64_t s = 0;
    for (size_t i = 0; i < bytes; i += SL_CACHE_LINE)
        s += *(const volatile uint64_t*)(p + i);
    return s;
}

#define HELD_TRIES 5

/* voluntary + involuntary context switches of the calling thread so far */
static long context_switches(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_THREAD, &ru) == 0 ? ru.ru_nvcsw + ru.ru_nivcsw : -1;
}

static double weight_pass(const worker* w)
{
    switch (g.kernel) {
    case K_AMX_BF16_STREAM:
        return run_amx_bf16_stream(w->slice.base, g.slice, 1);
    case K_AVX512_READ:
        return run_avx512_read(w->slice.base, g.slice, 1);
    default:
        return run_avx2_read(w->slice.base, g.slice, 1);
    }
}

/* the scenario's traffic on the worker's own core, before each weight pass */
static uint64_t interfere(worker* w)
{
    uint64_t s = 0;
    switch (g.scenario) {
    case SC_B: {
        char* slot = g.slots[w->node] + (size_t)(w->rank_in_node % SLOTS) * SLOT_BYTES;
        for (int i = 0; i < SLOT_BYTES; i += 8)
            *(volatile uint64_t*)(slot + i) += 1; /* this worker's broadcast */
        s += read_lines(g.slots[w->node], (size_t)SLOTS * SLOT_BYTES);
        s += read_lines(g.hidden, g.hidden_bytes);
        break;
    }
    case SC_E:
        s += read_lines(g.q, g.q_bytes); /* fall through: E = C + q */
    /* fall through */
    case SC_C:
        s += read_lines((const char*)w->kv.base + w->kv_pos, g.kv_step);
        w->kv_pos = (w->kv_pos + g.kv_step) % g.kv_bytes;
        break;
    case SC_D:
        s += read_lines(w->kv.base, g.llc_kv);
        break;
    default:
        break;
    }
    return s;
}

static void* streamer_main(void* arg)
{
    streamer* st = arg;
    sl_pin_self(st->cpu);
    sl_alloc(&st->buf, g.stream_bytes, g.page);
    memset(st->buf.base, 1, g.stream_bytes);
    pthread_barrier_wait(&g.phase);
    while (!__atomic_load_n(&g.stop_streamers, __ATOMIC_RELAXED))
        st->sink += read_lines(st->buf.base, g.stream_bytes);
    return NULL;
}

static void* worker_main(void* arg)
{
    worker* w = arg;
    sl_pin_self(w->cpu);
    /* first touch on the owner core: the slice's pages come from this core's node */
    sl_alloc(&w->slice, g.slice, g.page);
    fill_buffer(g.kernel, w->slice.base, g.slice);
    if (g.scenario == SC_C || g.scenario == SC_E || g.scenario == SC_D) {
        const size_t kb = g.scenario == SC_D ? g.llc_kv : g.kv_bytes;
        sl_alloc(&w->kv, kb, g.page);
        memset(w->kv.base, 2, kb);
    }
    const size_t l2 = held_cache_bytes(w->cpu, 2);
    const size_t scratch = held_scratch_bytes(l2);
    if (g.held) {
        sl_alloc(&w->scratch, scratch, g.page);
        memset(w->scratch.base, 3, scratch);
    }
    double thp;
    w->page_size = sl_page_size_obtained(&w->slice, &thp);
    w->expected = expected_checksum(g.kernel, w->slice.base, g.slice, 1);
    /* calibration first: its eviction buffer would otherwise flush the slice it is to judge */
    if (g.held)
        held_calibrate(&w->cal, w->scratch.base, scratch, l2, g.held_stride);
    if (g.lock)
        lock_slice(&g.dev, &w->lk, w->slice.base, g.slice, w->cpu);
    for (int i = 0; i < g.warmup; i++)
        (void)weight_pass(w);
    pthread_barrier_wait(&g.phase); /* everyone (and every streamer) is ready */
    const int cap = g.steps_fixed ? g.steps_fixed : STEP_CAP;
    const double t_end = sl_now_s() + g.seconds;
    const double ghz = sl_tsc_ghz();
    const uint64_t gap_ticks = (uint64_t)(g.gap_ns * ghz);
    uint64_t sink = 0;
    int s = 0;
    for (; s < cap; s++) {
        sink += interfere(w);
        if (gap_ticks) { /* the pause between a KV phase and the weights (published p1_gap) */
            const uint64_t until = sl_rdtsc() + gap_ticks;
            while (sl_rdtsc() < until)
                __builtin_ia32_pause();
        }
        const uint64_t t0 = sl_rdtsc();
        const double sum = weight_pass(w);
        const uint64_t t1 = sl_rdtsc();
        w->us[s] = (double)(t1 - t0) / (ghz * 1e3);
        if (sum != w->expected) {
            w->bad_checksum++;
            w->checksum = sum;
        }
        if (!g.steps_fixed && (s & 15) == 15 && sl_now_s() >= t_end) {
            s++;
            break;
        }
    }
    w->steps = s;
    /* what the next weight pass would find: one more interference phase, then the count. A
     * context switch in that window (another task on this CPU: a shared guest, a test runner)
     * evicts by the scheduler, not by the scenario, so the window is redone after a fresh weight
     * pass, up to HELD_TRIES times; held_tries says how many it took, held_preempted whether
     * even the last one was switched out. */
    for (int t = 0; t < (g.held ? HELD_TRIES : 1); t++) {
        const long cs0 = context_switches();
        if (t)
            sink += (uint64_t)weight_pass(w);
        sink += interfere(w);
        if (!g.held)
            break;
        held_classify(&w->cal, w->slice.base, g.slice, &w->held);
        w->held_tries = t + 1;
        w->held_preempted = context_switches() != cs0;
        if (!w->held_preempted)
            break;
    }
    if (g.lock)
        lock_measure(&g.dev, &w->lk, 1);
    pthread_barrier_wait(&g.done); /* streamers keep running until every count is done */
    __atomic_fetch_add(&g.sink, sink, __ATOMIC_RELAXED); /* keeps the interference reads */
    return NULL;
}

static void dims(const char* cpu_text, int cpu)
{
    if (cpu_text)
        sl_json_str("cpu", cpu_text);
    else
        sl_json_int("cpu", cpu);
    sl_json_str("scenario", scenario_names[g.scenario]);
    sl_json_str("kernel", kernel_table[g.kernel].name);
    sl_json_int("slice_bytes", (long long)g.slice);
    sl_json_bool("lock", g.lock);
    sl_json_int("workers", g.n);
}

static void metric(const worker* w, const char* name, double v, const char* unit)
{
    sl_metric_begin(name, v, unit);
    dims(w ? NULL : "all", w ? w->cpu : 0);
    sl_json_end();
}

static double mean(const double* v, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += v[i];
    return n ? s / n : 0;
}

static kernel_id pick_kernel(int choice)
{
    const char* why = "";
    if (choice == KN_AMX || (choice == KN_AUTO && sl_have_amx(&why))) {
        if (!sl_have_amx(&why))
            sl_unsupported("--kernel amx: %s", why);
        return K_AMX_BF16_STREAM;
    }
    if (choice == KN_AVX512 || (choice == KN_AUTO && sl_have_avx512(&why))) {
        if (!sl_have_avx512(&why))
            sl_unsupported("--kernel avx512: %s", why);
        return K_AVX512_READ;
    }
    if (!sl_have_avx2(&why))
        sl_unsupported("--kernel avx2: %s", why);
    return K_AVX2_READ;
}

/* the flags that aren't in g */
typedef struct {
    int kchoice, have_hk, lock_ways;
    double timeout;
    const char* slice_arg;
} residency_args;

static void parse_args(int argc, char** argv, residency_args* a)
{
    g.seconds = 1;
    g.warmup = 3;
    g.held = 1;
    g.held_stride = 4;
    g.kv_bytes = 256u << 20;
    g.kv_step = 256u << 10;
    g.llc_kv = 2u << 20;
    g.stream_bytes = 256u << 20;
    g.q_bytes = 64u << 10;
    g.hidden_bytes = 10u << 10;
    g.page = SL_PAGE_THP;
    g.cpus.n = 1;
    g.cpus.cpu[0] = 0;
    g.device = "/dev/pseudo_lock";
    a->kchoice = KN_AUTO;
    a->timeout = 600;
    const sl_opt opts[] = { { "slice", required_argument, SL_STR(&a->slice_arg) },
        { "cpus", required_argument, SL_CPUS(&g.cpus) },
        { "scenario", required_argument, SL_CHOICE(&g.scenario, scenario_names) },
        { "kernel", required_argument, SL_CHOICE(&a->kchoice, kernel_names) },
        { "seconds", required_argument, SL_NUM(&g.seconds, 0.001, 1e6) },
        { "steps", required_argument, SL_INT(&g.steps_fixed, 1, STEP_CAP) },
        { "warmup", required_argument, SL_INT(&g.warmup, 0, 1000000) },
        { "kv-bytes", required_argument, SL_SIZE(&g.kv_bytes) },
        { "kv-step", required_argument, SL_SIZE(&g.kv_step) },
        { "llc-kv", required_argument, SL_SIZE(&g.llc_kv) },
        { "hk-cpus", required_argument, SL_CPUS(&g.hk), .seen = &a->have_hk },
        { "stream-bytes", required_argument, SL_SIZE(&g.stream_bytes) },
        { "q-bytes", required_argument, SL_SIZE(&g.q_bytes) },
        { "hidden-bytes", required_argument, SL_SIZE(&g.hidden_bytes) },
        { "no-held", no_argument, SL_SET(&g.held, 0), .letter = 'N' },
        { "lock", no_argument, SL_SET(&g.lock, 1), .letter = 'L' },
        { "device", required_argument, SL_STR(&g.device) },
        { "page", required_argument, SL_PAGE(&g.page) },
        { "timeout", required_argument, SL_TIMEOUT(&a->timeout) },
        { "lock-ways", required_argument, SL_INT(&a->lock_ways, 1, 31) },
        { "gap-ns", required_argument, SL_NUM(&g.gap_ns, 0, 1e9) },
        { "held-stride", required_argument, SL_UINT(&g.held_stride, 1, 64) }, SL_OPT_END };
    sl_parse_options(argc, argv, usage, opts);
}

/* the flags against each other and this host; the kernel */
static void check_args(const residency_args* a)
{
    if (!a->slice_arg)
        sl_usage_error("--slice is required (see --help)");
    g.slice = sl_parse_size("--slice", a->slice_arg);
    if (g.slice % 4096 || g.slice > ((size_t)1 << 32))
        sl_usage_error("--slice %zu: must be a multiple of 4 KiB (4096), at most 4G", g.slice);
    if (g.kv_step > g.kv_bytes || g.kv_bytes % g.kv_step)
        sl_usage_error("--kv-step %zu: must divide --kv-bytes %zu", g.kv_step, g.kv_bytes);
    if (g.scenario == SC_D && !a->have_hk)
        sl_usage_error("--scenario D needs --hk-cpus (the CPUs running the DRAM streamers)");
    for (int i = 0; i < g.hk.n; i++)
        for (int j = 0; j < g.cpus.n; j++)
            if (g.hk.cpu[i] == g.cpus.cpu[j])
                sl_usage_error("--hk-cpus: CPU %d is also a worker in --cpus", g.hk.cpu[i]);
    if (a->lock_ways && !g.lock)
        sl_usage_error("--lock-ways is only used with --lock");
    if (g.lock) { /* checked before anything runs: no driver here is exit 3, not a crash */
        lock_open(&g.dev, g.device, g.slice);
        lock_check_ways(&g.dev, a->lock_ways);
    }
    g.kernel = pick_kernel(a->kchoice);
}

/* the workers, their step-time arrays and the shared buffers */
static void plan(void)
{
    g.n = g.cpus.n;
    g.nhk = g.scenario == SC_D ? g.hk.n : 0;
    g.w = calloc((size_t)g.n, sizeof(*g.w));
    g.s = calloc((size_t)(g.nhk ? g.nhk : 1), sizeof(*g.s));
    int per_node[MAX_NODES] = { 0 };
    const int cap = g.steps_fixed ? g.steps_fixed : STEP_CAP;
    for (int i = 0; i < g.n; i++) {
        worker* w = &g.w[i];
        w->cpu = g.cpus.cpu[i];
        w->node = sl_cpu_node(w->cpu) % MAX_NODES;
        w->rank_in_node = per_node[w->node]++;
        w->us = malloc(sizeof(double) * (size_t)cap);
        if (!w->us)
            sl_fatal("out of memory for %d step times", cap);
        if (!g.slots[w->node]) {
            g.slots[w->node] = aligned_alloc(4096, (size_t)SLOTS * SLOT_BYTES);
            memset(g.slots[w->node], 0, (size_t)SLOTS * SLOT_BYTES);
        }
    }
    g.hidden = aligned_alloc(4096, (g.hidden_bytes + 4095) / 4096 * 4096);
    memset(g.hidden, 4, g.hidden_bytes);
    g.q = aligned_alloc(4096, (g.q_bytes + 4095) / 4096 * 4096);
    memset(g.q, 5, g.q_bytes);
}

static void report_meta(size_t page_min)
{
    char hk[256] = "";
    sl_format_cpus(g.hk.cpu, g.nhk, hk, sizeof(hk));
    sl_meta_begin(&g.cpus);
    sl_json_str("scenario", scenario_names[g.scenario]);
    sl_json_str("kernel", kernel_table[g.kernel].name);
    sl_json_str("isa", kernel_table[g.kernel].isa);
    sl_json_int("slice_bytes", (long long)g.slice);
    sl_json_int("kv_bytes", (long long)g.kv_bytes);
    sl_json_int("kv_step", (long long)g.kv_step);
    sl_json_int("llc_kv", (long long)g.llc_kv);
    sl_json_str("hk_cpus", hk);
    sl_json_int("stream_bytes", (long long)g.stream_bytes);
    sl_json_int("q_bytes", (long long)g.q_bytes);
    sl_json_int("hidden_bytes", (long long)g.hidden_bytes);
    sl_json_num("gap_ns", g.gap_ns);
    sl_json_str("page_mode", sl_page_names[g.page]);
    sl_json_int("page_size", (long long)page_min);
    sl_json_bool("lock", g.lock);
    sl_json_str("held_method",
        g.held ? "userspace: rdtscp per sampled line, prefetchers as they "
                 "are, calibrated L1/L2/L3/DRAM medians, midpoint "
                 "thresholds"
               : "none");
    sl_json_int("held_stride", g.held ? g.held_stride : 0);
    if (g.lock)
        lock_meta(&g.dev);
    sl_json_end();
}

/* the streamers and workers: set up (phase), the meta record, then the timed steps (done) */
static void run(void)
{
    pthread_barrier_init(&g.phase, NULL, (unsigned)(g.n + g.nhk + 1));
    pthread_barrier_init(&g.done, NULL, (unsigned)(g.n + 1));
    sl_tsc_ghz();
    for (int i = 0; i < g.nhk; i++) {
        g.s[i].cpu = g.hk.cpu[i];
        if (pthread_create(&g.s[i].thread, NULL, streamer_main, &g.s[i]))
            sl_fatal("pthread_create failed");
    }
    for (int i = 0; i < g.n; i++)
        if (pthread_create(&g.w[i].thread, NULL, worker_main, &g.w[i]))
            sl_fatal("pthread_create failed");
    pthread_barrier_wait(&g.phase);
    size_t page_min = SIZE_MAX;
    for (int i = 0; i < g.n; i++)
        page_min = g.w[i].page_size < page_min ? g.w[i].page_size : page_min;
    report_meta(page_min);
    pthread_barrier_wait(&g.done);
    __atomic_store_n(&g.stop_streamers, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < g.n; i++)
        pthread_join(g.w[i].thread, NULL);
    for (int i = 0; i < g.nhk; i++)
        pthread_join(g.s[i].thread, NULL);
}

/* the held-fraction calibration and counts of one worker; returns its held fraction */
static double report_held(const worker* w)
{
    const held_cal* k = &w->cal;
    metric(w, "cal_l1", k->l1, "cycles");
    metric(w, "cal_l2", k->l2, "cycles");
    metric(w, "cal_l3", k->l3, "cycles");
    metric(w, "cal_dram", k->dram, "cycles");
    metric(w, "threshold_l2_l3", k->t23, "cycles");
    metric(w, "threshold_l3_dram", k->t3d, "cycles");
    metric(w, "cal_ordered", k->ordered, "bool");
    metric(w, "cal_tsc_step", k->tsc_step, "ticks");
    metric(w, "cal_pad", k->pad, "cycles");
    metric(w, "cal_separation", k->separation, "ratio");
    metric(w, "held_tries", w->held_tries, "count");
    metric(w, "lines_timed", (double)w->held.lines, "lines");
    metric(w, "held_preempted", w->held_preempted, "bool");
    const held_count* h = &w->held;
    const double frac = (double)(h->l1 + h->l2) / (double)h->lines;
    metric(w, "held_fraction", frac, "ratio");
    metric(w, "lines_l1", (double)h->l1, "lines");
    metric(w, "lines_l2", (double)h->l2, "lines");
    metric(w, "lines_l3", (double)h->l3, "lines");
    metric(w, "lines_dram", (double)h->dram, "lines");
    metric(w, "line_p50", h->p50, "cycles");
    return frac;
}

/* the metric records, then the checksum gate (its exit code) */
static int report(void)
{
    double total = 0, min_gbs = 1e300, worst_p99 = 0, held_min = 1;
    int min_cpu = -1, worst_cpu = -1, bad = -1;
    for (int i = 0; i < g.n; i++) {
        worker* w = &g.w[i];
        const int n = w->steps, tenth = n / 10 ? n / 10 : 1;
        const double first = mean(w->us, tenth), last = mean(w->us + n - tenth, tenth);
        const double gbs = (double)g.slice * n / (mean(w->us, n) * n * 1e3);
        const double p50 = sl_quantile(w->us, n, 0.5), p99 = sl_quantile(w->us, n, 0.99);
        /* weight_bw: slice over the mean step (what the core sustained, stalls included);
         * weight_bw_p50: over the median step */
        metric(w, "weight_bw", gbs, "GB/s");
        metric(w, "weight_bw_p50", (double)g.slice / (p50 * 1e3), "GB/s");
        metric(w, "step_p50", p50, "us");
        metric(w, "step_p99", p99, "us");
        metric(w, "step_max", w->us[n - 1], "us");
        metric(w, "first_mean", first, "us");
        metric(w, "last_mean", last, "us");
        metric(w, "drift", (last / first - 1) * 100, "%");
        metric(w, "steps", n, "count");
        if (g.held) {
            const double frac = report_held(w);
            held_min = frac < held_min ? frac : held_min;
        }
        if (g.lock) {
            metric(w, "held_lock_before", lock_held(&w->lk.before), "ratio");
            metric(w, "held_lock_after", lock_held(&w->lk.after), "ratio");
            metric(w, "lock_p50", (double)w->lk.after.p50, "cycles");
        }
        total += gbs;
        if (gbs < min_gbs) {
            min_gbs = gbs;
            min_cpu = w->cpu;
        }
        if (p99 > worst_p99) {
            worst_p99 = p99;
            worst_cpu = w->cpu;
        }
        if (w->bad_checksum && bad < 0)
            bad = i;
    }
    metric(NULL, "total_bw", total, "GB/s");
    metric(NULL, "per_core_mean_bw", total / g.n, "GB/s");
    metric(NULL, "min_bw", min_gbs, "GB/s");
    metric(NULL, "min_bw_cpu", min_cpu, "cpu");
    metric(NULL, "worst_p99", worst_p99, "us");
    metric(NULL, "worst_p99_cpu", worst_cpu, "cpu");
    if (g.held)
        metric(NULL, "held_fraction_min", held_min, "ratio");
    if (g.lock)
        lock_close(&g.dev);
    if (bad >= 0)
        sl_check_failed("residency: cpu %d: %d weight passes returned checksum %.17g, want %.17g",
            g.w[bad].cpu, g.w[bad].bad_checksum, g.w[bad].checksum, g.w[bad].expected);
    return 0;
}

int main(int argc, char** argv)
{
    sl_prog = "residency";
    residency_args a = { 0 };
    parse_args(argc, argv, &a);
    check_args(&a);
    sl_watchdog(a.timeout);
    plan();
    run();
    return report();
}
