/* ladder: per-core streaming read bandwidth over a working set per core, all listed cores at
 * once, for S seconds x R repetitions. See --help and docs/benchmarks.md. */
#include "kernels.h"
#include "sl.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[]
    = "usage: ladder --kernel K --size BYTES --cpus LIST [options]\n"
      "Per-core streaming read bandwidth; one pinned thread per listed CPU, all at once.\n"
      "  --kernel K      avx512-read | avx2-read | avx512-bf16-gemv | amx-bf16-stream |\n"
      "                  avx512-bf16-compute | amx-bf16-compute (registers / resident tiles only)\n"
      "  --size BYTES    working set per core (4096, 16K, 1M, 2G); rounded down to the kernel's\n"
      "                  block (256 B, 256 B, 256 B, 4 KiB); optional for the compute kernels,\n"
      "                  which read no memory (default 4096, allocated and reported only)\n"
      "  --cpus LIST     CPUs in kernel cpulist syntax (0-3,8); default: CPU 0\n"
      "  --seconds S     timed seconds per repetition (default 1)\n"
      "  --reps R        repetitions (default 3); each is preceded by one untimed pass\n"
      "  --page MODE     4k | thp | hugetlb (default 4k); the page size obtained is reported\n"
      "  --timeout S     exit 1 if the whole run takes longer (default 600; 0 = none)\n"
      "  --probe         the interference probe instead (docs/report.md, Interference): on each\n"
      "                  listed CPU at once, the median of 3 windows of --seconds (default\n"
      "                  0.01) of each unit the core has: l2-read (avx512-read, else avx2-read),\n"
      "                  amx-stream (amx-bf16-stream), bf16-dot (avx512-bf16-gemv), over --size\n"
      "                  bytes per core (default 1M; keep it inside L2); prints `probe` (GB/s,\n"
      "                  dims probe, kernel, cpu) per CPU and unit, and per CPU the guest-visible\n"
      "                  counters steal_ticks (/proc/stat), sched_calls and run_delay_ns\n"
      "                  (/proc/schedstat, where the kernel has it)\n"
      "  --help          this text\n"
      "Output: JSON lines; one meta record, then per repetition bw_total, bw_per_core_mean,\n"
      "bw_per_core_min (dim cpu), bw_per_core_p50, bw_per_core_max in GB/s (1e9 B/s), plus\n"
      "gflops_total for the bf16 kernels, and stat=best/median summaries of bw_total. Compute\n"
      "kernels report tflops_total, tflops_per_core_mean/min (dim cpu)/p50/max in TFLOP/s and\n"
      "core_clock_mean/min in MHz (a dependent IMUL chain right after each timed loop).\n"
      "Exit: 0 ok, 1 self-check failed, 2 usage error, 3 unsupported on this CPU.\n";

typedef struct {
    int cpu;
    pthread_t thread;
    sl_buf buf;
    size_t page_size;
    double thp_fraction;
    uint64_t t0, t1, passes;
    double checksum;
    uint64_t checksum_48; /* read kernels: exact sum of the chunk checksums mod 2^48 */
    double verify; /* avx512-read: full-buffer sum from the warm pass */
    double clock_ghz; /* compute kernels: core clock measured right after the timed loop */
} worker;

static struct {
    kernel_id kernel;
    size_t size;
    double seconds;
    int reps;
    sl_page_mode page;
    sl_cpus cpus;
    worker* w;
    pthread_barrier_t phase; /* blocking: workers + main */
    sl_barrier start; /* spinning: workers only */
} g;

static double run_kernel(const void* buf, size_t bytes, uint64_t passes)
{
    switch (g.kernel) {
    case K_AVX512_READ:
        return run_avx512_read(buf, bytes, passes);
    case K_AVX2_READ:
        return run_avx2_read(buf, bytes, passes);
    case K_AVX512_BF16_GEMV:
        return run_avx512_bf16_gemv(buf, bytes, passes);
    case K_AVX512_BF16_COMPUTE:
        return run_avx512_bf16_compute(buf, bytes, passes);
    case K_AMX_BF16_COMPUTE:
        return run_amx_bf16_compute(buf, bytes, passes);
    default:
        return run_amx_bf16_stream(buf, bytes, passes);
    }
}

static bool is_compute(void) { return kernel_table[g.kernel].flops_per_pass > 0; }

/* passes per timing check: about every 1 MiB streamed, or the compute kernel's own count */
static uint64_t chunk_passes(void)
{
    if (is_compute())
        return kernel_table[g.kernel].chunk;
    return g.size >= (1u << 20) ? 1 : (1u << 20) / g.size;
}

static void* worker_main(void* arg)
{
    worker* w = arg;
    int sense = 0;
    sl_pin_self(w->cpu);
    sl_alloc(&w->buf, g.size, g.page); /* after pinning: first touch on the owner */
    fill_buffer(g.kernel, w->buf.base, g.size);
    w->page_size = sl_page_size_obtained(&w->buf, &w->thp_fraction);
    const double ghz = sl_tsc_ghz();
    /* passes per timing check so that a check happens about every 1 MiB streamed */
    const uint64_t chunk = chunk_passes();
    const uint64_t budget = (uint64_t)(g.seconds * ghz * 1e9);
    pthread_barrier_wait(&g.phase);
    for (int rep = 0; rep < g.reps; rep++) {
        pthread_barrier_wait(&g.phase);
        if (g.kernel == K_AVX512_READ) /* untimed warm pass, checking every word */
            w->verify = verify_avx512_read(w->buf.base, g.size);
        else
            run_kernel(w->buf.base, g.size, 1);
        sl_barrier_wait(&g.start, &sense);
        uint64_t passes = 0, sum_48 = 0;
        double sum = 0;
        const uint64_t t0 = sl_rdtsc();
        uint64_t t1;
        do {
            const double r = run_kernel(w->buf.base, g.size, chunk);
            sum += r;
            sum_48 += (uint64_t)r; /* meaningful for the integer read checksums only */
            passes += chunk;
            t1 = sl_rdtsc();
        } while (t1 - t0 < budget);
        w->t0 = t0;
        w->t1 = t1;
        w->passes = passes;
        w->checksum = sum;
        w->checksum_48 = sum_48 & ((1ull << 48) - 1);
        if (is_compute()) /* while the clock still runs at the kernel's load */
            w->clock_ghz = measure_core_ghz();
        pthread_barrier_wait(&g.phase);
    }
    return NULL;
}

static void check_worker(const worker* w)
{
    /* sum over chunks of the per-chunk checksum; read kernels wrap at 2^48 per chunk */
    const uint64_t chunks = w->passes / chunk_passes();
    const uint64_t per_chunk = w->passes / chunks;
    const double one = expected_checksum(g.kernel, w->buf.base, g.size, per_chunk);
    if (g.kernel == K_AVX512_READ && w->verify != expected_full_sum(w->buf.base, g.size))
        sl_check_failed("ladder avx512-read on cpu %d: buffer sum %.17g, expected %.17g", w->cpu,
            w->verify, expected_full_sum(w->buf.base, g.size));
    if (g.kernel == K_AVX512_READ || g.kernel == K_AVX2_READ) {
        /* integer checksums (< 2^48 per chunk): compared exactly, mod 2^48 */
        const uint64_t want = ((uint64_t)one * chunks) & ((1ull << 48) - 1);
        if (w->checksum_48 != want)
            sl_check_failed("ladder %s on cpu %d: checksum %llu (mod 2^48), expected %llu",
                kernel_table[g.kernel].name, w->cpu, (unsigned long long)w->checksum_48,
                (unsigned long long)want);
        return;
    }
    if (is_compute()) {
        /* every accumulator is an integer below 2^24 and every sum exact: equal or wrong */
        if (w->checksum != one * (double)chunks)
            sl_check_failed("ladder %s on cpu %d: accumulators sum to %.17g, closed form %.17g",
                kernel_table[g.kernel].name, w->cpu, w->checksum, one * (double)chunks);
        return;
    }
    /* bf16 kernels: exact small-integer products summed in fp32, so only the double total
     * across chunks rounds */
    const double want = one * (double)chunks;
    const double tol = 1e-9 * fabs(want) + 1e-6 * (double)g.size * (double)w->passes / 64.0;
    if (!(fabs(w->checksum - want) <= tol))
        sl_check_failed("ladder %s on cpu %d: checksum %.17g, expected %.17g",
            kernel_table[g.kernel].name, w->cpu, w->checksum, want);
}

static const char* compute_meta_statistic(void)
{
    return is_compute() ? "per rep: flops / (latest end - earliest start); best and median"
                        : "per rep: bytes / (latest end - earliest start); best and median";
}

static void dims(int rep)
{
    sl_json_str("kernel", kernel_table[g.kernel].name);
    sl_json_int("bytes_per_core", (long long)g.size);
    sl_json_str("page", sl_page_names[g.page]);
    sl_json_int("threads", g.cpus.n);
    if (rep >= 0) {
        sl_json_str("stat", "rep");
        sl_json_int("rep", rep);
    }
}

/* Start one pinned worker per listed CPU for the current g.kernel / g.size and wait until each
 * has allocated and touched its buffer. */
static void start_workers(void)
{
    const int n = g.cpus.n;
    g.w = calloc((size_t)n, sizeof(*g.w));
    pthread_barrier_init(&g.phase, NULL, (unsigned)n + 1);
    sl_barrier_init(&g.start, n);
    for (int i = 0; i < n; i++) {
        g.w[i].cpu = g.cpus.cpu[i];
        if (pthread_create(&g.w[i].thread, NULL, worker_main, &g.w[i]))
            sl_fatal("pthread_create failed");
    }
    pthread_barrier_wait(&g.phase); /* all allocated and touched */
}

static void join_workers(void)
{
    for (int i = 0; i < g.cpus.n; i++) {
        pthread_join(g.w[i].thread, NULL);
        sl_free(&g.w[i].buf);
    }
    pthread_barrier_destroy(&g.phase);
    free(g.w);
    g.w = NULL;
}

/* --probe: the units a neighbour on the same physical core (an SMT sibling, a co-scheduled
 * vCPU) takes from us: the L2 port, the AMX unit, the FMA units (shared/recorded/
 * gnr-kvm-2vcpu-2026-12-03: plain reads held while the AMX stream and the BF16 GEMV lost up to
 * 30%). Rates only: the controller compares them with the host's quiet reference. */
typedef struct {
    const char* unit;
    kernel_id kernel;
} probe_unit;

/* cpuN's field `index` (0-based after the name) of a /proc table, or -1 */
static long long proc_field(const char* path, int cpu, int index)
{
    FILE* f = fopen(path, "r");
    if (!f)
        return -1;
    char want[32], line[1024];
    snprintf(want, sizeof want, "cpu%d ", cpu);
    long long value = -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, want, strlen(want)) != 0)
            continue;
        char* p = line + strlen(want);
        for (int i = 0; i <= index && p; i++) {
            char* end;
            const long long v = strtoll(p, &end, 10);
            if (end == p)
                break;
            if (i == index)
                value = v;
            p = end;
        }
        break;
    }
    fclose(f);
    return value;
}

static int run_probe(const char* size_arg)
{
    const char* why = "";
    probe_unit units[3];
    int nu = 0;
    const char* missing[3];
    int nm = 0;
    if (sl_have_avx512(&why))
        units[nu++] = (probe_unit) { "l2-read", K_AVX512_READ };
    else if (sl_have_avx2(&why))
        units[nu++] = (probe_unit) { "l2-read", K_AVX2_READ };
    else
        missing[nm++] = "l2-read";
    if (sl_have_amx(&why))
        units[nu++] = (probe_unit) { "amx-stream", K_AMX_BF16_STREAM };
    else
        missing[nm++] = "amx-stream";
    if (sl_have_avx512bf16(&why))
        units[nu++] = (probe_unit) { "bf16-dot", K_AVX512_BF16_GEMV };
    else
        missing[nm++] = "bf16-dot";
    if (nu == 0)
        sl_unsupported("--probe: the CPU has none of the probe's units (%s)", why);
    const size_t size = sl_parse_size("--size", size_arg ? size_arg : "1M");
    /* the median of 3 windows per unit: one preemption inside a window of a few ms does not
     * mark the host disturbed; a neighbour's load lasting seconds or minutes (the recorded
     * noise) shows in every window */
    g.reps = 3;
    for (int u = 0; u < nu; u++)
        if (size < kernel_table[units[u].kernel].block)
            sl_usage_error("--size '%s' is smaller than the %s block of %zu bytes", size_arg,
                kernel_table[units[u].kernel].name, kernel_table[units[u].kernel].block);
    sl_tsc_ghz();
    sl_meta_begin(&g.cpus);
    sl_json_bool("probe", true);
    sl_json_int("bytes_per_core", (long long)size);
    sl_json_num("seconds", g.seconds);
    sl_json_int("windows", g.reps);
    char list[64] = "";
    for (int i = 0; i < nm; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? "," : "", missing[i]);
    sl_json_str("units_missing", list);
    sl_json_end();
    const double ghz = sl_tsc_ghz();
    for (int u = 0; u < nu; u++) {
        g.kernel = units[u].kernel;
        g.size = size / kernel_table[g.kernel].block * kernel_table[g.kernel].block;
        start_workers();
        double* rates = calloc((size_t)(g.reps * g.cpus.n), sizeof(double));
        for (int rep = 0; rep < g.reps; rep++) {
            pthread_barrier_wait(&g.phase);
            pthread_barrier_wait(&g.phase);
            for (int i = 0; i < g.cpus.n; i++) {
                const worker* w = &g.w[i];
                check_worker(w);
                rates[i * g.reps + rep]
                    = (double)w->passes * (double)g.size / ((double)(w->t1 - w->t0) / ghz);
            }
        }
        for (int i = 0; i < g.cpus.n; i++) {
            const worker* w = &g.w[i];
            const double gbps = sl_quantile(rates + i * g.reps, g.reps, 0.5);
            sl_metric_begin("probe", gbps, "GB/s");
            sl_json_str("probe", units[u].unit);
            sl_json_str("kernel", kernel_table[g.kernel].name);
            sl_json_int("cpu", w->cpu);
            sl_json_end();
        }
        free(rates);
        join_workers();
    }
    for (int i = 0; i < g.cpus.n; i++) {
        const int cpu = g.cpus.cpu[i];
        /* /proc/stat: user nice system idle iowait irq softirq steal ...; /proc/schedstat
         * (version 15+): yld_count legacy sched_count sched_goidle ttwu_count ttwu_local
         * rq_cpu_time run_delay pcount */
        const long long steal = proc_field("/proc/stat", cpu, 7);
        const long long calls = proc_field("/proc/schedstat", cpu, 2);
        const long long delay = proc_field("/proc/schedstat", cpu, 7);
        const struct {
            const char* name;
            long long v;
            const char* unit;
        } c[] = { { "steal_ticks", steal, "ticks" }, { "sched_calls", calls, "1" },
            { "run_delay_ns", delay, "ns" } };
        for (int k = 0; k < 3; k++) {
            if (c[k].v < 0)
                continue; /* not exposed here (schedstat needs CONFIG_SCHEDSTATS) */
            sl_metric_begin(c[k].name, (double)c[k].v, c[k].unit);
            sl_json_int("cpu", cpu);
            sl_json_end();
        }
    }
    return 0;
}

/* the flags that aren't in g */
typedef struct {
    const char *kernel_arg, *size_arg;
    double timeout;
    int probe, seconds_set;
} ladder_args;

static void parse_args(int argc, char** argv, ladder_args* a)
{
    g.seconds = 1;
    g.reps = 3;
    g.page = SL_PAGE_4K;
    g.cpus.n = 1;
    g.cpus.cpu[0] = 0;
    a->timeout = 600;
    const sl_opt opts[] = { { "kernel", required_argument, SL_STR(&a->kernel_arg) },
        { "size", required_argument, SL_STR(&a->size_arg) },
        { "cpus", required_argument, SL_CPUS(&g.cpus) },
        { "seconds", required_argument, SL_NUM(&g.seconds, 0.001, 3600), .seen = &a->seconds_set },
        { "reps", required_argument, SL_INT(&g.reps, 1, 1000) },
        { "page", required_argument, SL_PAGE(&g.page) },
        { "timeout", required_argument, SL_TIMEOUT(&a->timeout) },
        { "probe", no_argument, SL_SET(&a->probe, 1), .letter = 'P' }, SL_OPT_END };
    sl_parse_options(argc, argv, usage, opts);
}

/* --kernel and --size, and whether this host runs the kernel */
static void check_kernel(ladder_args* a)
{
    const char* kernel_names[K_COUNT + 1];
    for (int k = 0; k < K_COUNT; k++)
        kernel_names[k] = kernel_table[k].name;
    kernel_names[K_COUNT] = NULL;
    if (!a->kernel_arg)
        sl_usage_error("--kernel is required (see --help)");
    g.kernel = (kernel_id)sl_parse_choice("--kernel", a->kernel_arg, kernel_names);
    if (!a->size_arg && is_compute())
        a->size_arg = "4096";
    if (!a->size_arg)
        sl_usage_error("--size is required (see --help)");
    const size_t block = kernel_table[g.kernel].block;
    g.size = sl_parse_size("--size", a->size_arg) / block * block;
    if (g.size == 0)
        sl_usage_error("--size '%s' is smaller than the %s block of %zu bytes", a->size_arg,
            kernel_table[g.kernel].name, block);
    const char* why = "";
    const bool ok = g.kernel == K_AVX512_READ ? sl_have_avx512(&why)
        : g.kernel == K_AVX2_READ             ? sl_have_avx2(&why)
        : g.kernel == K_AVX512_BF16_GEMV      ? sl_have_avx512bf16(&why)
        : g.kernel == K_AVX512_BF16_COMPUTE   ? sl_have_avx512bf16(&why)
                                              : sl_have_amx(&why);
    if (!ok)
        sl_unsupported("--kernel %s: %s", kernel_table[g.kernel].name, why);
}

static void report_meta(void)
{
    size_t page_min = g.w[0].page_size;
    double thp_min = g.w[0].thp_fraction;
    for (int i = 1; i < g.cpus.n; i++) {
        page_min = g.w[i].page_size < page_min ? g.w[i].page_size : page_min;
        thp_min = g.w[i].thp_fraction < thp_min ? g.w[i].thp_fraction : thp_min;
    }
    sl_meta_begin(&g.cpus);
    sl_json_str("kernel", kernel_table[g.kernel].name);
    sl_json_int("bytes_per_core", (long long)g.size);
    sl_json_num("seconds", g.seconds);
    sl_json_int("reps", g.reps);
    sl_json_str("page_mode", sl_page_names[g.page]);
    sl_json_int("page_size", (long long)page_min);
    sl_json_num("thp_fraction", thp_min);
    sl_json_str("statistic", compute_meta_statistic());
    sl_json_end();
}

/* streams: bytes per pass -> GB/s; compute: flops per pass / 1000 -> TFLOP/s */
typedef struct {
    bool compute;
    double per_pass;
    const char *unit, *total, *mean, *min, *p50, *max;
} ladder_units;

static ladder_units kernel_units(void)
{
    const bool compute = is_compute();
    return (ladder_units) {
        .compute = compute,
        .per_pass = compute ? kernel_table[g.kernel].flops_per_pass / 1e3 : (double)g.size,
        .unit = compute ? "TFLOP/s" : "GB/s",
        .total = compute ? "tflops_total" : "bw_total",
        .mean = compute ? "tflops_per_core_mean" : "bw_per_core_mean",
        .min = compute ? "tflops_per_core_min" : "bw_per_core_min",
        .p50 = compute ? "tflops_per_core_p50" : "bw_per_core_p50",
        .max = compute ? "tflops_per_core_max" : "bw_per_core_max",
    };
}

/* one rep's records, once its workers are done (per: n slots); returns the rep's total */
static double report_rep(int rep, const ladder_units* u, double* per)
{
    const int n = g.cpus.n;
    const double ghz = sl_tsc_ghz();
    uint64_t first = UINT64_MAX, last = 0;
    double amount = 0, mean = 0, clock_mean = 0, clock_min = 1e30;
    int min_i = 0;
    for (int i = 0; i < n; i++) {
        const worker* w = &g.w[i];
        check_worker(w);
        first = w->t0 < first ? w->t0 : first;
        last = w->t1 > last ? w->t1 : last;
        const double b = (double)w->passes * u->per_pass;
        amount += b;
        per[i] = b / ((double)(w->t1 - w->t0) / ghz); /* per ns: GB/s or TFLOP/s */
        mean += per[i] / n;
        min_i = per[i] < per[min_i] ? i : min_i;
        clock_mean += w->clock_ghz * 1e3 / n;
        clock_min = w->clock_ghz * 1e3 < clock_min ? w->clock_ghz * 1e3 : clock_min;
    }
    const double total = amount / ((double)(last - first) / ghz);
    const double min_v = per[min_i];
    const int min_cpu = g.w[min_i].cpu;
    sl_metric_begin(u->total, total, u->unit);
    dims(rep);
    sl_json_end();
    sl_metric_begin(u->mean, mean, u->unit);
    dims(rep);
    sl_json_end();
    sl_metric_begin(u->min, min_v, u->unit);
    dims(rep);
    sl_json_int("cpu", min_cpu);
    sl_json_end();
    const double max_v = sl_quantile(per, n, 1.0); /* sorts per */
    sl_metric_begin(u->p50, sl_quantile(per, n, 0.5), u->unit);
    dims(rep);
    sl_json_end();
    sl_metric_begin(u->max, max_v, u->unit);
    dims(rep);
    sl_json_end();
    if (kernel_table[g.kernel].flops_per_byte > 0) {
        sl_metric_begin("gflops_total", total * kernel_table[g.kernel].flops_per_byte, "GFLOP/s");
        dims(rep);
        sl_json_end();
    }
    if (u->compute) {
        /* the core clock (not the TSC's reference clock), from 3-cycle IMUL chains run
         * right after each thread's timed loop */
        sl_metric_begin("core_clock_mean", clock_mean, "MHz");
        dims(rep);
        sl_json_str("method", "imul-chain-after-loop");
        sl_json_end();
        sl_metric_begin("core_clock_min", clock_min, "MHz");
        dims(rep);
        sl_json_str("method", "imul-chain-after-loop");
        sl_json_end();
    }
    return total;
}

int main(int argc, char** argv)
{
    sl_prog = "ladder";
    ladder_args a = { 0 };
    parse_args(argc, argv, &a);
    if (a.probe) {
        if (a.kernel_arg)
            sl_usage_error("--probe runs its own kernels: leave out --kernel");
        if (!a.seconds_set)
            g.seconds = 0.01;
        sl_watchdog(a.timeout);
        return run_probe(a.size_arg);
    }
    check_kernel(&a);
    sl_watchdog(a.timeout);

    sl_tsc_ghz(); /* calibrate before threads start */
    start_workers();
    report_meta();
    double* totals = calloc((size_t)g.reps, sizeof(double));
    double* per = calloc((size_t)g.cpus.n, sizeof(double));
    const ladder_units u = kernel_units();
    for (int rep = 0; rep < g.reps; rep++) {
        pthread_barrier_wait(&g.phase);
        pthread_barrier_wait(&g.phase);
        totals[rep] = report_rep(rep, &u, per);
    }
    join_workers();
    const double best = sl_quantile(totals, g.reps, 1.0), median = sl_quantile(totals, g.reps, 0.5);
    sl_metric_begin(u.total, best, u.unit);
    dims(-1);
    sl_json_str("stat", "best");
    sl_json_end();
    sl_metric_begin(u.total, median, u.unit);
    dims(-1);
    sl_json_str("stat", "median");
    sl_json_end();
    return 0;
}
