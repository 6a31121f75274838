/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/* The pure part of pseudo_lock_sram: the way layout from CPUID leaf 0x10 and the module
 * parameters, their validation and the lockable capacity. Header-only and free of kernel APIs,
 * so the module and the userspace tests (native/driver/pseudo_lock_sram/test_layout.c) compile
 * the same code. Callers supply the CPUID words and cache sizes they read.
 */
#ifndef PL_LAYOUT_H
#define PL_LAYOUT_H

#ifdef __KERNEL__
#include <linux/bitops.h>
#include <linux/errno.h>
#include <linux/types.h>
typedef u32 pl_u32;
typedef u64 pl_u64;
#else
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
typedef uint32_t pl_u32;
typedef uint64_t pl_u64;
#endif

/* The CPUID 0x10 words the layout needs (Intel SDM vol. 2, CPUID leaf 10H). */
struct pl_cpuid10 {
	pl_u32 res_ebx; /* sub-leaf 0 EBX: bit 1 L3 CAT, bit 2 L2 CAT */
	pl_u32 l3_eax; /* sub-leaf 1 EAX[4:0]: L3 CBM length - 1 */
	pl_u32 l3_ebx; /* sub-leaf 1 EBX: ways shared with other agents (I/O) */
	pl_u32 l2_eax; /* sub-leaf 2 EAX[4:0]: L2 CBM length - 1 */
};

struct pl_params {
	int l2_ways, l3_ways, l3_io_ways;
};

struct pl_layout {
	pl_u32 l2_full, l2_lock, l2_norm;
	pl_u32 l3_full, l3_lock, l3_norm, l3_shared;
	bool l3_lock_overlaps_io; /* only with l3_io_ways=1; the module warns */
	pl_u64 l2_lock_bytes_per_core, l3_lock_bytes_per_node;
};

/* Errors the module returns from init, with the one line it logs. */
enum pl_layout_err {
	PL_OK = 0,
	PL_ERR_NO_CAT, /* -ENODEV: L2 and L3 CAT are both required */
	PL_ERR_L2_WAYS, /* -EINVAL */
	PL_ERR_L3_WAYS, /* -EINVAL */
	PL_ERR_L3_IO, /* -EINVAL: lock ways overlap the I/O-shared ways without l3_io_ways=1 */
	PL_ERR_IO_FLAG, /* -EINVAL: l3_io_ways is 0 or 1 */
};

/* the kernel has no libgcc: __builtin_popcount may become a call to __popcountdi2 */
static inline int pl_popcount(pl_u32 v)
{
#ifdef __KERNEL__
	return hweight32(v);
#else
	return __builtin_popcount(v);
#endif
}

/* low `ways` bits; ways is 0..31 here (a CBM is at most 32 bits and one way stays normal) */
static inline pl_u32 pl_low_ways(int ways)
{
	return ways <= 0 ? 0 : (pl_u32)((1ull << ways) - 1);
}

static inline pl_u32 pl_cbm_full(pl_u32 eax)
{
	return (pl_u32)((1ull << ((eax & 0x1f) + 1)) - 1);
}

static inline int pl_layout_errno(enum pl_layout_err e)
{
	return e == PL_OK ? 0 : e == PL_ERR_NO_CAT ? -ENODEV : -EINVAL;
}

/* Lockable capacity keeps 1/8 of the reserved ways free: a fill of exactly a way's worth of
 * lines loses some to set conflicts (physical pages do not map evenly over the sets).
 */
static inline pl_u64 pl_lockable(pl_u64 cache_bytes, int cbm_bits, int ways, pl_u32 share)
{
	if (cbm_bits <= 0 || share == 0)
		return 0;
	return cache_bytes / (pl_u64)cbm_bits * (pl_u64)ways / share * 7 / 8;
}

/* l2_bytes: one core's L2; l3_bytes: the whole L3 of the package; nodes: SNC nodes sharing it */
static inline enum pl_layout_err pl_layout_compute(const struct pl_cpuid10 *id,
						   const struct pl_params *p,
						   pl_u64 l2_bytes, pl_u64 l3_bytes,
						   pl_u32 nodes, struct pl_layout *out)
{
	int l2_bits, l3_bits;

	if (!(id->res_ebx & (1u << 1)) || !(id->res_ebx & (1u << 2)))
		return PL_ERR_NO_CAT;
	out->l3_full = pl_cbm_full(id->l3_eax);
	out->l2_full = pl_cbm_full(id->l2_eax);
	out->l3_shared = id->l3_ebx & out->l3_full;
	l2_bits = pl_popcount(out->l2_full);
	l3_bits = pl_popcount(out->l3_full);
	if (p->l3_io_ways != 0 && p->l3_io_ways != 1)
		return PL_ERR_IO_FLAG;
	/* at least one normal way must remain for everything else */
	if (p->l2_ways < 0 || p->l2_ways >= l2_bits)
		return PL_ERR_L2_WAYS;
	if (p->l3_ways < 0 || p->l3_ways >= l3_bits)
		return PL_ERR_L3_WAYS;
	out->l2_lock = pl_low_ways(p->l2_ways);
	out->l3_lock = pl_low_ways(p->l3_ways);
	out->l3_lock_overlaps_io = (out->l3_lock & out->l3_shared) != 0;
	if (out->l3_lock_overlaps_io && !p->l3_io_ways)
		return PL_ERR_L3_IO;
	out->l2_norm = out->l2_full & ~out->l2_lock;
	out->l3_norm = out->l3_full & ~out->l3_lock;
	out->l2_lock_bytes_per_core = pl_lockable(l2_bytes, l2_bits, p->l2_ways, 1);
	out->l3_lock_bytes_per_node = pl_lockable(l3_bytes, l3_bits, p->l3_ways, nodes ? nodes : 1);
	return PL_OK;
}

/* The L2 mask of each CLOS (index = enum pl_clos), and the L3 mask (§6.4 of the campaign
 * notes): a level with no lock ways keeps its full mask everywhere.
 */
static inline void pl_clos_masks(const struct pl_layout *l, pl_u32 l2[4], pl_u32 l3[4])
{
	const pl_u32 l2_lock = l->l2_lock ? l->l2_lock : l->l2_full;
	const pl_u32 l3_lock = l->l3_lock ? l->l3_lock : l->l3_full;

	l2[0] = l->l2_norm; l3[0] = l->l3_norm;
	l2[1] = l2_lock;    l3[1] = l->l3_norm;
	l2[2] = l->l2_norm; l3[2] = l3_lock;
	l2[3] = l->l2_norm; l3[3] = l3_lock;
}

/* Budget check of one lock request (bytes already locked on that core / node): 0 or
 * -ENOSPC; -EOPNOTSUPP where the level has no reserved ways.
 */
static inline int pl_budget(const struct pl_layout *l, int level, pl_u64 used, pl_u64 len)
{
	const pl_u64 cap = level == 2 ? l->l2_lock_bytes_per_core : l->l3_lock_bytes_per_node;

	if ((level == 2 && !l->l2_lock) || (level == 3 && !l->l3_lock))
		return -EOPNOTSUPP;
	return len > cap || used > cap - len ? -ENOSPC : 0;
}

#endif
