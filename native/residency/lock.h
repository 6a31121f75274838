/* The userspace side of /dev/pseudo_lock (ABI v3, native/driver/pseudo_lock_sram/pl_abi.h):
 * open and check the capabilities, lock a slice into its owner core's L2, measure, close.
 * Closing the descriptor releases every region and worker CPU (the module's contract), so an
 * exit on any path leaks nothing. */
#ifndef RESIDENCY_LOCK_H
#define RESIDENCY_LOCK_H

#include "pl_abi.h"

#include <stddef.h>

typedef struct {
    int fd;
    const char* path;
    struct pl_caps caps;
} lock_dev;

typedef struct {
    __u32 id;
    struct pl_measure before, after;
} lock_region;

/* No device (module not loaded), or an ABI other than v3: exit 3. A slice over the lockable
 * L2 bytes per core: exit 2. */
void lock_open(lock_dev* d, const char* path, size_t slice);
/* want_ways > 0: the loaded module must reserve exactly that many L2 ways, else exit 3 (its
 * parameters are fixed at load; roles/sram_driver reloads it) */
void lock_check_ways(const lock_dev* d, int want_ways);
/* lock at level 2 on `cpu`, put `cpu` in the worker CLOS, measure (before) */
void lock_slice(lock_dev* d, lock_region* r, void* addr, size_t len, int cpu);
void lock_measure(lock_dev* d, lock_region* r, int after);
void lock_meta(const lock_dev* d); /* caps into the open meta record */
void lock_close(lock_dev* d);
double lock_held(const struct pl_measure* m); /* l1_l2 / lines (level 2) */

#endif
