/* Errors with the contract's exit codes, and flag value parsing. Every message is one line. */
#include "sl.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char* sl_prog = "native";

static _Noreturn void die(int code, const char* what, const char* fmt, va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    for (char* p = msg; *p; p++)
        if (*p == '\n')
            *p = ' ';
    fflush(stdout);
    fprintf(stderr, "%s: %s%s\n", sl_prog, what, msg);
    exit(code);
}

void sl_usage_error(const char* fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    die(SL_EXIT_USAGE, "error: ", fmt, ap);
}

void sl_unsupported(const char* fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    die(SL_EXIT_UNSUPPORTED, "not available on this host: ", fmt, ap);
}

void sl_check_failed(const char* fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    die(SL_EXIT_CHECK, "self-check failed: ", fmt, ap);
}

void sl_fatal(const char* fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    die(SL_EXIT_CHECK, "failed: ", fmt, ap);
}

size_t sl_parse_size(const char* flag, const char* text)
{
    char* end = NULL;
    errno = 0;
    const double v = strtod(text, &end);
    if (end == text || errno || !(v >= 0))
        sl_usage_error("%s: expected a size like 4096, 16K, 1M or 2G, got '%s'", flag, text);
    double mult = 1;
    switch (*end) {
    case 'k':
    case 'K':
        mult = 1024.0;
        end++;
        break;
    case 'm':
    case 'M':
        mult = 1024.0 * 1024;
        end++;
        break;
    case 'g':
    case 'G':
        mult = 1024.0 * 1024 * 1024;
        end++;
        break;
    default:
        break;
    }
    if (mult > 1 && (!strcmp(end, "iB") || !strcmp(end, "B") || !strcmp(end, "ib")))
        end += strlen(end);
    if (*end)
        sl_usage_error("%s: expected a size like 4096, 16K, 1M or 2G, got '%s'", flag, text);
    const double bytes = v * mult;
    if (bytes < 1)
        sl_usage_error("%s: must be at least 1, got '%s'", flag, text); /* bytes or tokens */
    if (bytes > (double)(1ULL << 46))
        sl_usage_error("%s: '%s' is larger than 64Ti", flag, text);
    return (size_t)bytes;
}

long sl_parse_long(const char* flag, const char* text, long min, long max)
{
    char* end = NULL;
    errno = 0;
    const long v = strtol(text, &end, 10);
    if (end == text || *end || errno)
        sl_usage_error("%s: expected an integer, got '%s'", flag, text);
    if (v < min || v > max)
        sl_usage_error("%s: expected %ld..%ld, got %ld", flag, min, max, v);
    return v;
}

double sl_parse_double(const char* flag, const char* text, double min, double max)
{
    char* end = NULL;
    errno = 0;
    const double v = strtod(text, &end);
    if (end == text || *end || errno || !isfinite(v))
        sl_usage_error("%s: expected a number, got '%s'", flag, text);
    if (v < min || v > max)
        sl_usage_error("%s: expected %g..%g, got %g", flag, min, max, v);
    return v;
}

int sl_parse_choice(const char* flag, const char* text, const char* const* choices)
{
    char list[512] = "";
    for (int i = 0; choices[i]; i++) {
        if (!strcmp(text, choices[i]))
            return i;
        const size_t used = strlen(list);
        snprintf(list + used, sizeof(list) - used, "%s%s", i ? ", " : "", choices[i]);
    }
    sl_usage_error("%s: unknown value '%s' (expected one of: %s)", flag, text, list);
}

void sl_bad_option(char** argv, int optind_now, int optopt_now, int missing_arg)
{
    const char* arg = argv[optind_now - 1];
    if (missing_arg)
        sl_usage_error("option '%s' needs a value (see --help)", arg);
    if (optopt_now)
        sl_usage_error("unknown option '-%c' (see --help)", optopt_now);
    sl_usage_error("unknown option '%s' (see --help)", arg);
}

void sl_no_operands(int argc, char** argv, int optind_now)
{
    if (optind_now < argc)
        sl_usage_error("unexpected argument '%s' (see --help)", argv[optind_now]);
}

static void parse_value(const sl_opt* o, const char* text)
{
    char flag[64];
    snprintf(flag, sizeof(flag), "--%s", o->name);
    switch (o->kind) {
    case SL_OPTK_SET:
        *(int*)o->dest = o->value;
        break;
    case SL_OPTK_STR:
        *(const char**)o->dest = text;
        break;
    case SL_OPTK_INT:
        *(int*)o->dest = (int)sl_parse_long(flag, text, (long)o->min, (long)o->max);
        break;
    case SL_OPTK_UINT:
        *(unsigned*)o->dest = (unsigned)sl_parse_long(flag, text, (long)o->min, (long)o->max);
        break;
    case SL_OPTK_NUM:
        *(double*)o->dest = sl_parse_double(flag, text, o->min, o->max);
        break;
    case SL_OPTK_SIZE:
        *(size_t*)o->dest = sl_parse_size(flag, text);
        break;
    case SL_OPTK_KIB:
        *(size_t*)o->dest = (size_t)(sl_parse_double(flag, text, o->min, o->max) * 1024);
        break;
    case SL_OPTK_CHOICE:
        *(int*)o->dest = sl_parse_choice(flag, text, o->choices);
        break;
    case SL_OPTK_PAGE:
        *(sl_page_mode*)o->dest = (sl_page_mode)sl_parse_choice(flag, text, sl_page_names);
        break;
    case SL_OPTK_CPUS:
        sl_parse_cpus(flag, text, (sl_cpus*)o->dest);
        break;
    case SL_OPTK_CALL:
        o->call(flag, text, o->dest);
        break;
    }
    if (o->seen)
        *o->seen = 1;
}

void sl_parse_options(int argc, char** argv, const char* usage, const sl_opt* opts)
{
    enum { FIRST = 256 }; /* getopt_long's value for opts[i] is FIRST + i */
    int n = 0;
    while (opts[n].name)
        n++;
    struct option* longs = calloc((size_t)n + 2, sizeof(*longs));
    if (!longs)
        sl_fatal("out of memory parsing options");
    for (int i = 0; i < n; i++) {
        if ((opts[i].has_arg == no_argument) != (opts[i].kind == SL_OPTK_SET))
            sl_fatal("option table: --%s: has_arg does not match its value", opts[i].name);
        longs[i].name = opts[i].name;
        longs[i].has_arg = opts[i].has_arg;
        longs[i].val = opts[i].letter ? opts[i].letter : FIRST + i;
    }
    longs[n] = (struct option) { "help", no_argument, 0, 'h' };
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", longs, NULL)) != -1) {
        if (c == 'h') {
            fputs(usage, stdout);
            exit(0);
        }
        int i = c - FIRST;
        for (int j = 0; j < n && c < FIRST; j++)
            i = c == opts[j].letter ? j : i;
        if (i < 0 || i >= n)
            sl_bad_option(argv, optind, optopt, c == ':');
        parse_value(&opts[i], optarg);
    }
    free(longs);
    sl_no_operands(argc, argv, optind);
}
