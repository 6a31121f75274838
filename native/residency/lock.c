/* /dev/pseudo_lock from userspace (see lock.h). */
#include "lock.h"

#include "sl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

void lock_open(lock_dev* d, const char* path, size_t slice)
{
    memset(d, 0, sizeof(*d));
    d->path = path;
    d->fd = open(path, O_RDWR | O_CLOEXEC);
    if (d->fd < 0) {
        if (errno == ENOENT)
            sl_unsupported("pseudo-lock driver not loaded (%s does not exist; load "
                           "pseudo_lock_sram.ko, roles/sram_driver)",
                path);
        sl_unsupported("cannot open the pseudo-lock device %s: %s", path, strerror(errno));
    }
    if (ioctl(d->fd, PL_IOC_CAPS, &d->caps) != 0)
        sl_unsupported(
            "%s: PL_IOC_CAPS failed (%s): not the pseudo_lock_sram driver", path, strerror(errno));
    if (d->caps.version != PL_ABI_VERSION)
        sl_unsupported(
            "%s speaks ABI v%u, this build needs v%d", path, d->caps.version, PL_ABI_VERSION);
    if (!d->caps.l2_cbm_lock)
        sl_unsupported("%s: the module was loaded with l2_ways=0 (no L2 locking)", path);
    if (slice > d->caps.l2_lock_bytes_per_core)
        sl_usage_error("--slice %zu: larger than the lockable L2 capacity per core, %llu bytes "
                       "(7/8 of the locked ways, L2 lock mask %#x)",
            slice, (unsigned long long)d->caps.l2_lock_bytes_per_core, d->caps.l2_cbm_lock);
}

void lock_check_ways(const lock_dev* d, int want_ways)
{
    const int have = __builtin_popcount(d->caps.l2_cbm_lock);
    if (want_ways > 0 && have != want_ways)
        sl_unsupported("%s reserves %d L2 ways (lock mask %#x), --lock-ways asks for %d: reload "
                       "the module with l2_ways=%d (roles/sram_driver)",
            d->path, have, d->caps.l2_cbm_lock, want_ways, want_ways);
}

static _Noreturn void lock_failed(const char* what, int cpu, int err)
{
    switch (err) {
    case ENOSPC:
        sl_usage_error("--lock: cpu %d: the core's lockable L2 budget is used up (ENOSPC; "
                       "another region on this core or its SMT sibling?)",
            cpu);
    case EXDEV:
        sl_check_failed("--lock: cpu %d: slice pages are not on the cpu's node (EXDEV)", cpu);
    case EOPNOTSUPP:
        sl_unsupported("--lock: the driver has no lock ways at level 2 (EOPNOTSUPP)");
    default:
        sl_check_failed("--lock: cpu %d: %s failed: %s", cpu, what, strerror(err));
    }
}

void lock_slice(lock_dev* d, lock_region* r, void* addr, size_t len, int cpu)
{
    struct pl_lock_req req = { .addr = (__u64)(uintptr_t)addr, .len = len, .cpu = cpu, .level = 2 };
    if (ioctl(d->fd, PL_IOC_LOCK, &req) != 0)
        lock_failed("PL_IOC_LOCK", cpu, errno);
    r->id = req.id;
    struct pl_clos_req w = { .cpu = cpu, .on = 1 };
    if (ioctl(d->fd, PL_IOC_WORKER, &w) != 0)
        lock_failed("PL_IOC_WORKER", cpu, errno);
    lock_measure(d, r, 0);
}

void lock_measure(lock_dev* d, lock_region* r, int after)
{
    struct pl_measure* m = after ? &r->after : &r->before;
    memset(m, 0, sizeof(*m));
    m->id = r->id;
    if (ioctl(d->fd, PL_IOC_MEASURE, m) != 0)
        lock_failed("PL_IOC_MEASURE", -1, errno);
}

double lock_held(const struct pl_measure* m)
{
    return m->lines ? (double)m->l1_l2 / (double)m->lines : 0;
}

void lock_meta(const lock_dev* d)
{
    sl_json_str("lock_device", d->path);
    sl_json_int("lock_abi", d->caps.version);
    sl_json_int("l2_cbm_full", d->caps.l2_cbm_full);
    sl_json_int("l2_cbm_lock", d->caps.l2_cbm_lock);
    sl_json_int("l2_lock_bytes_per_core", (long long)d->caps.l2_lock_bytes_per_core);
}

void lock_close(lock_dev* d)
{
    if (d->fd >= 0)
        close(d->fd);
    d->fd = -1;
}
