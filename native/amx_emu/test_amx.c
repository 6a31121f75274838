/* Test-only: runs the AMX kernels (gemv/amx.c, ladder/amx.c, compiled against amx_emu.h) and
 * checks that packing + tile loops give the FP32 reference's answer. JSON lines like the
 * benchmarks; exit 1 when any case fails. Also proves the checks can fail: a wrong tile shape
 * or an invalid config must fault in the emulator, and unpacked (row-major) weights must miss
 * the reference. Compiled with -DSL_AMX_EMULATE like the kernels it tests. */
#include "../gemv/gemv.h"
#include "../ladder/kernels.h"
#include "amx_tiles.h"
#include "sl.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int failures;

/* rel RMS error and cosine of the AMX gemv against the reference; packed=0 feeds the
 * weights row-major instead of VNNI-packed (a negative control) */
static void gemv_case(int rows, int cols, int batch, int packed, double* rel_rms, double* cosine)
{
    const int nblocks = (rows + 15) / 16, ldy = nblocks * 16;
    uint16_t* w = aligned_alloc(64, (size_t)nblocks * 16 * cols * 2);
    if (packed) {
        pack_bf16_vnni(w, 0, nblocks, rows, cols);
    } else {
        for (int r = 0; r < nblocks * 16; r++)
            for (int k = 0; k < cols; k++)
                w[(size_t)r * cols + k] = r < rows ? gemv_weight(r, k) : 0;
    }
    uint16_t* x = aligned_alloc(64, (size_t)batch * cols * 2);
    for (int b = 0; b < batch; b++)
        for (int k = 0; k < cols; k++)
            x[(size_t)b * cols + k] = gemv_input(b, k);
    float* y = aligned_alloc(64, (size_t)batch * ldy * 4);
    memset(y, 0xff, (size_t)batch * ldy * 4);
    gemv_amx_config(batch);
    gemv_amx_bf16(w, nblocks, cols, x, batch, y, ldy);
    gemv_amx_release();
    double* ref = malloc(sizeof(double) * (size_t)batch * rows);
    gemv_reference(ref, rows, cols, batch);
    sl_match match = { 0 };
    for (int b = 0; b < batch; b++)
        for (int r = 0; r < rows; r++)
            sl_match_add(&match, y[(size_t)b * ldy + r], ref[(size_t)b * rows + r]);
    *rel_rms = sl_match_rel_rms(&match);
    *cosine = sl_match_cosine(&match);
    free(ref);
    free(y);
    free(x);
    free(w);
}

static void emit(
    const char* name, double v, const char* unit, const char* kernel, int rows, int cols, int batch)
{
    sl_metric_begin(name, v, unit);
    sl_json_str("kernel", kernel);
    sl_json_int("rows", rows);
    sl_json_int("cols", cols);
    sl_json_int("batch", batch);
    sl_json_end();
}

/* runs fn in a child: true when it aborts (the emulator's fault) */
static int faults(void (*fn)(void))
{
    fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        freopen("/dev/null", "w", stderr);
        fn();
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

/* a tile op on shapes the config does not allow */
static void wrong_shape(void)
{
    uint16_t w[16 * 64] __attribute__((aligned(64))) = { 0 };
    uint16_t x[4 * 64] __attribute__((aligned(64))) = { 0 };
    float y[16 * 32] __attribute__((aligned(64)));
    gemv_amx_config(4); /* configured for batch 4 ... */
    gemv_amx_config_rows_override(16); /* ... then A made 16 rows, C left at 4 */
    gemv_amx_bf16(w, 1, 32, x, 4, y, 32);
}

/* a config with a reserved byte set (#GP on hardware) */
static void reserved_byte(void)
{
    sl_tilecfg cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.palette_id = 1;
    sl_tile_shape(&cfg, 0, 16, 64);
    cfg.reserved[3] = 1;
    sl_tile_loadconfig(&cfg);
}

int main(void)
{
    sl_prog = "amx_emu_test";
    sl_cpus cpus;
    sl_online_cpus(&cpus);
    cpus.n = 1;
    sl_meta_begin(&cpus);
    sl_json_str("emulation", "amx_emu.h: ldtilecfg, tileloadd, tdpbf16ps, tilestored in C");
    sl_json_int("page_size", sysconf(_SC_PAGESIZE));
    sl_json_end();

    static const int shapes[][2] = { { 16, 32 }, { 48, 64 }, { 40, 96 }, { 96, 256 }, { 33, 512 } };
    static const int batches[] = { 1, 2, 4, 7, 16 };
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
        for (size_t bi = 0; bi < sizeof(batches) / sizeof(batches[0]); bi++) {
            const int rows = shapes[s][0], cols = shapes[s][1], batch = batches[bi];
            double rel_rms, cosine;
            gemv_case(rows, cols, batch, 1, &rel_rms, &cosine);
            emit("rel_rms_err", rel_rms, "ratio", "amx-bf16", rows, cols, batch);
            emit("cosine", cosine, "ratio", "amx-bf16", rows, cols, batch);
            if (!(rel_rms <= 1e-5 && cosine >= 0.99999)) {
                fprintf(stderr,
                    "amx_emu_test: gemv amx-bf16 %dx%d batch %d: rel RMS %.3g cosine %.9f\n", rows,
                    cols, batch, rel_rms, cosine);
                failures++;
            }
        }
    /* negative controls: the comparison and the emulator must be able to fail */
    double rel_rms, cosine;
    gemv_case(48, 64, 4, 0, &rel_rms, &cosine);
    emit("unpacked_rel_rms_err", rel_rms, "ratio", "amx-bf16", 48, 64, 4);
    if (rel_rms < 0.1) {
        fprintf(stderr, "amx_emu_test: row-major weights matched the reference (check is blind)\n");
        failures++;
    }
    const int shape_faults = faults(wrong_shape), config_faults = faults(reserved_byte);
    sl_metric_begin("wrong_shape_faults", shape_faults, "bool");
    sl_json_end();
    sl_metric_begin("bad_config_faults", config_faults, "bool");
    sl_json_end();
    if (!shape_faults || !config_faults) {
        fprintf(stderr, "amx_emu_test: a wrong tile shape or config did not fault\n");
        failures++;
    }

    /* ladder's amx-bf16-stream: checksum of the C tiles against the scalar reference */
    const size_t bytes = 16384;
    void* buf = aligned_alloc(4096, bytes);
    fill_buffer(K_AMX_BF16_STREAM, buf, bytes);
    const double got = run_amx_bf16_stream(buf, bytes, 3);
    const double want = expected_checksum(K_AMX_BF16_STREAM, buf, bytes, 3);
    sl_metric_begin("stream_checksum_error", fabs(got - want), "abs");
    sl_json_str("kernel", "amx-bf16-stream");
    sl_json_num("expected", want);
    sl_json_end();
    if (got != want) {
        fprintf(
            stderr, "amx_emu_test: amx-bf16-stream checksum %.17g, expected %.17g\n", got, want);
        failures++;
    }
    /* ladder's amx-bf16-compute: resident tiles only, C tiles against their closed form */
    const double got_c = run_amx_bf16_compute(buf, bytes, 2);
    const double want_c = expected_checksum(K_AMX_BF16_COMPUTE, buf, bytes, 2);
    sl_metric_begin("compute_checksum_error", fabs(got_c - want_c), "abs");
    sl_json_str("kernel", "amx-bf16-compute");
    sl_json_num("expected", want_c);
    sl_json_end();
    if (got_c != want_c || want_c <= 0) {
        fprintf(stderr, "amx_emu_test: amx-bf16-compute checksum %.17g, closed form %.17g\n", got_c,
            want_c);
        failures++;
    }
    free(buf);
    if (failures)
        sl_check_failed("%d AMX emulation case(s) failed", failures);
    return 0;
}
