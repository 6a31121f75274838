/* Test-only emulation of /dev/pseudo_lock for userspace callers (LD_PRELOAD). open() of the
 * path in PL_EMU_DEVICE returns a descriptor whose ioctls follow the ABI v3 contract (pl_abi.h)
 * with the module's own budget code (pl_layout.h): CAPS from PL_EMU_L2_WAYS (16-way, 2 MiB L2),
 * LOCK checks alignment, level, the per-core budget (PL_EMU_L2_USED bytes already locked on
 * every core -> ENOSPC) and, with PL_EMU_EXDEV=1, answers EXDEV as for pages off the owner's
 * node; MEASURE returns every line held; close() releases what the descriptor held. Each call
 * is logged as one line to PL_EMU_LOG. Nothing here touches a cache or an MSR. */
#define _GNU_SOURCE
#include "pl_abi.h"
#include "pl_layout.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_REGIONS 1024
static int emu_fd = -1;
static struct pl_layout lay;
static struct {
	__u32 id;
	int cpu;
	__u64 len;
} regions[MAX_REGIONS];
static int nregions, nworkers;
static __u32 next_id = 1;
static pthread_mutex_t emu_mutex = PTHREAD_MUTEX_INITIALIZER; /* the module's pl_mutex */

static void logf_(const char *fmt, ...)
{
	const char *path = getenv("PL_EMU_LOG");
	FILE *f = path ? fopen(path, "a") : NULL;
	va_list ap;

	if (!f)
		return;
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	fputc('\n', f);
	fclose(f);
}

static int emu_open(void)
{
	const char *w = getenv("PL_EMU_L2_WAYS");
	const struct pl_cpuid10 id = { 0x6, 15, 0xc000, 15 };
	const struct pl_params p = { w ? atoi(w) : 12, 0, 0 };

	if (pl_layout_compute(&id, &p, 2u << 20, 480ull << 20, 1, &lay) != PL_OK) {
		errno = EINVAL;
		return -1;
	}
	emu_fd = (int)syscall(SYS_memfd_create, "pseudo_lock_emu", 0);
	logf_("open fd=%d", emu_fd);
	return emu_fd;
}

int open(const char *path, int flags, ...)
{
	static int (*real)(const char *, int, ...);
	const char *dev = getenv("PL_EMU_DEVICE");
	va_list ap;
	mode_t mode;

	if (dev && strcmp(path, dev) == 0)
		return emu_open();
	if (!real)
		real = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open");
	va_start(ap, flags);
	mode = (mode_t)va_arg(ap, int);
	va_end(ap);
	return real(path, flags, mode);
}

int open64(const char *path, int flags, ...) __attribute__((alias("open")));

static __u64 used_on(int cpu)
{
	const char *pre = getenv("PL_EMU_L2_USED");
	__u64 used = pre ? strtoull(pre, NULL, 0) : 0;
	int i;

	for (i = 0; i < nregions; i++)
		if (regions[i].cpu == cpu)
			used += regions[i].len;
	return used;
}

static int emu_ioctl(unsigned long req, void *arg)
{
	if (req == PL_IOC_CAPS) {
		struct pl_caps *c = arg;

		memset(c, 0, sizeof(*c));
		c->version = PL_ABI_VERSION;
		c->nodes = 1;
		c->l2_cbm_full = lay.l2_full;
		c->l2_cbm_lock = lay.l2_lock;
		c->l3_cbm_full = lay.l3_full;
		c->l2_lock_bytes_per_core = lay.l2_lock_bytes_per_core;
		logf_("caps");
		return 0;
	}
	if (req == PL_IOC_LOCK) {
		struct pl_lock_req *r = arg;
		int err;

		if ((r->level != 2 && r->level != 3) || r->pad || !r->len || r->addr % 4096 ||
		    r->len % 4096 || r->cpu < 0)
			return -EINVAL;
		err = pl_budget(&lay, (int)r->level, used_on(r->cpu), r->len);
		if (!err && getenv("PL_EMU_EXDEV"))
			err = -EXDEV;
		logf_("lock cpu=%d len=%llu level=%u -> %d", r->cpu, (unsigned long long)r->len,
		      r->level, err);
		if (err)
			return err;
		regions[nregions].id = r->id = next_id++;
		regions[nregions].cpu = r->cpu;
		regions[nregions++].len = r->len;
		return 0;
	}
	if (req == PL_IOC_MEASURE) {
		struct pl_measure *m = arg;
		int i;

		for (i = 0; i < nregions; i++)
			if (regions[i].id == m->id)
				break;
		logf_("measure id=%u -> %d", m->id, i < nregions ? 0 : -ENOENT);
		if (i == nregions)
			return -ENOENT;
		m->lines = m->l1_l2 = regions[i].len / 64;
		m->l3 = m->dram = 0;
		m->p50 = m->cal_l2 = 16;
		m->cal_l3 = 80;
		m->cal_dram = 300;
		return 0;
	}
	if (req == PL_IOC_WORKER) {
		const struct pl_clos_req *w = arg;

		nworkers += w->on ? 1 : -1;
		logf_("worker cpu=%d on=%u", w->cpu, w->on);
		return 0;
	}
	return -ENOTTY;
}

int ioctl(int fd, unsigned long req, ...)
{
	static int (*real)(int, unsigned long, ...);
	va_list ap;
	void *arg;
	int ret;

	va_start(ap, req);
	arg = va_arg(ap, void *);
	va_end(ap);
	if (fd != emu_fd || fd < 0) {
		if (!real)
			real = (int (*)(int, unsigned long, ...))dlsym(RTLD_NEXT, "ioctl");
		return real(fd, req, arg);
	}
	pthread_mutex_lock(&emu_mutex);
	ret = emu_ioctl(req, arg);
	pthread_mutex_unlock(&emu_mutex);
	if (ret < 0) {
		errno = -ret;
		return -1;
	}
	return 0;
}

int close(int fd)
{
	static int (*real)(int);

	if (fd == emu_fd && fd >= 0) {
		/* the module's release: every region and worker CPU of the descriptor goes */
		logf_("close released regions=%d workers=%d", nregions, nworkers);
		nregions = nworkers = 0;
		emu_fd = -1;
	}
	if (!real)
		real = (int (*)(int))dlsym(RTLD_NEXT, "close");
	return real(fd);
}
