/* gemv: a row-partitioned BF16 GEMV/GEMM stage over pinned workers, checked against FP32. */
#include "gemv.h"
#include "sl.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[]
    = "usage: gemv --kernel K --rows R --cols C --cpus LIST [options]\n"
      "y = W x for a batch of B inputs; W (R x C, bf16) split over the listed workers in 16-row\n"
      "blocks, each worker's rows packed (at load, by the worker, after pinning) in its own "
      "slice.\n"
      "  --kernel K          avx512-bf16 (VDPBF16PS on 16-row VNNI blocks; the layer stage's\n"
      "                      --gemv avx512-vnni) | avx512-bf16-rows (VDPBF16PS on row-major rows,\n"
      "                      no padding; the layer stage's --gemv avx512) | avx512-fp32 (FMA on\n"
      "                      fp32 copies of the bf16 weights) | amx-bf16 (TDPBF16PS, weights "
      "packed\n"
      "                      to VNNI B tiles) | avx2-bf16 (portable: FP32 FMA on bf16 weights\n"
      "                      widened in registers, row-major; the layer stage's --gemv avx2)\n"
      "  --rows R            output rows (default 1536); split in 16-row blocks, padded to whole\n"
      "                      blocks by the blocked kernels (the row-major ones pack real rows)\n"
      "  --cols C            input columns, a multiple of 32 (default 2560)\n"
      "  --batch B           1..16 inputs per step (default 1)\n"
      "  --cpus LIST         workers in kernel cpulist syntax (default: CPU 0)\n"
      "  --steps N           timed steps (default 2000)\n"
      "  --warmup N          untimed steps first (default 100)\n"
      "  --max-rel-rms X     fail when relative RMS error vs FP32 exceeds X (default 1e-3)\n"
      "  --min-cosine X      fail when cosine similarity vs FP32 is below X (default 0.9999)\n"
      "  --page MODE         4k | thp | hugetlb for the weight slices (default thp)\n"
      "  --timeout S         exit 1 if the run takes longer (default 600; 0 = none)\n"
      "  --spin S            auto | pause | fma512 | amx: how the step barrier polls (as layer\n"
      "                      --spin): fma512 adds a 512-bit FMA per poll, amx also a TDPBF16PS\n"
      "                      every 8th; auto = fma512 with the AVX-512 kernels, else pause\n"
      "  --layer SHAPES      no GEMV run: split every matrix of a layer (RxC,RxC,... in rows x\n"
      "                      cols) over the workers in row units and report the layer's weight\n"
      "                      bytes per worker, max / mean (what tile granularity costs a stage)\n"
      "  --row-unit U        --layer's rows per unit (default 16 for amx-bf16 tiles, 4 for the\n"
      "                      AVX-512 kernels, as the campaign's real-layer stage split them)\n"
      "  --workers N         --layer over N workers (default: the number of --cpus)\n"
      "  --help              this text\n"
      "Output: JSON lines; meta, then step_p50, step_p99 (us; a step = earliest worker start to\n"
      "latest worker end), weight_bw (GB/s at p50), tflops (TFLOP/s at p50), rows_max_over_mean,\n"
      "rel_rms_err, cosine. With --layer: layer_bytes_max_over_mean (ratio),\n"
      "layer_bytes_per_worker_max and _mean (B). Exit: 0 ok, 1 check failed, 2 usage error,\n"
      "3 unsupported here.\n";

enum { K_BF16, K_FP32, K_AMX, K_AVX2, K_ROWS };
static const char* const kernel_names[]
    = { "avx512-bf16", "avx512-fp32", "amx-bf16", "avx2-bf16", "avx512-bf16-rows", NULL };
/* the kernels on row-major rows (no 16-row padding) */
static bool rowmajor(int k) { return k == K_AVX2 || k == K_ROWS; }
/* the AVX-512 kernels (SIMDe-emulated in gemv_avx512_emu) */
static bool avx512_kernel(int k) { return k == K_BF16 || k == K_FP32 || k == K_ROWS; }
#ifdef SL_AVX512_EMULATE
/* test-only build (gemv_avx512_emu): the AVX-512 kernels run on SIMDe, never for timing */
static const bool avx512_emulated = true;
#else
static const bool avx512_emulated = false;
#endif

typedef struct {
    int cpu, row0, nblocks, nrows; /* nrows: real rows (the row-major kernels pack no padding) */
    pthread_t thread;
    sl_buf w;
    size_t page_size;
    double thp_fraction;
    uint64_t* t0; /* this worker's part of g.t0 */
    uint64_t* t1;
} worker;

static struct {
    int kernel, rows, cols, batch, steps, warmup, nblocks, ldy;
    int spin; /* SL_SPIN_*, or -1 (auto) until check_kernel */
    sl_page_mode page;
    sl_cpus cpus;
    worker* w;
    uint64_t *t0, *t1; /* steps TSC stamps per worker, worker-major */
    uint16_t* x16;
    float* x32;
    float* y;
    pthread_barrier_t phase;
    sl_barrier step;
} g;

static void run_step(worker* w)
{
    float* y = g.y + (size_t)w->row0;
    if (g.kernel == K_BF16)
        gemv_avx512_bf16(w->w.base, w->nblocks, g.cols, g.x16, g.batch, y, g.ldy);
    else if (g.kernel == K_FP32)
        gemv_avx512_fp32(w->w.base, w->nblocks, g.cols, g.x32, g.batch, y, g.ldy);
    else if (g.kernel == K_AVX2)
        gemv_avx2_bf16(w->w.base, w->nrows, g.cols, g.x16, g.batch, y, g.ldy);
    else if (g.kernel == K_ROWS)
        gemv_avx512_bf16_rows(w->w.base, w->nrows, g.cols, g.x16, g.batch, y, g.ldy);
    else
        gemv_amx_bf16(w->w.base, w->nblocks, g.cols, g.x16, g.batch, y, g.ldy);
}

static void* worker_main(void* arg)
{
    worker* w = arg;
    int sense = 0;
    sl_pin_self(w->cpu);
    const size_t elem = g.kernel == K_FP32 ? 4 : 2;
    const size_t rows = rowmajor(g.kernel) ? (size_t)w->nrows : (size_t)w->nblocks * 16;
    sl_alloc(&w->w, rows * g.cols * elem + 64, g.page);
    if (rowmajor(g.kernel))
        pack_bf16_rowmajor(w->w.base, w->row0, w->nrows, g.cols);
    else if (g.kernel == K_FP32)
        pack_fp32(w->w.base, w->row0, w->nblocks, g.rows, g.cols);
    else
        pack_bf16_vnni(w->w.base, w->row0, w->nblocks, g.rows, g.cols);
    w->page_size = sl_page_size_obtained(&w->w, &w->thp_fraction);
    if (g.kernel == K_AMX)
        gemv_amx_config(g.batch);
    pthread_barrier_wait(&g.phase);
    for (int s = 0; s < g.warmup + g.steps; s++) {
        sl_barrier_wait(&g.step, &sense);
        const uint64_t t0 = sl_rdtsc();
        if (w->nblocks && w->nrows)
            run_step(w);
        const uint64_t t1 = sl_rdtsc();
        if (s >= g.warmup) {
            w->t0[s - g.warmup] = t0;
            w->t1[s - g.warmup] = t1;
        }
    }
    if (g.kernel == K_AMX)
        gemv_amx_release();
    return NULL;
}

static void metric(const char* name, double v, const char* unit)
{
    sl_metric_begin(name, v, unit);
    sl_json_str("kernel", kernel_names[g.kernel]);
    sl_json_int("rows", g.rows);
    sl_json_int("cols", g.cols);
    sl_json_int("batch", g.batch);
    sl_json_int("workers", g.cpus.n);
    sl_json_end();
}

/* --layer: every matrix of the stage split over `workers` in `unit`-row pieces by the rule
 * the GEMV run uses (the first units % workers workers get one more); bf16 weights. Pure
 * arithmetic: no memory touched, so it runs on any host. */
static int layer_balance(const char* shapes, int unit, int workers)
{
    enum { MAX_MATRICES = 64 };
    long rows[MAX_MATRICES], cols[MAX_MATRICES];
    int m = 0;
    for (const char* p = shapes; *p;) {
        char* end;
        const long r = strtol(p, &end, 10);
        long c = 0;
        if (end != p && (*end == 'x' || *end == 'X')) {
            p = end + 1;
            c = strtol(p, &end, 10);
        }
        if (end == p || r < 1 || c < 1 || r > (1 << 24) || c > (1 << 24) || (*end && *end != ','))
            sl_usage_error(
                "--layer '%s': expected ROWSxCOLS[,ROWSxCOLS...] like 2048x1536,256x1536", shapes);
        if (m == MAX_MATRICES)
            sl_usage_error("--layer '%s': at most %d matrices", shapes, MAX_MATRICES);
        rows[m] = r;
        cols[m++] = c;
        p = *end ? end + 1 : end;
    }
    double* bytes = calloc((size_t)workers, sizeof(double));
    double total = 0;
    for (int k = 0; k < m; k++) {
        const long units = (rows[k] + unit - 1) / unit;
        total += 2.0 * rows[k] * cols[k];
        for (long w = 0, row0 = 0; w < workers; w++) {
            const long mine = units / workers + (w < units % workers);
            long real = rows[k] - row0;
            real = real < 0 ? 0 : real > mine * unit ? mine * unit : real;
            bytes[w] += 2.0 * real * cols[k];
            row0 += mine * unit;
        }
    }
    double max = 0;
    for (int w = 0; w < workers; w++)
        max = bytes[w] > max ? bytes[w] : max;
    const double mean = total / workers;
    sl_meta_begin(&g.cpus);
    sl_json_str("kernel", kernel_names[g.kernel]);
    sl_json_str("layer", shapes);
    sl_json_int("matrices", m);
    sl_json_int("row_unit", unit);
    sl_json_int("workers", workers);
    sl_json_int("layer_bytes", (long long)total);
    sl_json_int("page_size", 4096); /* nothing allocated: the contract's field, nominal */
    sl_json_end();
    const char* names[3] = { "layer_bytes_max_over_mean", "layer_bytes_per_worker_max",
        "layer_bytes_per_worker_mean" };
    const double values[3] = { max / mean, max, mean };
    for (int i = 0; i < 3; i++) {
        sl_metric_begin(names[i], values[i], i ? "B" : "ratio");
        sl_json_str("kernel", kernel_names[g.kernel]);
        sl_json_int("row_unit", unit);
        sl_json_int("workers", workers);
        sl_json_int("matrices", m);
        sl_json_int("max_bytes", (long long)max); /* exact, where the value prints 6 digits */
        sl_json_end();
    }
    free(bytes);
    return 0;
}

/* the flags that aren't in g */
typedef struct {
    const char *kernel_arg, *layer_arg;
    int row_unit, layer_workers;
    double max_rel_rms, min_cosine, timeout;
} gemv_args;

static void parse_args(int argc, char** argv, gemv_args* a)
{
    g.rows = 1536;
    g.cols = 2560;
    g.batch = 1;
    g.steps = 2000;
    g.warmup = 100;
    g.spin = -1;
    g.page = SL_PAGE_THP;
    g.cpus.n = 1;
    g.cpus.cpu[0] = 0;
    a->max_rel_rms = 1e-3;
    a->min_cosine = 0.9999;
    a->timeout = 600;
    const sl_opt opts[] = { { "kernel", required_argument, SL_STR(&a->kernel_arg) },
        { "rows", required_argument, SL_INT(&g.rows, 1, 1 << 20) },
        { "cols", required_argument, SL_INT(&g.cols, 1, 1 << 20) },
        { "batch", required_argument, SL_INT(&g.batch, 1, GEMV_MAX_BATCH) },
        { "cpus", required_argument, SL_CPUS(&g.cpus) },
        { "steps", required_argument, SL_INT(&g.steps, 1, 100000000) },
        { "warmup", required_argument, SL_INT(&g.warmup, 0, 100000000) },
        { "max-rel-rms", required_argument, SL_MAX_REL_RMS(&a->max_rel_rms) },
        { "min-cosine", required_argument, SL_MIN_COSINE(&a->min_cosine) },
        { "page", required_argument, SL_PAGE(&g.page) },
        { "timeout", required_argument, SL_TIMEOUT(&a->timeout) },
        { "spin", required_argument, SL_CALL(sl_parse_spin, &g.spin) },
        { "layer", required_argument, SL_STR(&a->layer_arg) },
        { "row-unit", required_argument, SL_INT(&a->row_unit, 1, 4096) },
        { "workers", required_argument, SL_INT(&a->layer_workers, 1, 1 << 20) }, SL_OPT_END };
    sl_parse_options(argc, argv, usage, opts);
}

/* --cols for the kernels, and whether this host runs the kernel */
static void check_kernel(void)
{
    if (g.cols % 32)
        sl_usage_error("--cols %d: must be a multiple of 32 (one AMX tile row of bf16)", g.cols);
    const char* why = "";
    const bool bf16 = g.kernel == K_BF16 || g.kernel == K_ROWS;
    const bool ok = bf16     ? avx512_emulated || sl_have_avx512bf16(&why)
        : g.kernel == K_FP32 ? avx512_emulated || sl_have_avx512(&why)
        : g.kernel == K_AVX2 ? sl_have_avx2(&why)
                             : sl_have_amx(&why);
    if (!ok)
        sl_unsupported("--kernel %s: %s", kernel_names[g.kernel], why);
    /* auto: fma512 for the AVX-512 kernels (avx512-bf16, 256 x 2560 on 2 workers of a GNR
     * guest: p99 0.75x and 0.80x of pause in two runs, p50 1.00x); pause for amx-bf16, where
     * no mode helped twice (B = 16: amx 1.19x then 0.98x, fma512 0.99x then 1.16x);
     * docs/benchmarks.md */
    g.spin = sl_spin_resolve(g.spin, avx512_kernel(g.kernel) ? SL_SPIN_FMA512 : SL_SPIN_PAUSE,
        g.kernel == K_AMX, "--kernel amx-bf16");
    sl_spin_set(g.spin, g.spin == SL_SPIN_AMX ? gemv_amx_keep_warm : NULL);
}

/* 16-row blocks spread as evenly as they go: the first (blocks % n) workers get one more; the
 * input rows and the output. Returns the most rows a worker has. */
static int plan(void)
{
    const int n = g.cpus.n;
    g.nblocks = (g.rows + 15) / 16;
    g.ldy = g.nblocks * 16;
    g.w = calloc((size_t)n, sizeof(*g.w));
    g.t0 = calloc((size_t)n * g.steps, sizeof(uint64_t));
    g.t1 = calloc((size_t)n * g.steps, sizeof(uint64_t));
    int max_rows = 0;
    for (int i = 0, blk = 0; i < n; i++) {
        worker* w = &g.w[i];
        w->cpu = g.cpus.cpu[i];
        w->nblocks = g.nblocks / n + (i < g.nblocks % n);
        w->row0 = blk * 16;
        blk += w->nblocks;
        int real = g.rows - w->row0;
        real = real < 0 ? 0 : real > w->nblocks * 16 ? w->nblocks * 16 : real;
        max_rows = real > max_rows ? real : max_rows;
        w->nrows = real;
        w->t0 = g.t0 + (size_t)i * g.steps;
        w->t1 = g.t1 + (size_t)i * g.steps;
    }
    g.x16 = aligned_alloc(64, (size_t)g.batch * g.cols * 2 + 64);
    g.x32 = aligned_alloc(64, (size_t)g.batch * g.cols * 4 + 64);
    for (int b = 0; b < g.batch; b++)
        for (int k = 0; k < g.cols; k++) {
            g.x16[(size_t)b * g.cols + k] = gemv_input(b, k);
            g.x32[(size_t)b * g.cols + k] = sl_bf16_to_f32(gemv_input(b, k));
        }
    g.y = aligned_alloc(64, (size_t)g.batch * g.ldy * 4 + 64);
    memset(g.y, 0xff, (size_t)g.batch * g.ldy * 4); /* NaN until written */

    return max_rows;
}

static void report_meta(size_t page_min, int max_rows)
{
    const size_t elem = g.kernel == K_FP32 ? 4 : 2;
    const double weight_bytes = (double)g.rows * g.cols * elem;
    sl_meta_begin(&g.cpus);
    sl_json_str("kernel", kernel_names[g.kernel]);
    sl_json_int("rows", g.rows);
    sl_json_int("cols", g.cols);
    sl_json_int("batch", g.batch);
    sl_json_int("steps", g.steps);
    sl_json_int("warmup", g.warmup);
    sl_json_num("weight_bytes", weight_bytes);
    sl_json_num("weight_bytes_per_worker_max", (double)max_rows * g.cols * elem);
    sl_json_str("page_mode", sl_page_names[g.page]);
    sl_json_int("page_size", (long long)page_min);
    sl_json_str("spin", sl_spin_names[g.spin]);
    if (avx512_kernel(g.kernel))
        sl_json_bool("avx512_emulated", avx512_emulated);
    sl_json_end();
}

/* the workers: set up (phase), the meta record, the timed steps */
static void run(int max_rows)
{
    const int n = g.cpus.n;
    pthread_barrier_init(&g.phase, NULL, (unsigned)n + 1);
    sl_barrier_init(&g.step, n);
    sl_tsc_ghz();
    for (int i = 0; i < n; i++)
        if (pthread_create(&g.w[i].thread, NULL, worker_main, &g.w[i]))
            sl_fatal("pthread_create failed");
    pthread_barrier_wait(&g.phase);
    size_t page_min = g.w[0].page_size;
    for (int i = 1; i < n; i++)
        page_min = g.w[i].page_size < page_min ? g.w[i].page_size : page_min;
    report_meta(page_min, max_rows);
    for (int i = 0; i < n; i++)
        pthread_join(g.w[i].thread, NULL);
}

/* the metric records, then the numerics gate */
static int report(const gemv_args* a, int max_rows)
{
    const int n = g.cpus.n;
    const double weight_bytes = (double)g.rows * g.cols * (g.kernel == K_FP32 ? 4 : 2);
    const double rows_max_over_mean = max_rows / ((double)g.rows / n);
    /* numerics: the last step's output against the FP32 reference */
    double* ref = malloc(sizeof(double) * (size_t)g.batch * g.rows);
    gemv_reference(ref, g.rows, g.cols, g.batch);
    sl_match match = { 0 };
    for (int b = 0; b < g.batch; b++)
        for (int r = 0; r < g.rows; r++)
            sl_match_add(&match, g.y[(size_t)b * g.ldy + r], ref[(size_t)b * g.rows + r]);
    const double rel_rms = sl_match_rel_rms(&match), cosine = sl_match_cosine(&match);

    double* step_us = malloc(sizeof(double) * (size_t)g.steps);
    sl_step_spans_us(g.t0, g.t1, n, g.steps, step_us);
    const double p50 = sl_quantile(step_us, g.steps, 0.5),
                 p99 = sl_quantile(step_us, g.steps, 0.99);
    metric("step_p50", p50, "us");
    metric("step_p99", p99, "us");
    metric("weight_bw", weight_bytes / (p50 * 1e3), "GB/s");
    metric("tflops", 2.0 * g.rows * g.cols * g.batch / (p50 * 1e6), "TFLOP/s");
    metric("rows_max_over_mean", rows_max_over_mean, "ratio");
    metric("rel_rms_err", rel_rms, "ratio");
    metric("cosine", cosine, "ratio");
    if (!(rel_rms <= a->max_rel_rms) || !(cosine >= a->min_cosine))
        sl_check_failed("gemv %s batch %d: rel RMS error %.3g (max %.3g), cosine %.9f (min %.9f) "
                        "against the FP32 reference",
            kernel_names[g.kernel], g.batch, rel_rms, a->max_rel_rms, cosine, a->min_cosine);
    return 0;
}

int main(int argc, char** argv)
{
    sl_prog = "gemv";
    gemv_args a = { 0 };
    parse_args(argc, argv, &a);
    if (!a.kernel_arg)
        sl_usage_error("--kernel is required (see --help)");
    g.kernel = sl_parse_choice("--kernel", a.kernel_arg, kernel_names);
    if (!a.layer_arg && (a.row_unit || a.layer_workers))
        sl_usage_error("--row-unit and --workers only apply with --layer");
    if (a.layer_arg && g.spin >= 0)
        sl_usage_error("--spin only applies to a GEMV run, not to --layer (nothing waits)");
    if (a.layer_arg)
        return layer_balance(a.layer_arg,
            a.row_unit              ? a.row_unit
                : g.kernel == K_AMX ? 16
                                    : 4,
            a.layer_workers ? a.layer_workers : g.cpus.n);
    check_kernel();
    sl_watchdog(a.timeout);
    const int max_rows = plan();
    run(max_rows);
    return report(&a, max_rows);
}
