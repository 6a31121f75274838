/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/* ABI v3 of /dev/pseudo_lock (pseudo_lock_sram.ko), shared by the module and userspace
 * (native/residency --lock, tests/test_driver.py). Fixed-width __u/__s types and explicit
 * padding so the layout is the same for every compiler and for 32/64-bit callers; the sizes
 * are asserted below and in the userspace ABI test. One file descriptor owns its regions and
 * worker CPUs: closing it (exit, crash, SIGKILL) releases every one of them.
 */
#ifndef PL_ABI_H
#define PL_ABI_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define PL_ABI_VERSION 3
#define PL_DEVICE_NAME "pseudo_lock" /* misc device: /dev/pseudo_lock */

/* Classes of service the module programs (CLOS 0-3); ways: lock = low l2_ways / l3_ways bits,
 * normal = full & ~lock.
 */
enum pl_clos {
	PL_CLOS_DEFAULT = 0, /* L3 normal, L2 normal: everything else */
	PL_CLOS_L2_FILL = 1, /* L3 normal, L2 locked: level-2 fill */
	PL_CLOS_L3_FILL = 2, /* L3 locked, L2 normal: level-3 fill and measurement */
	PL_CLOS_WORKER = 3, /* L3 locked, L2 normal: readers of L3-locked data */
};

struct pl_caps {
	__u32 version; /* PL_ABI_VERSION */
	__u32 nodes; /* online NUMA (SNC) nodes */
	__u32 l2_cbm_full, l2_cbm_lock;
	__u32 l3_cbm_full, l3_cbm_lock;
	__u64 l2_lock_bytes_per_core; /* 7/8 of the locked L2 ways of one core */
	__u64 l3_lock_bytes_per_node; /* 7/8 of the locked L3 ways of one node */
};

struct pl_lock_req {
	__u64 addr; /* page aligned, owned by the caller */
	__u64 len; /* a multiple of the page size */
	__s32 cpu; /* owner: the core (level 2) or any CPU of the node (level 3) */
	__u32 level; /* 2 or 3 */
	__u32 id; /* out: region id */
	__u32 pad; /* must be 0 */
};

struct pl_measure {
	__u32 id; /* in */
	__u32 pad; /* must be 0 */
	/* out: the region's lines by calibrated latency class, and cycles */
	__u64 lines, l1_l2, l3, dram;
	__u64 p50, cal_l2, cal_l3, cal_dram;
};

struct pl_clos_req {
	__s32 cpu;
	__u32 on; /* 1: CLOS 3 until the fd closes; 0: back to CLOS 0 */
};

#define PL_IOC_MAGIC 'P'
#define PL_IOC_CAPS _IOR(PL_IOC_MAGIC, 10, struct pl_caps)
#define PL_IOC_LOCK _IOWR(PL_IOC_MAGIC, 11, struct pl_lock_req)
#define PL_IOC_UNLOCK _IOW(PL_IOC_MAGIC, 12, __u32)
#define PL_IOC_MEASURE _IOWR(PL_IOC_MAGIC, 13, struct pl_measure)
#define PL_IOC_RELOAD _IOW(PL_IOC_MAGIC, 14, __u32)
#define PL_IOC_WORKER _IOW(PL_IOC_MAGIC, 15, struct pl_clos_req)

_Static_assert(sizeof(struct pl_caps) == 40, "pl_caps is 40 bytes in ABI v3");
_Static_assert(sizeof(struct pl_lock_req) == 32, "pl_lock_req is 32 bytes in ABI v3");
_Static_assert(sizeof(struct pl_measure) == 72, "pl_measure is 72 bytes in ABI v3");
_Static_assert(sizeof(struct pl_clos_req) == 8, "pl_clos_req is 8 bytes in ABI v3");

#endif
