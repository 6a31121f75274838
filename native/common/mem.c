/* Buffers with a chosen page mode, and the page size actually obtained (read from smaps). */
#include "sl.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define HUGE_2M (2u << 20)

const char* const sl_page_names[] = { "4k", "thp", "hugetlb", NULL };

void sl_alloc(sl_buf* b, size_t bytes, sl_page_mode mode)
{
    memset(b, 0, sizeof(*b));
    b->bytes = bytes;
    b->mode = mode;
    if (mode == SL_PAGE_HUGETLB) {
        b->mapped = (bytes + HUGE_2M - 1) / HUGE_2M * HUGE_2M;
        b->base = mmap(NULL, b->mapped, PROT_READ | PROT_WRITE,
            MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
        if (b->base == MAP_FAILED)
            sl_unsupported("--page hugetlb: mmap(MAP_HUGETLB) of %zu bytes failed (%s); reserve "
                           "2 MiB pages in /proc/sys/vm/nr_hugepages",
                b->mapped, strerror(errno));
        return;
    }
    /* over-map by 2 MiB and trim so the buffer starts on a 2 MiB boundary */
    const size_t want = (bytes + HUGE_2M - 1) / HUGE_2M * HUGE_2M;
    char* raw
        = mmap(NULL, want + HUGE_2M, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        sl_fatal("mmap of %zu bytes failed: %s", want, strerror(errno));
    char* aligned = (char*)(((uintptr_t)raw + HUGE_2M - 1) & ~(uintptr_t)(HUGE_2M - 1));
    if (aligned > raw)
        munmap(raw, (size_t)(aligned - raw));
    const size_t tail = (size_t)(raw + want + HUGE_2M - (aligned + want));
    if (tail)
        munmap(aligned + want, tail);
    b->base = aligned;
    b->mapped = want;
    madvise(b->base, b->mapped, mode == SL_PAGE_THP ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
}

void sl_free(sl_buf* b)
{
    if (b->base)
        munmap(b->base, b->mapped);
    b->base = NULL;
}

size_t sl_page_size_obtained(const sl_buf* b, double* thp_fraction)
{
    *thp_fraction = 0;
    FILE* f = fopen("/proc/self/smaps", "r");
    if (!f)
        return (size_t)sysconf(_SC_PAGESIZE);
    const uintptr_t addr = (uintptr_t)b->base;
    char line[512];
    int inside = 0;
    size_t kernel_page_kb = 0, size_kb = 0, thp_kb = 0;
    while (fgets(line, sizeof(line), f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            if (inside)
                break;
            inside = addr >= lo && addr < hi;
            continue;
        }
        if (!inside)
            continue;
        size_t v;
        if (sscanf(line, "Size: %zu kB", &v) == 1)
            size_kb = v;
        else if (sscanf(line, "KernelPageSize: %zu kB", &v) == 1)
            kernel_page_kb = v;
        else if (sscanf(line, "AnonHugePages: %zu kB", &v) == 1)
            thp_kb = v;
    }
    fclose(f);
    if (size_kb)
        *thp_fraction = (double)thp_kb / (double)size_kb;
    if (kernel_page_kb > 4)
        return kernel_page_kb * 1024; /* hugetlb */
    if (*thp_fraction >= 0.5)
        return HUGE_2M;
    return kernel_page_kb ? kernel_page_kb * 1024 : (size_t)sysconf(_SC_PAGESIZE);
}

/* ---- watchdog ---- */

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = ": failed: watchdog expired (a participant made no progress)\n";
    (void)!write(2, sl_prog, strlen(sl_prog));
    (void)!write(2, msg, sizeof(msg) - 1);
    _exit(SL_EXIT_CHECK);
}

void sl_watchdog(double seconds)
{
    if (seconds <= 0)
        return;
    signal(SIGALRM, on_alarm);
    alarm((unsigned)(seconds + 0.999));
}

void* sl_zalloc_lines(size_t bytes)
{
    bytes = (bytes + SL_PAD - 1) / SL_PAD * SL_PAD + SL_PAD;
    void* p = aligned_alloc(SL_PAD, bytes);
    if (!p)
        sl_fatal("out of memory (%zu bytes)", bytes);
    memset(p, 0, bytes);
    return p;
}

void sl_barrier_init(sl_barrier* b, int n)
{
    b->count = 0;
    b->sense = 0;
    b->n = n;
}
