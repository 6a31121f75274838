/* CPU lists in kernel cpulist syntax, pinning, NUMA node lookup, CPUID and AMX permission. */
#include "sl.h"

#include <cpuid.h>
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Parses "0-3,8,10-15:2" into out; returns NULL or a static reason. No online check. */
static const char* parse_list(const char* text, sl_cpus* out)
{
    static char reason[160];
    out->n = 0;
    const char* p = text;
    if (!*p)
        return "empty list";
    while (*p) {
        char* end;
        if (!isdigit((unsigned char)*p))
            goto bad;
        long lo = strtol(p, &end, 10), hi = lo, stride = 1;
        p = end;
        if (*p == '-') {
            p++;
            if (!isdigit((unsigned char)*p))
                goto bad;
            hi = strtol(p, &end, 10);
            p = end;
            if (*p == ':') {
                p++;
                if (!isdigit((unsigned char)*p))
                    goto bad;
                stride = strtol(p, &end, 10);
                p = end;
            }
        }
        if (hi < lo || stride < 1)
            goto bad;
        if (hi >= SL_MAX_CPUS) {
            snprintf(reason, sizeof(reason), "cpu %ld is beyond the %d CPUs this build handles", hi,
                SL_MAX_CPUS);
            return reason;
        }
        for (long c = lo; c <= hi; c += stride) {
            for (int i = 0; i < out->n; i++)
                if (out->cpu[i] == c) {
                    snprintf(reason, sizeof(reason), "cpu %ld is listed twice", c);
                    return reason;
                }
            out->cpu[out->n++] = (int)c;
        }
        if (*p == ',')
            p++;
        else if (*p)
            goto bad;
    }
    return NULL;
bad:
    return "expected kernel cpulist syntax like 0-3,8";
}

int sl_online_cpus(sl_cpus* out)
{
    char line[4096] = "";
    FILE* f = fopen("/sys/devices/system/cpu/online", "r");
    if (f) {
        if (!fgets(line, sizeof(line), f))
            line[0] = 0;
        fclose(f);
    }
    line[strcspn(line, "\n")] = 0;
    if (!line[0] || parse_list(line, out)) {
        const long n = sysconf(_SC_NPROCESSORS_ONLN);
        out->n = 0;
        for (long c = 0; c < n && c < SL_MAX_CPUS; c++)
            out->cpu[out->n++] = (int)c;
    }
    return out->n;
}

void sl_parse_cpus(const char* flag, const char* text, sl_cpus* out)
{
    const char* why = parse_list(text, out);
    if (why)
        sl_usage_error("%s '%s': %s", flag, text, why);
    static sl_cpus online;
    sl_online_cpus(&online);
    char olist[256];
    sl_format_cpus(online.cpu, online.n, olist, sizeof(olist));
    if (out->n > online.n)
        sl_usage_error("%s '%s': %d CPUs listed but only %d exist online (%s)", flag, text, out->n,
            online.n, olist);
    for (int i = 0; i < out->n; i++) {
        bool ok = false;
        for (int j = 0; j < online.n && !ok; j++)
            ok = online.cpu[j] == out->cpu[i];
        if (!ok)
            sl_usage_error(
                "%s '%s': cpu %d is not online (online: %s)", flag, text, out->cpu[i], olist);
    }
}

void sl_format_cpus(const int* cpus, int n, char* buf, size_t len)
{
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < n && used < len;) {
        int j = i;
        while (j + 1 < n && cpus[j + 1] == cpus[j] + 1)
            j++;
        int w;
        if (j > i)
            w = snprintf(buf + used, len - used, "%s%d-%d", used ? "," : "", cpus[i], cpus[j]);
        else
            w = snprintf(buf + used, len - used, "%s%d", used ? "," : "", cpus[i]);
        if (w < 0)
            break;
        used += (size_t)w;
        i = j + 1;
    }
}

int sl_cpu_node(int cpu)
{
    char path[128];
    for (int node = 0; node < 64; node++) {
        snprintf(path, sizeof(path), "/sys/devices/system/node/node%d/cpu%d", node, cpu);
        if (access(path, F_OK) == 0)
            return node;
    }
    return 0;
}

void sl_pin_self(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    const int rc = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
    if (rc)
        sl_fatal("cannot pin to cpu %d: %s", cpu, strerror(rc));
}

/* ---- CPUID ---- */

static uint64_t xgetbv0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

/* SL_CPU_HIDE=avx512,amx,...: run as if the CPU lacked these (they can only be taken away), as
 * glibc's hwcaps tunable does: to compare paths on one host, and so the tests reach the
 * "not available on this host" branches on any machine */
static const char* const hide_names[] = { "avx2", "avx512", "amx", "waitpkg", "cldemote", NULL };
enum { HIDE_AVX2 = 1, HIDE_AVX512 = 2, HIDE_AMX = 4, HIDE_WAITPKG = 8, HIDE_CLDEMOTE = 16 };

static unsigned hidden_features(void)
{
    const char* env = getenv("SL_CPU_HIDE");
    unsigned mask = 0;
    while (env && *env) {
        const size_t n = strcspn(env, ",");
        int i = 0;
        while (hide_names[i] && !(strlen(hide_names[i]) == n && !strncmp(env, hide_names[i], n)))
            i++;
        if (n && !hide_names[i])
            sl_usage_error("SL_CPU_HIDE: unknown feature '%.*s' (expected a comma list of avx2, "
                           "avx512, amx, waitpkg, cldemote)",
                (int)n, env);
        if (n)
            mask |= 1u << i;
        env += n + (env[n] == ',');
    }
    return mask;
}

const sl_features* sl_cpu_features(void)
{
    static sl_features f;
    static int done;
    if (done)
        return &f;
    done = 1;
    unsigned a, b, c, d, max_leaf = __get_cpuid_max(0, NULL);
    bool osxsave = false;
    if (max_leaf >= 1) {
        __cpuid(1, a, b, c, d);
        osxsave = c & (1u << 27);
    }
    const uint64_t xcr0 = osxsave ? xgetbv0() : 0;
    f.os_avx512 = (xcr0 & 0xe6) == 0xe6;
    f.os_amx = (xcr0 & (3u << 17)) == (3u << 17);
    if (max_leaf >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        f.avx2 = b & (1u << 5);
        f.avx512f = b & (1u << 16);
        f.avx512bw = b & (1u << 30);
        f.amx_bf16 = d & (1u << 22);
        f.amx_tile = d & (1u << 24);
        f.waitpkg = c & (1u << 5);
        f.cldemote = c & (1u << 25);
        __cpuid_count(7, 1, a, b, c, d);
        f.avx512bf16 = a & (1u << 5);
    }
    const unsigned max_ext = __get_cpuid_max(0x80000000, NULL);
    if (max_ext >= 0x80000007) {
        __cpuid(0x80000007, a, b, c, d);
        f.invariant_tsc = d & (1u << 8);
    }
    if (max_ext >= 0x80000004) {
        unsigned* w = (unsigned*)f.brand;
        for (unsigned i = 0; i < 3; i++)
            __cpuid(0x80000002 + i, w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]);
        f.brand[sizeof(f.brand) - 1] = 0;
    }
    const unsigned hide = hidden_features();
    f.hidden = hide != 0;
    if (hide & HIDE_AVX2)
        f.avx2 = false;
    if (hide & HIDE_AVX512)
        f.avx512f = f.avx512bw = f.avx512bf16 = false;
    if (hide & HIDE_AMX)
        f.amx_tile = f.amx_bf16 = false;
    if (hide & HIDE_WAITPKG)
        f.waitpkg = false;
    if (hide & HIDE_CLDEMOTE)
        f.cldemote = false;
    return &f;
}

bool sl_have_avx2(const char** why)
{
    const sl_features* f = sl_cpu_features();
    if (!f->avx2)
        *why = f->hidden ? "CPU lacks AVX2 (or SL_CPU_HIDE hides it)" : "CPU lacks AVX2";
    return f->avx2;
}

bool sl_have_waitpkg(const char** why)
{
    if (!sl_cpu_features()->waitpkg)
        *why = "no waitpkg (CPUID.7.0:ECX[5], UMONITOR/UMWAIT)";
    return sl_cpu_features()->waitpkg;
}

bool sl_have_avx512(const char** why)
{
    const sl_features* f = sl_cpu_features();
    if (!f->avx512f || !f->avx512bw) {
        *why = f->hidden ? "CPU lacks AVX-512 F/BW (or SL_CPU_HIDE hides it)"
                         : "CPU lacks AVX-512 F/BW";
        return false;
    }
    if (!f->os_avx512) {
        *why = "the OS does not enable AVX-512 state (XCR0)";
        return false;
    }
    return true;
}

bool sl_have_avx512bf16(const char** why)
{
    if (!sl_have_avx512(why))
        return false;
    if (!sl_cpu_features()->avx512bf16) {
        *why = "CPU lacks AVX512_BF16 (VDPBF16PS)";
        return false;
    }
    return true;
}

#ifndef ARCH_REQ_XCOMP_PERM
#define ARCH_REQ_XCOMP_PERM 0x1023
#endif
#define XFEATURE_XTILEDATA 18

bool sl_have_amx(const char** why)
{
#ifdef SL_NO_AMX_COMPILER
    /* native/Makefile found no AMX in the compiler: the AMX units are placeholders */
    *why = "the compiler that built this lacks AMX (-mamx-bf16: gcc >= 11, clang >= 14)";
    return false;
#endif
    const sl_features* f = sl_cpu_features();
    if (!f->amx_tile || !f->amx_bf16) {
        *why = f->hidden ? "CPU lacks AMX-TILE/AMX-BF16 (or SL_CPU_HIDE hides it)"
                         : "CPU lacks AMX-TILE/AMX-BF16 (CPUID.7.0:EDX bits 24/22)";
        return false;
    }
    static int granted = -1;
    if (granted < 0)
        granted = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
    if (!granted) {
        *why = "the kernel refused arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA)";
        return false;
    }
    return true;
}
