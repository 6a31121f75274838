// SPDX-License-Identifier: GPL-2.0-only
/*
 * pseudo_lock_sram: Intel CAT cache pseudo-locking of memory the caller owns (ABI v3,
 * pl_abi.h). A process hands /dev/pseudo_lock a page-aligned range and an owner CPU; the module
 * pins the pages, fills the lines from that CPU in a class of service whose mask covers only
 * the reserved ways (level 2: that core's L2; level 3: the L3 of its node), and measures them
 * there against calibrated latencies. Everything a file descriptor locked, and every CPU it put
 * in the worker class, is released when it closes, so a crashed or killed user leaks nothing.
 *
 * The partition is lazy: loading changes no MSR. The masks and a zero-latency CPU QoS request
 * (core C6 would flush the L2) are applied when the first region or worker CPU appears and
 * restored (every mask full) when the last one goes, and at unload.
 *
 * The module programs CAT itself, so it refuses to load beside a mounted resctrl, on non-Intel
 * CPUs and on CPUs without both L2 and L3 CAT (-ENODEV, one line in the kernel log).
 * The way layout and its validation are pure code in pl_layout.h, tested in userspace.
 */
#include <linux/cpumask.h>
#include <linux/fs.h>
#include <linux/list.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/namei.h>
#include <linux/pm_qos.h>
#include <linux/slab.h>
#include <linux/smp.h>
#include <linux/topology.h>
#include <linux/uaccess.h>
#include <linux/vmalloc.h>
#include <asm/cpufeature.h>
#include <asm/msr.h>
#include <asm/processor.h>
#include <asm/special_insns.h>

#include "pl_abi.h"
#include "pl_layout.h"

#define PL_MSR_MISC_FEATURE_CONTROL 0x1a4 /* bits 0-3: the four prefetchers, 1 = off */
#define PL_MSR_PQR_ASSOC 0xc8f /* CLOS in bits 63:32, RMID in the low word */
#define PL_MSR_L3_MASK(clos) (0xc90 + (clos))
#define PL_MSR_L2_MASK(clos) (0xd10 + (clos))
#define PL_PREFETCH_OFF 0xfull
#define PL_LINE 64
#define PL_CAL_LINES 512 /* 32 KiB calibration buffer per node */
#define PL_CAL_ORDER 3
#define PL_HIST 4096 /* cycles; slower lines land in the last bucket */
#define PL_NCLOS 4

/* rdmsrl/wrmsrl were renamed rdmsrq/wrmsrq in 6.16 */
#ifndef rdmsrq
#define rdmsrq(msr, val) rdmsrl(msr, val)
#define wrmsrq(msr, val) wrmsrl(msr, val)
#endif

static int l2_ways = 14;
module_param(l2_ways, int, 0444);
MODULE_PARM_DESC(l2_ways, "L2 ways reserved for locking on every core (0 = no L2 locks; must leave one normal way)");
static int l3_ways = 14;
module_param(l3_ways, int, 0444);
MODULE_PARM_DESC(l3_ways, "L3 ways reserved for locking (0 = no L3 locks; must leave one normal way)");
static int l3_io_ways;
module_param(l3_io_ways, int, 0444);
MODULE_PARM_DESC(l3_io_ways, "1: allow locked L3 ways to overlap the ways shared with I/O (DMA fills can evict)");

struct pl_region {
	struct list_head file_link, all_link;
	u32 id;
	int level, cpu, nid;
	unsigned long npages;
	struct page **pages;
	void *kva;
	size_t len;
	struct pl_measure m;
};

struct pl_file {
	struct list_head regions;
	cpumask_var_t workers; /* CPUs this descriptor put in PL_CLOS_WORKER */
};

static struct pl_layout layout;
static u32 l2_mask[PL_NCLOS], l3_mask[PL_NCLOS];
static DEFINE_MUTEX(pl_mutex); /* everything below */
static unsigned int pl_users; /* live regions + worker CPUs over all descriptors */
static LIST_HEAD(pl_all);
static u32 pl_next_id = 1;
static u64 *l2_used; /* locked bytes per core, indexed by its first SMT sibling */
static u64 l3_used[MAX_NUMNODES];
static void *cal_buf[MAX_NUMNODES];
static struct pm_qos_request pl_qos;

/* ---------------------------------------------------------------- CAT */

static void masks_apply(void *unused)
{
	int c;

	for (c = 0; c < PL_NCLOS; c++) {
		wrmsr(PL_MSR_L3_MASK(c), l3_mask[c], 0);
		wrmsr(PL_MSR_L2_MASK(c), l2_mask[c], 0);
	}
}

static void masks_restore(void *unused)
{
	int c;

	for (c = 0; c < PL_NCLOS; c++) {
		wrmsr(PL_MSR_L3_MASK(c), layout.l3_full, 0);
		wrmsr(PL_MSR_L2_MASK(c), layout.l2_full, 0);
	}
}

static void clos_set(void *info)
{
	u64 pqr;

	rdmsrq(PL_MSR_PQR_ASSOC, pqr);
	wrmsr(PL_MSR_PQR_ASSOC, (u32)pqr, (u32)(uintptr_t)info);
}

/* pl_mutex held: the first user partitions the cache, the last gives it back */
static void users_get(void)
{
	if (pl_users++ == 0) {
		cpu_latency_qos_add_request(&pl_qos, 0);
		on_each_cpu(masks_apply, NULL, 1);
	}
}

static void users_put(void)
{
	if (--pl_users == 0) {
		on_each_cpu(masks_restore, NULL, 1);
		cpu_latency_qos_remove_request(&pl_qos);
	}
}

/* ---------------------------------------------------------------- fill and measure */

static __always_inline void pl_touch(const void *p)
{
	(void)READ_ONCE(*(const u8 *)p);
}

static __always_inline void pl_cldemote(const void *p)
{
	/* CLDEMOTE (%rdi) as bytes: older assemblers lack the mnemonic; a NOP without CPUID bit */
	asm volatile(".byte 0x0f, 0x1c, 0x07" : : "D"(p) : "memory");
}

static void fill_on_owner(void *info)
{
	struct pl_region *r = info;
	char *mem = r->kva;
	unsigned long flags;
	u64 pf, pqr;
	size_t i;
	int pass;

	for (i = 0; i < r->len; i += PL_LINE)
		clflushopt(mem + i);
	/* the flushes done before the fill with IRQs and prefetchers off */
	mb();
	local_irq_save(flags);
	rdmsrq(PL_MSR_MISC_FEATURE_CONTROL, pf);
	wrmsrq(PL_MSR_MISC_FEATURE_CONTROL, PL_PREFETCH_OFF);
	rdmsrq(PL_MSR_PQR_ASSOC, pqr);
	wrmsr(PL_MSR_PQR_ASSOC, (u32)pqr, r->level == 2 ? PL_CLOS_L2_FILL : PL_CLOS_L3_FILL);
	for (i = 0; i < r->len; i += PAGE_SIZE)
		pl_touch(mem + i); /* TLB first, so the line passes see no page walks */
	for (pass = 0; pass < 2; pass++)
		for (i = 0; i < r->len; i += PL_LINE)
			pl_touch(mem + i);
	if (r->level == 3) {
		/* the L3 fills from L2 victims: push them down while the fill CLOS owns the ways */
		for (pass = 0; pass < 2; pass++) {
			for (i = 0; i < r->len; i += PL_LINE)
				pl_cldemote(mem + i);
			/* each pass's demotes done before the next pass */
			mb();
		}
	}
	wrmsrq(PL_MSR_PQR_ASSOC, pqr);
	wrmsrq(PL_MSR_MISC_FEATURE_CONTROL, pf);
	local_irq_restore(flags);
}

struct pl_measure_args {
	struct pl_region *r;
	u32 *hist;
};

static u64 hist_median(const u32 *hist, u64 n)
{
	u64 seen = 0;
	int k;

	for (k = 0; k < PL_HIST; k++) {
		seen += hist[k];
		if (seen * 2 >= n)
			return k;
	}
	return PL_HIST - 1;
}

static __always_inline u64 time_line(const char *p)
{
	const u64 t0 = rdtsc_ordered();

	pl_touch(p);
	return rdtsc_ordered() - t0;
}

static u64 cal_median(const char *cal, u32 *hist)
{
	int i;

	memset(hist, 0, PL_HIST * sizeof(*hist));
	for (i = 0; i < PL_CAL_LINES; i++)
		hist[min_t(u64, time_line(cal + (size_t)i * PL_LINE), PL_HIST - 1)]++;
	return hist_median(hist, PL_CAL_LINES);
}

static void measure_on_owner(void *info)
{
	struct pl_measure_args *a = info;
	struct pl_region *r = a->r;
	struct pl_measure *m = &r->m;
	char *cal = cal_buf[r->nid];
	const char *mem = r->kva;
	const size_t lines = r->len / PL_LINE;
	unsigned long flags;
	u64 pf, pqr = 0, thr_l2, thr_l3;
	size_t i;

	m->lines = lines;
	m->l1_l2 = 0;
	m->l3 = 0;
	m->dram = 0;
	local_irq_save(flags);
	rdmsrq(PL_MSR_MISC_FEATURE_CONTROL, pf);
	wrmsrq(PL_MSR_MISC_FEATURE_CONTROL, PL_PREFETCH_OFF);
	/* calibration on a buffer of this node: flushed = DRAM, demoted = L3, hot = L2 */
	for (i = 0; i < PL_CAL_LINES; i++)
		clflushopt(cal + i * PL_LINE);
	/* every flush done before the DRAM timings */
	mb();
	m->cal_dram = cal_median(cal, a->hist);
	for (i = 0; i < PL_CAL_LINES; i++)
		pl_cldemote(cal + i * PL_LINE);
	/* every demote done before the L3 timings */
	mb();
	m->cal_l3 = cal_median(cal, a->hist);
	m->cal_l2 = cal_median(cal, a->hist);
	thr_l2 = (m->cal_l2 + m->cal_l3) / 2;
	thr_l3 = (m->cal_l3 + m->cal_dram) / 2;
	/* an L3 hit moves the line to this L2; read level-3 lines in the fill CLOS and demote
	 * each straight back, or measuring would move them out of the locked ways
	 */
	if (r->level == 3) {
		rdmsrq(PL_MSR_PQR_ASSOC, pqr);
		wrmsr(PL_MSR_PQR_ASSOC, (u32)pqr, PL_CLOS_L3_FILL);
	}
	memset(a->hist, 0, PL_HIST * sizeof(*a->hist));
	for (i = 0; i < lines; i++) {
		const u64 d = time_line(mem + i * PL_LINE);

		if (r->level == 3)
			pl_cldemote(mem + i * PL_LINE);
		a->hist[min_t(u64, d, PL_HIST - 1)]++;
		if (d <= thr_l2)
			m->l1_l2++;
		else if (d <= thr_l3)
			m->l3++;
		else
			m->dram++;
	}
	if (r->level == 3) {
		/* every demote of the measurement done before the CLOS goes back */
		mb();
		wrmsrq(PL_MSR_PQR_ASSOC, pqr);
	}
	wrmsrq(PL_MSR_MISC_FEATURE_CONTROL, pf);
	local_irq_restore(flags);
	m->p50 = hist_median(a->hist, lines);
}

static int region_measure(struct pl_region *r)
{
	struct pl_measure_args a = { .r = r };

	a.hist = kvcalloc(PL_HIST, sizeof(*a.hist), GFP_KERNEL);
	if (!a.hist)
		return -ENOMEM;
	smp_call_function_single(r->cpu, measure_on_owner, &a, 1);
	kvfree(a.hist);
	return 0;
}

/* ---------------------------------------------------------------- regions */

static u64 *region_budget(const struct pl_region *r)
{
	if (r->level == 2)
		return &l2_used[cpumask_first(topology_sibling_cpumask(r->cpu))];
	return &l3_used[r->nid];
}

static void region_free(struct pl_region *r)
{
	if (r->kva)
		vunmap(r->kva);
	if (r->pages)
		unpin_user_pages(r->pages, r->npages);
	kvfree(r->pages);
	kfree(r);
}

/* pl_mutex held */
static void region_unlock(struct pl_region *r)
{
	*region_budget(r) -= r->len;
	list_del(&r->file_link);
	list_del(&r->all_link);
	region_free(r);
	users_put();
}

static struct pl_region *region_find(struct pl_file *pf, u32 id)
{
	struct pl_region *r;

	list_for_each_entry(r, &pf->regions, file_link)
		if (r->id == id)
			return r;
	return NULL;
}

static long do_lock(struct pl_file *pf, struct pl_lock_req __user *ureq)
{
	struct pl_lock_req req;
	struct pl_region *r;
	unsigned long i;
	long pinned;
	int ret;

	if (copy_from_user(&req, ureq, sizeof(req)))
		return -EFAULT;
	if ((req.level != 2 && req.level != 3) || req.pad || !req.len ||
	    !PAGE_ALIGNED(req.addr) || !PAGE_ALIGNED(req.len) || req.len >> PAGE_SHIFT > INT_MAX ||
	    req.cpu < 0 || req.cpu >= nr_cpu_ids || !cpu_online(req.cpu))
		return -EINVAL;
	r = kzalloc(sizeof(*r), GFP_KERNEL);
	if (!r)
		return -ENOMEM;
	r->level = req.level;
	r->cpu = req.cpu;
	r->nid = cpu_to_node(req.cpu);
	r->len = req.len;
	r->npages = req.len >> PAGE_SHIFT;
	mutex_lock(&pl_mutex);
	ret = pl_budget(&layout, r->level, *region_budget(r), r->len);
	if (ret)
		goto out_free;
	ret = -ENOMEM;
	r->pages = kvcalloc(r->npages, sizeof(*r->pages), GFP_KERNEL);
	if (!r->pages)
		goto out_free;
	pinned = pin_user_pages_fast(req.addr, (int)r->npages, FOLL_WRITE | FOLL_LONGTERM,
				     r->pages);
	if (pinned != (long)r->npages) {
		if (pinned > 0)
			unpin_user_pages(r->pages, pinned);
		kvfree(r->pages);
		r->pages = NULL;
		ret = pinned < 0 ? (int)pinned : -EFAULT;
		goto out_free;
	}
	ret = -EXDEV; /* an L3 line is cached only in its home node's slices */
	if (r->level == 3)
		for (i = 0; i < r->npages; i++)
			if (page_to_nid(r->pages[i]) != r->nid)
				goto out_free;
	ret = -ENOMEM;
	r->kva = vmap(r->pages, r->npages, VM_MAP, PAGE_KERNEL);
	if (!r->kva)
		goto out_free;
	*region_budget(r) += r->len;
	users_get();
	r->id = pl_next_id++;
	list_add_tail(&r->file_link, &pf->regions);
	list_add_tail(&r->all_link, &pl_all);
	smp_call_function_single(r->cpu, fill_on_owner, r, 1);
	ret = region_measure(r);
	if (!ret && put_user(r->id, &ureq->id))
		ret = -EFAULT;
	if (ret)
		region_unlock(r);
	mutex_unlock(&pl_mutex);
	return ret;
out_free:
	mutex_unlock(&pl_mutex);
	region_free(r);
	return ret;
}

static long do_measure(struct pl_file *pf, struct pl_measure __user *um, bool refill)
{
	struct pl_region *r;
	u32 id;
	long ret;

	if (get_user(id, refill ? (u32 __user *)um : &um->id))
		return -EFAULT;
	mutex_lock(&pl_mutex);
	r = region_find(pf, id);
	ret = r ? 0 : -ENOENT;
	if (r && refill)
		smp_call_function_single(r->cpu, fill_on_owner, r, 1);
	if (r)
		ret = region_measure(r);
	if (!ret && !refill && copy_to_user(um, &r->m, sizeof(r->m)))
		ret = -EFAULT;
	mutex_unlock(&pl_mutex);
	return ret;
}

static long do_worker(struct pl_file *pf, struct pl_clos_req __user *ureq)
{
	struct pl_clos_req req;

	if (copy_from_user(&req, ureq, sizeof(req)))
		return -EFAULT;
	if (req.on > 1 || req.cpu < 0 || req.cpu >= nr_cpu_ids || !cpu_online(req.cpu))
		return -EINVAL;
	mutex_lock(&pl_mutex);
	if (req.on && !cpumask_test_and_set_cpu(req.cpu, pf->workers)) {
		users_get();
		smp_call_function_single(req.cpu, clos_set, (void *)(uintptr_t)PL_CLOS_WORKER, 1);
	} else if (!req.on && cpumask_test_and_clear_cpu(req.cpu, pf->workers)) {
		smp_call_function_single(req.cpu, clos_set, (void *)(uintptr_t)PL_CLOS_DEFAULT, 1);
		users_put();
	}
	mutex_unlock(&pl_mutex);
	return 0;
}

static long pl_ioctl(struct file *f, unsigned int cmd, unsigned long arg)
{
	struct pl_file *pf = f->private_data;
	void __user *uarg = (void __user *)arg;
	struct pl_region *r;
	struct pl_caps caps;
	u32 id;
	long ret;

	switch (cmd) {
	case PL_IOC_CAPS:
		memset(&caps, 0, sizeof(caps));
		caps.version = PL_ABI_VERSION;
		caps.nodes = num_online_nodes();
		caps.l2_cbm_full = layout.l2_full;
		caps.l2_cbm_lock = layout.l2_lock;
		caps.l3_cbm_full = layout.l3_full;
		caps.l3_cbm_lock = layout.l3_lock;
		caps.l2_lock_bytes_per_core = layout.l2_lock_bytes_per_core;
		caps.l3_lock_bytes_per_node = layout.l3_lock_bytes_per_node;
		return copy_to_user(uarg, &caps, sizeof(caps)) ? -EFAULT : 0;
	case PL_IOC_LOCK:
		return do_lock(pf, uarg);
	case PL_IOC_UNLOCK:
		if (get_user(id, (u32 __user *)uarg))
			return -EFAULT;
		mutex_lock(&pl_mutex);
		r = region_find(pf, id);
		ret = r ? 0 : -ENOENT;
		if (r)
			region_unlock(r);
		mutex_unlock(&pl_mutex);
		return ret;
	case PL_IOC_MEASURE:
		return do_measure(pf, uarg, false);
	case PL_IOC_RELOAD:
		return do_measure(pf, uarg, true);
	case PL_IOC_WORKER:
		return do_worker(pf, uarg);
	default:
		return -ENOTTY;
	}
}

static int pl_open(struct inode *inode, struct file *f)
{
	struct pl_file *pf = kzalloc(sizeof(*pf), GFP_KERNEL);

	if (!pf)
		return -ENOMEM;
	if (!zalloc_cpumask_var(&pf->workers, GFP_KERNEL)) {
		kfree(pf);
		return -ENOMEM;
	}
	INIT_LIST_HEAD(&pf->regions);
	f->private_data = pf;
	return 0;
}

/* close, exit, crash or SIGKILL: every region and worker CPU of this descriptor goes */
static int pl_release(struct inode *inode, struct file *f)
{
	struct pl_file *pf = f->private_data;
	struct pl_region *r, *tmp;
	int cpu;

	mutex_lock(&pl_mutex);
	list_for_each_entry_safe(r, tmp, &pf->regions, file_link)
		region_unlock(r);
	for_each_cpu(cpu, pf->workers) {
		if (cpu_online(cpu))
			smp_call_function_single(cpu, clos_set,
						 (void *)(uintptr_t)PL_CLOS_DEFAULT, 1);
		users_put();
	}
	mutex_unlock(&pl_mutex);
	free_cpumask_var(pf->workers);
	kfree(pf);
	return 0;
}

static const struct file_operations pl_fops = {
	.owner = THIS_MODULE,
	.open = pl_open,
	.release = pl_release,
	.unlocked_ioctl = pl_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.llseek = noop_llseek,
};

/* ---------------------------------------------------------------- sysfs */

static ssize_t caps_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "v%d nodes %u l2 cbm %#x lock %#x %llu B/core, l3 cbm %#x lock %#x %llu B/node\n",
			  PL_ABI_VERSION, num_online_nodes(), layout.l2_full, layout.l2_lock,
			  layout.l2_lock_bytes_per_core, layout.l3_full, layout.l3_lock,
			  layout.l3_lock_bytes_per_node);
}
static DEVICE_ATTR_RO(caps);

static ssize_t regions_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	struct pl_region *r;
	int n = 0;

	mutex_lock(&pl_mutex);
	list_for_each_entry(r, &pl_all, all_link)
		n += sysfs_emit_at(buf, n, "id %u level %d cpu %d node %d bytes %zu l1_l2 %llu l3 %llu dram %llu of %llu p50 %llu cal %llu/%llu/%llu\n",
				   r->id, r->level, r->cpu, r->nid, r->len, r->m.l1_l2, r->m.l3,
				   r->m.dram, r->m.lines, r->m.p50, r->m.cal_l2, r->m.cal_l3,
				   r->m.cal_dram);
	mutex_unlock(&pl_mutex);
	return n;
}
static DEVICE_ATTR_RO(regions);

static struct attribute *pl_attrs[] = { &dev_attr_caps.attr, &dev_attr_regions.attr, NULL };
ATTRIBUTE_GROUPS(pl);

static struct miscdevice pl_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = PL_DEVICE_NAME,
	.fops = &pl_fops,
	.groups = pl_groups,
	.mode = 0660,
};

/* ---------------------------------------------------------------- load / unload */

/* bytes of the data or unified cache at `level` from CPUID leaf 4 */
static u64 cache_bytes(int level)
{
	unsigned int a, b, c, d;
	int idx;

	for (idx = 0; idx < 16; idx++) {
		cpuid_count(4, idx, &a, &b, &c, &d);
		if ((a & 0x1f) == 0)
			break;
		if (((a >> 5) & 7) == level && (a & 0x1f) != 2) /* type 2: instruction cache */
			return (u64)(((b >> 22) & 0x3ff) + 1) * (((b >> 12) & 0x3ff) + 1) *
			       ((b & 0xfff) + 1) * (c + 1);
	}
	return 0;
}

static bool resctrl_mounted(void)
{
	struct path p;

	/* info/ exists only while resctrl is mounted at its documented mount point */
	if (kern_path("/sys/fs/resctrl/info", LOOKUP_FOLLOW, &p))
		return false;
	path_put(&p);
	return true;
}

static const char *const pl_err_text[] = {
	[PL_ERR_NO_CAT] = "the CPU lacks L2 and/or L3 CAT (CPUID 0x10)",
	[PL_ERR_L2_WAYS] = "l2_ways must be 0 .. L2 CBM bits - 1 (one normal way stays)",
	[PL_ERR_L3_WAYS] = "l3_ways must be 0 .. L3 CBM bits - 1 (one normal way stays)",
	[PL_ERR_L3_IO] = "l3_ways overlaps the ways shared with I/O; l3_io_ways=1 allows it",
	[PL_ERR_IO_FLAG] = "l3_io_ways must be 0 or 1",
};

static void pl_free_cal(void)
{
	int nid;

	for_each_node(nid)
		if (cal_buf[nid]) {
			free_pages((unsigned long)cal_buf[nid], PL_CAL_ORDER);
			cal_buf[nid] = NULL;
		}
	kfree(l2_used);
	l2_used = NULL;
}

static int __init pl_init(void)
{
	const struct pl_params params = { l2_ways, l3_ways, l3_io_ways };
	struct pl_cpuid10 id = { 0 };
	enum pl_layout_err e;
	unsigned int a, b, c, d;
	int nid, ret;

	if (boot_cpu_data.x86_vendor != X86_VENDOR_INTEL || !boot_cpu_has(X86_FEATURE_RDT_A) ||
	    boot_cpu_data.cpuid_level < 0x10) {
		pr_err("pseudo_lock_sram: not loaded: needs an Intel CPU with RDT allocation\n");
		return -ENODEV;
	}
	if (resctrl_mounted()) {
		pr_err("pseudo_lock_sram: not loaded: resctrl is mounted and owns CAT (umount /sys/fs/resctrl)\n");
		return -ENODEV;
	}
	cpuid_count(0x10, 0, &a, &id.res_ebx, &c, &d);
	cpuid_count(0x10, 1, &id.l3_eax, &id.l3_ebx, &c, &d);
	cpuid_count(0x10, 2, &id.l2_eax, &b, &c, &d);
	e = pl_layout_compute(&id, &params, cache_bytes(2), cache_bytes(3), num_online_nodes(),
			      &layout);
	if (e != PL_OK) {
		pr_err("pseudo_lock_sram: not loaded: %s (l2_ways=%d l3_ways=%d l3_io_ways=%d)\n",
		       pl_err_text[e], l2_ways, l3_ways, l3_io_ways);
		return pl_layout_errno(e);
	}
	if (layout.l3_lock_overlaps_io)
		pr_warn("pseudo_lock_sram: locked L3 ways %#x overlap the I/O-shared ways %#x: DMA fills can evict locked lines\n",
			layout.l3_lock, layout.l3_shared);
	pl_clos_masks(&layout, l2_mask, l3_mask);
	l2_used = kcalloc(nr_cpu_ids, sizeof(*l2_used), GFP_KERNEL);
	if (!l2_used)
		return -ENOMEM;
	for_each_online_node(nid) {
		struct page *p = alloc_pages_node(nid, GFP_KERNEL | __GFP_THISNODE, PL_CAL_ORDER);

		if (!p) {
			pl_free_cal();
			return -ENOMEM;
		}
		cal_buf[nid] = page_address(p);
	}
	ret = misc_register(&pl_misc);
	if (ret) {
		pl_free_cal();
		return ret;
	}
	pr_info("pseudo_lock_sram: v%d l2 cbm %#x lock %#x (%llu B/core), l3 cbm %#x lock %#x (%llu B/node), %u node(s); nothing changes until the first lock\n",
		PL_ABI_VERSION, layout.l2_full, layout.l2_lock, layout.l2_lock_bytes_per_core,
		layout.l3_full, layout.l3_lock, layout.l3_lock_bytes_per_node, num_online_nodes());
	return 0;
}

static void __exit pl_exit(void)
{
	misc_deregister(&pl_misc);
	/* every descriptor is closed (the module is pinned while one is open): restore anyway */
	mutex_lock(&pl_mutex);
	if (pl_users) {
		on_each_cpu(masks_restore, NULL, 1);
		cpu_latency_qos_remove_request(&pl_qos);
		pl_users = 0;
	}
	mutex_unlock(&pl_mutex);
	pl_free_cal();
}

module_init(pl_init);
module_exit(pl_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("Intel CAT L2/L3 pseudo-locking of caller-owned memory (ABI v3)");
MODULE_VERSION("3.0");
