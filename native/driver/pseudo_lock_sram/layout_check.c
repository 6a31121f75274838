/* Userspace driver for the module's pure parts (pl_layout.h) and its ABI header (pl_abi.h),
 * compiled from the same headers as the module. tests/test_driver.py checks its answers against
 * values computed independently (published capacities, ioctl numbers from the _IOC formula).
 *   layout_check abi
 *   layout_check layout RES_EBX L3_EAX L3_EBX L2_EAX L2_WAYS L3_WAYS L3_IO L2_BYTES L3_BYTES NODES
 *   layout_check budget <layout args...> LEVEL USED LEN
 * Prints one JSON object. */
#include "pl_abi.h"
#include "pl_layout.h"

#include <stdio.h>
#include <stdlib.h>

static const char* const err_names[] = { "ok", "no_cat", "l2_ways", "l3_ways", "l3_io", "io_flag" };

static unsigned long long num(const char* s)
{
    char* end;
    const unsigned long long v = strtoull(s, &end, 0);
    if (*s == '\0' || *end) {
        fprintf(stderr, "layout_check: not a number: %s\n", s);
        exit(2);
    }
    return v;
}

int main(int argc, char** argv)
{
    if (argc == 2 && argv[1][0] == 'a') {
        printf("{\"version\": %d, \"sizes\": {\"pl_caps\": %zu, \"pl_lock_req\": %zu, "
               "\"pl_measure\": %zu, \"pl_clos_req\": %zu}, \"ioctls\": {\"CAPS\": %lu, "
               "\"LOCK\": %lu, \"UNLOCK\": %lu, \"MEASURE\": %lu, \"RELOAD\": %lu, "
               "\"WORKER\": %lu}}\n",
               PL_ABI_VERSION, sizeof(struct pl_caps), sizeof(struct pl_lock_req),
               sizeof(struct pl_measure), sizeof(struct pl_clos_req),
               (unsigned long)PL_IOC_CAPS, (unsigned long)PL_IOC_LOCK,
               (unsigned long)PL_IOC_UNLOCK, (unsigned long)PL_IOC_MEASURE,
               (unsigned long)PL_IOC_RELOAD, (unsigned long)PL_IOC_WORKER);
        return 0;
    }
    const int budget = argc == 15 && argv[1][0] == 'b';
    if (!(argc == 12 && argv[1][0] == 'l') && !budget) {
        fprintf(stderr, "usage: layout_check abi | layout <10 values> | budget <10 values> LEVEL "
                        "USED LEN\n");
        return 2;
    }
    const struct pl_cpuid10 id = { (pl_u32)num(argv[2]), (pl_u32)num(argv[3]),
                                   (pl_u32)num(argv[4]), (pl_u32)num(argv[5]) };
    const struct pl_params p = { (int)num(argv[6]), (int)num(argv[7]), (int)num(argv[8]) };
    struct pl_layout l = { 0 };
    const enum pl_layout_err e = pl_layout_compute(&id, &p, num(argv[9]), num(argv[10]),
                                                   (pl_u32)num(argv[11]), &l);
    pl_u32 l2[4], l3[4];
    pl_clos_masks(&l, l2, l3);
    printf("{\"error\": \"%s\", \"errno\": %d, \"l2_full\": %u, \"l2_lock\": %u, \"l2_norm\": %u, "
           "\"l3_full\": %u, \"l3_lock\": %u, \"l3_norm\": %u, \"l3_shared\": %u, "
           "\"l3_overlaps_io\": %s, \"l2_lock_bytes_per_core\": %llu, "
           "\"l3_lock_bytes_per_node\": %llu, \"clos_l2\": [%u, %u, %u, %u], "
           "\"clos_l3\": [%u, %u, %u, %u]",
           err_names[e], pl_layout_errno(e), l.l2_full, l.l2_lock, l.l2_norm, l.l3_full,
           l.l3_lock, l.l3_norm, l.l3_shared, l.l3_lock_overlaps_io ? "true" : "false",
           (unsigned long long)l.l2_lock_bytes_per_core,
           (unsigned long long)l.l3_lock_bytes_per_node, l2[0], l2[1], l2[2], l2[3], l3[0], l3[1],
           l3[2], l3[3]);
    if (budget)
        printf(", \"budget\": %d", pl_budget(&l, (int)num(argv[12]), num(argv[13]), num(argv[14])));
    printf("}\n");
    return 0;
}
