/* tilecfg_check: do the real (non-emulated) AMX objects hand LDTILECFG the 64 bytes they mean?
 * Runs on any x86-64 host, AMX or not. Each config routine (gemv_amx_config for batch 1/4/16,
 * ladder_amx_config) and each ladder AMX kernel entry is called with SIGILL/SIGSEGV handlers
 * installed, on a stack poisoned with 0x5a so that a store the compiler dropped shows up:
 *   - CPU without AMX, or AMX without the XTILEDATA permission (not yet requested here):
 *     LDTILECFG raises SIGILL; the handler decodes the instruction's memory operand from the
 *     ucontext (VEX C4, map 0F38, opcode 49 /0, ModRM/SIB/displacement) and copies the 64 bytes
 *     it names;
 *   - the hardware rejected the config (#GP -> SIGSEGV at LDTILECFG): decoded the same way;
 *   - afterwards, where the CPU has AMX and the kernel grants the permission, the config
 *     routines run for real and STTILECFG reads back what the CPU loaded.
 * The bytes are compared with the config built here independently from the SDM layout.
 * JSON lines like the benchmarks; exit 1 when any byte differs. */
#include "../gemv/gemv.h"
#include "../ladder/kernels.h"
#include "amx_tiles.h"
#include "sl.h"

#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

#define POISON 0x5a

/* what the signal handler found; written only by the handler, read after siglongjmp */
static sigjmp_buf escape;
static volatile sig_atomic_t got_signal;
static volatile int decoded; /* 1 operand decoded, 0 the fault was not at an LDTILECFG */
static unsigned char seen[64];

/* ModRM/SIB register number (REX/VEX-extended) -> the ucontext slot holding it */
static const int greg_of[16] = { REG_RAX, REG_RCX, REG_RDX, REG_RBX, REG_RSP, REG_RBP, REG_RSI,
    REG_RDI, REG_R8, REG_R9, REG_R10, REG_R11, REG_R12, REG_R13, REG_R14, REG_R15 };

/* Effective address of LDTILECFG m512 at `p` (VEX.128.NP.0F38.W0 49 /0); 0 when the bytes at
 * p are not that instruction. Async-signal-safe: reads the instruction and the context only. */
static uintptr_t ldtilecfg_operand(const unsigned char* p, const greg_t* gr)
{
    if (p[0] != 0xc4 || (p[1] & 0x1f) != 0x02 || (p[2] & 0x87) != 0x00 || p[3] != 0x49)
        return 0; /* not 3-byte VEX, map 0F38, W0, L0, no SIMD prefix, opcode 49 */
    const unsigned x = !(p[1] & 0x40), b = !(p[1] & 0x20);
    const unsigned char modrm = p[4];
    const unsigned mod = modrm >> 6, reg = (modrm >> 3) & 7, rm = modrm & 7;
    if (mod == 3 || reg != 0)
        return 0; /* TILERELEASE / TILEZERO forms, not a memory operand */
    const unsigned char* q = p + 5;
    uintptr_t addr = 0;
    int no_base = 0;
    if (rm == 4) { /* SIB follows */
        const unsigned char sib = *q++;
        const unsigned scale = sib >> 6, index = ((sib >> 3) & 7) | (x << 3), base = sib & 7;
        if (index != 4) /* index 100b without VEX.X: no index */
            addr += (uintptr_t)gr[greg_of[index]] << scale;
        if (base == 5 && mod == 0)
            no_base = 1; /* disp32 only */
        else
            addr += (uintptr_t)gr[greg_of[base | (b << 3)]];
    } else if (rm == 5 && mod == 0) {
        int32_t disp;
        memcpy(&disp, q, 4);
        return (uintptr_t)(q + 4) + (intptr_t)disp; /* RIP-relative: from the next insn */
    } else {
        addr = (uintptr_t)gr[greg_of[rm | (b << 3)]];
    }
    if (mod == 1) {
        addr += (intptr_t)(int8_t)*q;
    } else if (mod == 2 || no_base) {
        int32_t disp;
        memcpy(&disp, q, 4);
        addr += (intptr_t)disp;
    }
    return addr;
}

/* The config may sit in the leaf routine's red zone below %rsp: the x86-64 kernel builds the
 * signal frame 128 bytes below it, so the bytes are still there when the handler reads them. */
static void on_fault(int sig, siginfo_t* si, void* ctx)
{
    (void)si;
    const ucontext_t* uc = ctx;
    const greg_t* gr = uc->uc_mcontext.gregs;
    const uintptr_t at = ldtilecfg_operand((const unsigned char*)gr[REG_RIP], gr);
    got_signal = sig;
    decoded = at != 0;
    if (at)
        memcpy(seen, (const void*)at, sizeof(seen));
    siglongjmp(escape, 1);
}

/* The stack below the caller, where the routine under test builds its config, holds POISON.
 * noinline and volatile: the fill must happen, in a frame at the same depth as the call. */
static __attribute__((noinline)) void poison_stack(void)
{
    volatile unsigned char pad[16384];
    for (size_t i = 0; i < sizeof(pad); i++)
        pad[i] = POISON;
}

/* the config a routine must load: palette 1, the given (tile, rows, colsb) shapes, rest 0 */
static void expected(unsigned char want[64], const int (*shapes)[3], int n)
{
    memset(want, 0, 64);
    want[0] = 1;
    for (int i = 0; i < n; i++) {
        const int t = shapes[i][0], rows = shapes[i][1], colsb = shapes[i][2];
        want[16 + 2 * t] = (unsigned char)(colsb & 0xff);
        want[17 + 2 * t] = (unsigned char)(colsb >> 8);
        want[48 + t] = (unsigned char)rows;
    }
}

static const char* field(int i)
{
    static char buf[32];
    if (i == 0)
        return "palette_id";
    if (i == 1)
        return "start_row";
    if (i < 16)
        snprintf(buf, sizeof(buf), "reserved[%d]", i - 2);
    else if (i < 48)
        snprintf(buf, sizeof(buf), "colsb[%d] byte %d", (i - 16) / 2, i % 2);
    else
        snprintf(buf, sizeof(buf), "rows[%d]", i - 48);
    return buf;
}

typedef struct {
    const char* routine;
    int batch; /* gemv's batch, 0 for the ladder routines */
    void (*call)(int batch);
    int shapes[8][3];
    int nshapes;
    int config_only; /* safe to run for real (hardware round): loads the config, nothing else */
} tcase;

static void call_gemv(int batch) { gemv_amx_config(batch); }
static void call_ladder(int batch) { (void)batch, ladder_amx_config(); }
static _Alignas(4096) unsigned char stream_buf[4096];
static void call_stream(int batch) { (void)batch, run_amx_bf16_stream(stream_buf, 4096, 1); }
static void call_compute(int batch) { (void)batch, run_amx_bf16_compute(NULL, 0, 1); }

#define LADDER_SHAPES                                                                              \
    { { 0, 16, 64 }, { 1, 16, 64 }, { 2, 16, 64 }, { 3, 16, 64 }, { 4, 16, 64 }, { 5, 16, 64 },    \
        { 6, 16, 64 }, { 7, 16, 64 } },                                                            \
        8
#define GEMV_SHAPES(b) { { 0, b, 64 }, { 1, 16, 64 }, { 2, 16, 64 }, { 4, b, 64 }, { 5, b, 64 } }, 5

static const tcase cases[] = {
    { "gemv_amx_config", 1, call_gemv, GEMV_SHAPES(1), 1 },
    { "gemv_amx_config", 4, call_gemv, GEMV_SHAPES(4), 1 },
    { "gemv_amx_config", 16, call_gemv, GEMV_SHAPES(16), 1 },
    { "ladder_amx_config", 0, call_ladder, LADDER_SHAPES, 1 },
    { "run_amx_bf16_stream", 0, call_stream, LADDER_SHAPES, 0 },
    { "run_amx_bf16_compute", 0, call_compute, LADDER_SHAPES, 0 },
};

static int failures;

/* one routine, one path; emits a metric and returns the number of wrong bytes (-1: no data) */
static void check_case(const tcase* c, int hardware)
{
    unsigned char want[64], got[64];
    expected(want, c->shapes, c->nshapes);
    const char* path;
    got_signal = 0;
    decoded = 0;
    fflush(stdout);
    if (sigsetjmp(escape, 1) == 0) {
        poison_stack();
        c->call(c->batch);
        if (!c->config_only) {
            /* a kernel that ran to the end on hardware: its own checks cover it */
            sl_metric_begin("tilecfg_wrong_bytes", 0, "bytes");
            sl_json_str("routine", c->routine);
            sl_json_str("path", "ran-on-hardware");
            sl_json_end();
            return;
        }
        sl_tilecfg back;
        memset(&back, POISON, sizeof(back));
#ifdef SL_AMX_EMULATE
#error "tilecfg_check tests the real AMX objects; never build it with SL_AMX_EMULATE"
#else
        sl_tile_storeconfig(&back);
        _tile_release();
#endif
        memcpy(got, &back, 64);
        path = "sttilecfg";
    } else if (!decoded && got_signal == SIGILL && !hardware && !c->config_only
        && sl_cpu_features()->amx_tile) {
        /* this CPU ran LDTILECFG without the permission and faulted at a later tile
         * instruction: the config-only cases and the hardware round check what it loaded */
        sl_metric_begin("tilecfg_wrong_bytes", 0, "bytes");
        sl_json_str("routine", c->routine);
        sl_json_str("path", "loaded-then-sigill");
        sl_json_end();
        return;
    } else if (!decoded) {
        fprintf(stderr, "tilecfg_check: %s: signal %d at an instruction that is not LDTILECFG\n",
            c->routine, (int)got_signal);
        failures++;
        return;
    } else {
        memcpy(got, seen, 64);
        path = got_signal == SIGILL ? "sigill-decoded" : "gp-fault-decoded";
    }
    int wrong = 0, first = -1;
    for (int i = 0; i < 64; i++)
        if (got[i] != want[i]) {
            wrong++;
            if (first < 0)
                first = i;
        }
    sl_metric_begin("tilecfg_wrong_bytes", wrong, "bytes");
    sl_json_str("routine", c->routine);
    if (c->batch)
        sl_json_int("batch", c->batch);
    sl_json_str("path", path);
    sl_json_bool("hardware_round", hardware);
    if (first >= 0) {
        char what[96];
        snprintf(what, sizeof(what), "byte %d (%s) = 0x%02x, want 0x%02x", first, field(first),
            got[first], want[first]);
        sl_json_str("first_wrong", what);
        fprintf(stderr, "tilecfg_check: %s%s%.0d: %d of 64 config bytes wrong, first %s\n",
            c->routine, c->batch ? " batch " : "", c->batch, wrong, what);
        failures++;
    }
    sl_json_end();
}

int main(int argc, char** argv)
{
    sl_prog = "tilecfg_check";
    sl_no_operands(argc, argv, 1);
    sl_cpus cpus;
    sl_online_cpus(&cpus);
    cpus.n = 1;
    const sl_features* f = sl_cpu_features();
    sl_meta_begin(&cpus);
    sl_json_bool("cpu_amx", f->amx_tile && f->amx_bf16);
    sl_json_int("page_size", sysconf(_SC_PAGESIZE));
    sl_json_end();

    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGILL, &sa, NULL);
    sigaction(SIGSEGV, &sa, NULL);

    /* round 1: the XTILEDATA permission is not requested yet, so LDTILECFG faults on every host */
    const int n = (int)(sizeof(cases) / sizeof(cases[0]));
    for (int i = 0; i < n; i++)
        check_case(&cases[i], 0);
    /* round 2, AMX hosts only: the CPU loads the config and STTILECFG reads it back */
    const char* why = NULL;
    const int hw = sl_have_amx(&why);
    for (int i = 0; hw && i < n; i++)
        if (cases[i].config_only)
            check_case(&cases[i], 1);
    sl_metric_begin("tilecfg_hardware_round", hw, "bool");
    sl_json_str("reason", hw ? "AMX with XTILEDATA permission: LDTILECFG + STTILECFG" : why);
    sl_json_end();
    if (failures)
        sl_check_failed(
            "%d tile config case(s) wrong (gcc dropping stores to the config?)", failures);
    return 0;
}
