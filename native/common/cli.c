/* Errors with the contract's exit codes, and flag value parsing. Every message is one line. */
#include "sl.h"

#include <errno.h>
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
