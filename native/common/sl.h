/* socketlab native common library: CLI, CPU lists, pinning, memory, TSC, CPUID, JSON lines. */
#ifndef SL_H
#define SL_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define SL_VERSION "0.1.0"
#define SL_CACHE_LINE 64
#define SL_PAD 128 /* shared flags sit alone in 128 B (adjacent-line prefetch) */
#define SL_MAX_CPUS 1024

/* Exit codes of every binary (the JSON-lines contract). */
enum { SL_EXIT_OK = 0, SL_EXIT_CHECK = 1, SL_EXIT_USAGE = 2, SL_EXIT_UNSUPPORTED = 3 };

#define SL_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define SL_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))
#define SL_TARGET_AVX512BF16                                                                       \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")))

/* acc (__m512) += VDPBF16PS(w (__m512i, 32 bf16), the bf16 pair at xpair broadcast to all
 * lanes). Inline asm for every compiler: clang 16 crashes in its backend on any cast to
 * __m512bh, and the {1to16} memory form is the instruction the kernels want anyway. */
#define SL_DPBF16_BCAST(acc, w, xpair)                                                             \
    __asm__("vdpbf16ps %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const uint32_t*)(xpair)))

/* ---- bf16 (the one conversion every kernel's data and reference share) ---- */
static inline float sl_bf16_to_f32(uint16_t h)
{
    const uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}
/* round to nearest even (finite inputs: the generated test data) */
static inline uint16_t sl_f32_to_bf16(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof(bits));
    return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

/* ---- errors and CLI (cli.c) ---- */
extern const char* sl_prog;
_Noreturn void sl_usage_error(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
_Noreturn void sl_unsupported(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
_Noreturn void sl_check_failed(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
_Noreturn void sl_fatal(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
/* "4096", "16K", "1M", "1MiB", "2G" -> a count (bytes, or kvstream's tokens) with binary
 * multipliers; 0 or junk is a usage error naming the flag. */
size_t sl_parse_size(const char* flag, const char* text);
long sl_parse_long(const char* flag, const char* text, long min, long max);
double sl_parse_double(const char* flag, const char* text, double min, double max);
/* Picks a name out of a NULL-terminated table or exits 2 listing the choices. */
int sl_parse_choice(const char* flag, const char* text, const char* const* choices);
/* Call from the getopt '?' / ':' branch: one line naming the bad option, exit 2. */
_Noreturn void sl_bad_option(char** argv, int optind_now, int optopt_now, int missing_arg);
/* Call after the getopt loop: a leftover operand is a usage error (exit 2). */
void sl_no_operands(int argc, char** argv, int optind_now);

/* The option table every binary's CLI is declared with: one row per flag, getopt's name and
 * has_arg followed by how its value is parsed and where it goes (an SL_* below), ended by
 * SL_OPT_END:
 *     const sl_opt opts[] = { { "steps", required_argument, SL_INT(&g.steps, 1, 100000000) },
 *         { "timeout", required_argument, SL_TIMEOUT(&timeout) },
 *         { "lock", no_argument, SL_SET(&g.lock, 1) }, SL_OPT_END };
 *     sl_parse_options(argc, argv, usage, opts);
 * sl_parse_options walks argv with getopt_long, in argv order, parsing each value into its
 * destination (a bad value is a usage error naming --flag); --help / -h prints `usage` and exits
 * 0; an unknown option, a missing value or a leftover operand is a one-line usage error (exit 2).
 * `.seen = &given` after the SL_* sets given to 1 when the flag is given; `.letter` (no_argument
 * flags) below. */
typedef enum {
    SL_OPTK_SET = 1, /* no value: *(int*)dest = value */
    SL_OPTK_STR, /* const char**: the text as given (parsed later by the binary) */
    SL_OPTK_INT, /* int*: sl_parse_long in [min, max] */
    SL_OPTK_UINT, /* unsigned*: sl_parse_long in [min, max] */
    SL_OPTK_NUM, /* double*: sl_parse_double in [min, max] */
    SL_OPTK_SIZE, /* size_t*: sl_parse_size */
    SL_OPTK_KIB, /* size_t*: sl_parse_double in [min, max] KiB, in bytes */
    SL_OPTK_CHOICE, /* int*: the index in the NULL-terminated `choices` */
    SL_OPTK_PAGE, /* sl_page_mode*: one of sl_page_names */
    SL_OPTK_CPUS, /* sl_cpus*: sl_parse_cpus */
    SL_OPTK_CALL, /* call("--flag", text, dest) */
} sl_opt_kind;
typedef struct {
    const char* name; /* "steps": the flag --steps */
    int has_arg; /* no_argument for SL_SET, else required_argument */
    sl_opt_kind kind;
    void* dest;
    double min, max; /* SL_INT, SL_UINT, SL_NUM, SL_KIB */
    const char* const* choices; /* SL_CHOICE */
    int value; /* SL_SET */
    void (*call)(const char* flag, const char* text, void* dest); /* SL_CALL */
    int* seen; /* optional: set to 1 when the flag is given */
    /* optional, no_argument flags: getopt_long's value for the flag, so `--flag=x` stays
     * "unknown option '-<letter>'" as with the getopt tables the binaries had */
    char letter;
} sl_opt;
#define SL_SET(p, v) .kind = SL_OPTK_SET, .dest = (p), .value = (v)
#define SL_STR(p) .kind = SL_OPTK_STR, .dest = (p)
#define SL_INT(p, lo, hi) .kind = SL_OPTK_INT, .dest = (p), .min = (lo), .max = (hi)
#define SL_UINT(p, lo, hi) .kind = SL_OPTK_UINT, .dest = (p), .min = (lo), .max = (hi)
#define SL_NUM(p, lo, hi) .kind = SL_OPTK_NUM, .dest = (p), .min = (lo), .max = (hi)
#define SL_SIZE(p) .kind = SL_OPTK_SIZE, .dest = (p)
#define SL_KIB(p, lo, hi) .kind = SL_OPTK_KIB, .dest = (p), .min = (lo), .max = (hi)
#define SL_CHOICE(p, names) .kind = SL_OPTK_CHOICE, .dest = (p), .choices = (names)
#define SL_PAGE(p) .kind = SL_OPTK_PAGE, .dest = (p)
#define SL_CPUS(p) .kind = SL_OPTK_CPUS, .dest = (p)
#define SL_CALL(fn, p) .kind = SL_OPTK_CALL, .dest = (p), .call = (fn)
/* the values the binaries share, with the one range each has everywhere */
#define SL_TIMEOUT(p) SL_NUM(p, 0, 1e6)
#define SL_MAX_REL_RMS(p) SL_NUM(p, 0, 1e9)
#define SL_MIN_COSINE(p) SL_NUM(p, -1, 1)
/* clang-format off */
#define SL_OPT_END { .name = NULL }
/* clang-format on */
void sl_parse_options(int argc, char** argv, const char* usage, const sl_opt* opts);

/* ---- CPU lists (cpu.c) ---- */
typedef struct {
    int n;
    int cpu[SL_MAX_CPUS];
} sl_cpus;
/* Kernel cpulist syntax "0-3,8,10-15:2". Every CPU must be online; duplicates, more CPUs
 * than are online, or ids out of range are usage errors naming the flag. */
void sl_parse_cpus(const char* flag, const char* text, sl_cpus* out);
void sl_format_cpus(const int* cpus, int n, char* buf, size_t len);
int sl_online_cpus(sl_cpus* out); /* from /sys/devices/system/cpu/online */
int sl_cpu_node(int cpu); /* NUMA node of a cpu from sysfs, 0 when unknown */
void sl_pin_self(int cpu); /* exits 1 when the kernel refuses */

/* ---- CPUID (cpu.c) ---- */
typedef struct {
    bool avx2, avx512f, avx512bw, avx512bf16, amx_tile, amx_bf16, os_avx512, os_amx;
    bool invariant_tsc; /* CPUID.80000007H:EDX[8]: TSC rate is constant and synchronised */
    bool cldemote; /* CPUID.7.0:ECX[25]; without it CLDEMOTE executes as a NOP */
    bool waitpkg; /* CPUID.7.0:ECX[5]: UMONITOR / UMWAIT / TPAUSE */
    bool hidden; /* SL_CPU_HIDE took some of them away (cpu.c) */
    char brand[64];
} sl_features;
const sl_features* sl_cpu_features(void);
/* true when AVX-512 F+BW can run here; *why gets a reason otherwise */
bool sl_have_avx512(const char** why);
bool sl_have_avx512bf16(const char** why);
bool sl_have_avx2(const char** why);
bool sl_have_waitpkg(const char** why);
/* CPUID says AMX-TILE+BF16 and the kernel grants XTILEDATA via arch_prctl */
bool sl_have_amx(const char** why);

/* ---- TSC (tsc.c) ---- */
static inline uint64_t sl_rdtsc(void)
{
    uint32_t lo, hi;
    __asm__ volatile("lfence\n\trdtsc" : "=a"(lo), "=d"(hi)::"memory");
    return ((uint64_t)hi << 32) | lo;
}
double sl_tsc_ghz(void); /* calibrated once against CLOCK_MONOTONIC */
double sl_now_s(void); /* CLOCK_MONOTONIC seconds */

/* ---- memory (mem.c) ---- */
typedef enum { SL_PAGE_4K, SL_PAGE_THP, SL_PAGE_HUGETLB } sl_page_mode;
extern const char* const sl_page_names[]; /* "4k", "thp", "hugetlb", NULL */
typedef struct {
    void* base;
    size_t bytes; /* usable bytes asked for */
    size_t mapped;
    sl_page_mode mode;
} sl_buf;
/* mmap with the page mode; call from the thread that owns it, after pinning, then touch.
 * hugetlb without reserved pages exits 3. */
void sl_alloc(sl_buf* b, size_t bytes, sl_page_mode mode);
void sl_free(sl_buf* b);
/* Page size actually backing the buffer (smaps KernelPageSize, or 2 MiB when THP backs most
 * of it); *thp_fraction gets AnonHugePages / mapping size. */
size_t sl_page_size_obtained(const sl_buf* b, double* thp_fraction);

/* ---- JSON lines (jsonl.c); one record at a time, from one thread ---- */
void sl_json_begin(const char* type);
void sl_json_str(const char* key, const char* value);
void sl_json_int(const char* key, long long value);
void sl_json_num(const char* key, double value);
void sl_json_bool(const char* key, bool value);
void sl_json_end(void);
/* meta record head: type, binary, version, compiler, flags, cpus, tsc_ghz, tsc_invariant;
 * caller adds the
 * rest (page_size ...) then sl_json_end(). */
void sl_meta_begin(const sl_cpus* cpus);
/* metric record head: type, name, value, unit; caller adds dims then sl_json_end(). */
void sl_metric_begin(const char* name, double value, const char* unit);

/* ---- stats (stats.c) ---- */
int sl_cmp_double(const void* a, const void* b);
/* q in [0,1], linear interpolation like numpy; sorts v in place */
double sl_quantile(double* v, int n, double q);
/* An output compared element by element with its reference: relative RMS error and cosine. */
typedef struct {
    double err2, ref2, dot, out2;
} sl_match;
void sl_match_add(sl_match* m, double got, double want);
double sl_match_rel_rms(const sl_match* m);
double sl_match_cosine(const sl_match* m);
/* Per step, us from the earliest worker start to the latest worker end. t0/t1 hold `steps`
 * TSC stamps per worker, worker-major (t0[i * steps + s]), so each worker writes only its own
 * lines while timed. */
void sl_step_spans_us(const uint64_t* t0, const uint64_t* t1, int workers, int steps, double* us);

/* ---- spin-waits (spin.c: why fma512 and amx) ---- */
enum { SL_SPIN_PAUSE, SL_SPIN_FMA512, SL_SPIN_AMX };
extern const char* const sl_spin_names[];
/* process-wide: every poll is PAUSE, plus one 512-bit FMA (fma512: only where AVX-512 runs),
 * plus amx_tick() every 8th poll (amx: the caller's tile product on its own config) */
void sl_spin_set(int mode, void (*amx_tick)(void));
/* --spin auto|pause|fma512|amx for SL_CALL: stores SL_SPIN_* or -1 (auto) in an int */
void sl_parse_spin(const char* flag, const char* text, void* dest);
/* --spin checked against this host, the same in every binary: `requested` (-1 = auto), fma512
 * and amx need AVX-512 (exit 3), amx needs `amx_kernel` (the flag that selects it; NULL where
 * the binary has none) running on real AMX (exit 2). auto gives `automatic`, the mode the
 * binary measured to help (pause where the host lacks AVX-512). Returns it; sets nothing. */
int sl_spin_resolve(int requested, int automatic, bool real_amx, const char* amx_kernel);
void sl_spin_relax(void);
void sl_spin_until(const volatile uint64_t* p, uint64_t target); /* until *p >= target */

/* ---- barriers ---- */
typedef struct {
    _Alignas(SL_PAD) volatile int count;
    _Alignas(SL_PAD) volatile int sense;
    int n;
} sl_barrier;
void sl_barrier_init(sl_barrier* b, int n);
/* local_sense: per-thread, starts at 0 */
static inline void sl_barrier_wait(sl_barrier* b, int* local_sense)
{
    const int s = !*local_sense;
    *local_sense = s;
    if (__atomic_add_fetch(&b->count, 1, __ATOMIC_ACQ_REL) == b->n) {
        __atomic_store_n(&b->count, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&b->sense, s, __ATOMIC_RELEASE);
    } else {
        while (__atomic_load_n(&b->sense, __ATOMIC_ACQUIRE) != s)
            sl_spin_relax();
    }
}

/* Watchdog: after the given seconds the process prints one line and exits 1, so a stuck
 * spin (a participant descheduled forever) never hangs a caller. 0 disables. */
void sl_watchdog(double seconds);
/* zeroed memory that starts a SL_PAD line pair and ends on one (rounded up), so no other
 * allocation shares its first or last line; exits on failure. Touched here: homed on the
 * caller's node */
void* sl_zalloc_lines(size_t bytes);

#endif
