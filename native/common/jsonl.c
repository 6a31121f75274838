/* The JSON-lines writer: one record per line on stdout, flushed per record. */
#include "sl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#ifndef SL_CFLAGS
#define SL_CFLAGS "unknown"
#endif
#ifdef __clang__
#define SL_COMPILER "clang " __clang_version__
#else
#define SL_COMPILER "gcc " __VERSION__
#endif

static char rec[16384];
static size_t used;
static int fields;

static void put(const char* s)
{
    const size_t n = strlen(s);
    if (used + n + 2 < sizeof(rec)) {
        memcpy(rec + used, s, n);
        used += n;
    }
}

static void put_escaped(const char* s)
{
    char one[8];
    put("\"");
    for (; *s; s++) {
        const unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            snprintf(one, sizeof(one), "\\%c", c);
        } else if (c < 0x20) {
            snprintf(one, sizeof(one), "\\u%04x", c);
        } else {
            one[0] = (char)c;
            one[1] = 0;
        }
        put(one);
    }
    put("\"");
}

static void key(const char* k)
{
    put(fields++ ? "," : "");
    put_escaped(k);
    put(":");
}

void sl_json_begin(const char* type)
{
    used = 0;
    fields = 0;
    put("{");
    sl_json_str("type", type);
}

void sl_json_str(const char* k, const char* v)
{
    key(k);
    put_escaped(v);
}

void sl_json_int(const char* k, long long v)
{
    char num[32];
    snprintf(num, sizeof(num), "%lld", v);
    key(k);
    put(num);
}

void sl_json_num(const char* k, double v)
{
    char num[40];
    if (isfinite(v))
        snprintf(num, sizeof(num), "%.6g", v);
    else
        snprintf(num, sizeof(num), "null");
    key(k);
    put(num);
}

void sl_json_bool(const char* k, bool v)
{
    key(k);
    put(v ? "true" : "false");
}

void sl_json_end(void)
{
    put("}");
    rec[used++] = '\n';
    fwrite(rec, 1, used, stdout);
    fflush(stdout);
}

void sl_meta_begin(const sl_cpus* cpus)
{
    char list[4096];
    sl_format_cpus(cpus->cpu, cpus->n, list, sizeof(list));
    sl_json_begin("meta");
    sl_json_str("binary", sl_prog);
    sl_json_str("version", SL_VERSION);
    sl_json_str("compiler", SL_COMPILER);
    sl_json_str("flags", SL_CFLAGS);
    sl_json_str("cpu_model", sl_cpu_features()->brand);
    sl_json_str("cpus", list);
    sl_json_int("threads", cpus->n);
    sl_json_num("tsc_ghz", sl_tsc_ghz());
    /* false: per-core times and cross-core spans from the TSC are not trustworthy */
    sl_json_bool("tsc_invariant", sl_cpu_features()->invariant_tsc);
}

void sl_metric_begin(const char* name, double value, const char* unit)
{
    sl_json_begin("metric");
    sl_json_str("name", name);
    sl_json_num("value", value);
    sl_json_str("unit", unit);
}
