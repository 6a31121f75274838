#!/usr/bin/env python3
"""Snapshot of the sysfs/procfs values socketlab's host model needs, printed as one JSON object.

    python3 host_facts.py [--root DIR] [--state-dir DIR] [--indent N]

Stdlib only: this file is copied to (or piped into) target hosts and run with their python3.
Values are the files' stripped text, or null where a file is missing, so the snapshot stays a
faithful record; all interpretation happens on the controller (socketlab.topology).
``isolation_verify`` holds the JSON records playbooks/verify.yml left per inventory host.
``--root`` reads a recorded tree instead of the live system (test fixtures).

The tables below are the single list of files read; ``write_tree`` is their inverse and turns a
snapshot back into a tree under a directory (used to build fixtures).
"""

import argparse
import json
import os
import re
import sys

FORMAT = "socketlab-host-facts/1"

CPU_DIR = "sys/devices/system/cpu"
NODE_DIR = "sys/devices/system/node"

#: snapshot key -> path relative to the root (whole-system values)
GLOBAL_FILES = {
    "cpu_online": CPU_DIR + "/online",
    "cpu_possible": CPU_DIR + "/possible",
    "cpu_isolated": CPU_DIR + "/isolated",
    "smt_active": CPU_DIR + "/smt/active",
    "osrelease": "proc/sys/kernel/osrelease",
    "hostname": "proc/sys/kernel/hostname",
    "pid1_comm": "proc/1/comm",
    "thp_enabled": "sys/kernel/mm/transparent_hugepage/enabled",
    "numa_balancing": "proc/sys/kernel/numa_balancing",
    "workqueue_cpumask": "sys/devices/virtual/workqueue/cpumask",
    "irq_default_smp_affinity": "proc/irq/default_smp_affinity",
}

#: per CPU: snapshot key -> path relative to sys/devices/system/cpu/cpuN
CPU_FILES = {
    "physical_package_id": "topology/physical_package_id",
    "core_id": "topology/core_id",
    "thread_siblings_list": "topology/thread_siblings_list",
    "scaling_governor": "cpufreq/scaling_governor",
    "scaling_driver": "cpufreq/scaling_driver",
}

#: per cache of a CPU: files in sys/devices/system/cpu/cpuN/cache/indexK
CACHE_FILES = ("level", "type", "size", "shared_cpu_list", "id")

#: per NUMA node: snapshot key -> path relative to sys/devices/system/node/nodeN
NODE_FILES = {
    "cpulist": "cpulist",
    "hugepages_2m": "hugepages/hugepages-2048kB/nr_hugepages",
}

#: per IRQ: files in proc/irq/N
IRQ_FILES = ("node", "smp_affinity_list", "effective_affinity_list")

#: where playbooks/verify.yml leaves its result per inventory host (verify-<host>.json, beside the
#: isolation state files), relative to the root like the others. Python's one default of the state
#: folder (Ansible's is playbooks/vars/state.yml); --state-dir gives socketlab_state_dir.
STATE_DIR = "var/lib/socketlab"
VERIFY_FILE = re.compile(r"^verify-(.+)\.json$")

#: Device paths the campaign's experiments may require (spec `requires: {devices: [...]}`),
#: reported present or not. A fixed set: a spec naming another path is refused at load time.
#: /sys/fs/resctrl counts as present only when the resctrl filesystem is mounted there (the
#: directory exists on any kernel built with resctrl); /proc/modules exists only on kernels with
#: module support (CONFIG_MODULES), which the pseudo-lock driver needs.
DEVICE_PATHS = (
    "/dev/pseudo_lock",
    "/dev/cpu/0/msr",
    "/dev/cpu_dma_latency",
    "/sys/fs/resctrl",
    "/proc/modules",
)
RESCTRL = "/sys/fs/resctrl"

#: fields kept from cpu0's block of /proc/cpuinfo
CPUINFO_FIELDS = (
    "vendor_id",
    "cpu family",
    "model",
    "model name",
    "stepping",
    "microcode",
    "flags",
)


def _read(root, rel):
    try:
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


def _numbered(root, rel, prefix):
    """Numbers N of entries named <prefix>N in a directory, sorted."""
    try:
        names = os.listdir(os.path.join(root, rel))
    except OSError:
        return []
    pat = re.compile(re.escape(prefix) + r"(\d+)$")
    return sorted(int(m.group(1)) for m in map(pat.match, names) if m)


def _cpuinfo(root):
    text = _read(root, "proc/cpuinfo")
    if text is None:
        return None
    first = text.split("\n\n")[0]
    out = {}
    for line in first.splitlines():
        key, sep, value = line.partition(":")
        key = key.strip()
        if sep and key in CPUINFO_FIELDS:
            out[key] = value.strip()
    return out


def _interrupts(root):
    """Numbered IRQs from /proc/interrupts with their /proc/irq/N files; None if unreadable."""
    text = _read(root, "proc/interrupts")
    if text is None:
        return None
    lines = text.splitlines()
    ncols = len(lines[0].split()) if lines else 0
    irqs = []
    for line in lines[1:]:
        label, sep, rest = line.partition(":")
        label = label.strip()
        if not sep or not label.isdigit():
            continue  # NMI, LOC, ...: per-CPU system interrupts, not movable
        fields = rest.split()
        desc = fields[ncols:]
        record = {
            "irq": int(label),
            "chip": desc[0] if desc else "",
            "hwirq": desc[1] if len(desc) > 2 else "",
            "name": " ".join(desc[2:]) if len(desc) > 2 else " ".join(desc[1:]),
        }
        for name in IRQ_FILES:
            record[name] = _read(root, f"proc/irq/{label}/{name}")
        irqs.append(record)
    return irqs


def _devices(root):
    """Device path -> present (bool), for each of DEVICE_PATHS, under the root."""
    mounts = _read(root, "proc/mounts") or ""
    out = {}
    for dev in DEVICE_PATHS:
        if dev == RESCTRL:
            lines = (line.split() for line in mounts.splitlines())
            out[dev] = any(f[1:3] == [RESCTRL, "resctrl"] for f in lines)
        else:
            out[dev] = os.path.exists(os.path.join(root, dev.lstrip("/")))
    return out


def _pids_named(root, comm):
    pids = []
    for pid in _numbered(root, "proc", ""):
        if _read(root, f"proc/{pid}/comm") == comm:
            pids.append(pid)
    return pids


def _verify_records(root, state_dir):
    """Inventory name -> the record verify.yml wrote for it. Keyed by inventory name because
    hosts in network namespaces share one filesystem; the controller picks its own."""
    folder = os.path.join(root, state_dir.lstrip("/"))
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return {}
    out = {}
    for name in names:
        match = VERIFY_FILE.match(name)
        if not match:
            continue
        text = _read(root, os.path.join(state_dir.lstrip("/"), name))
        try:
            record = json.loads(text) if text is not None else None
        except ValueError as exc:
            record = {"unreadable": f"{os.path.join(folder, name)}: {exc}"}
        if not isinstance(record, dict):
            record = {"unreadable": f"{os.path.join(folder, name)}: not a JSON object"}
        out[match.group(1)] = record
    return out


def snapshot(root="/", state_dir=STATE_DIR):
    snap = {"format": FORMAT, "root": root}
    for key, rel in GLOBAL_FILES.items():
        snap[key] = _read(root, rel)
    cpus = {}
    for n in _numbered(root, CPU_DIR, "cpu"):
        base = f"{CPU_DIR}/cpu{n}"
        record = {key: _read(root, base + "/" + rel) for key, rel in CPU_FILES.items()}
        caches = {}
        for k in _numbered(root, base + "/cache", "index"):
            cbase = f"{base}/cache/index{k}/"
            caches[f"index{k}"] = {f: _read(root, cbase + f) for f in CACHE_FILES}
        record["cache"] = caches
        cpus[str(n)] = record
    snap["cpus"] = cpus
    nodes = {}
    for n in _numbered(root, NODE_DIR, "node"):
        base = f"{NODE_DIR}/node{n}/"
        nodes[str(n)] = {key: _read(root, base + rel) for key, rel in NODE_FILES.items()}
    snap["nodes"] = nodes
    snap["cpuinfo"] = _cpuinfo(root)
    snap["irqs"] = _interrupts(root)
    snap["irqbalance_pids"] = _pids_named(root, "irqbalance")
    snap["isolation_verify"] = _verify_records(root, state_dir)
    snap["devices"] = _devices(root)
    return snap


def _write(root, rel, value):
    if value is None:
        return
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(str(value) + "\n")


def write_tree(snap, root):
    """Write a snapshot back out as a sysfs/procfs tree under ``root`` (for fixtures).

    IRQ counts are not part of a snapshot, so /proc/interrupts gets zero counts.
    """
    for key, rel in GLOBAL_FILES.items():
        _write(root, rel, snap.get(key))
    for n, record in snap.get("cpus", {}).items():
        base = f"{CPU_DIR}/cpu{n}"
        for key, rel in CPU_FILES.items():
            _write(root, base + "/" + rel, record.get(key))
        for index, cache in record.get("cache", {}).items():
            for f in CACHE_FILES:
                _write(root, f"{base}/cache/{index}/{f}", cache.get(f))
    for n, record in snap.get("nodes", {}).items():
        for key, rel in NODE_FILES.items():
            _write(root, f"{NODE_DIR}/node{n}/{rel}", record.get(key))
    for pid in snap.get("irqbalance_pids") or ():
        _write(root, f"proc/{pid}/comm", "irqbalance")
    info = snap.get("cpuinfo")
    if info is not None:
        _write(
            root,
            "proc/cpuinfo",
            "processor\t: 0\n" + "".join(f"{k}\t: {v}\n" for k, v in info.items()),
        )
    irqs = snap.get("irqs")
    if irqs is not None:
        ncpus = max(1, len(snap.get("cpus", {})))
        lines = [" " * 4 + "".join(f"CPU{i:<8d}" for i in range(ncpus))]
        for irq in irqs:
            desc = " ".join(x for x in (irq.get("chip"), irq.get("hwirq"), irq.get("name")) if x)
            lines.append(f"{irq['irq']:4d}: {' '.join(['0'] * ncpus)} {desc}")
            for f in IRQ_FILES:
                _write(root, f"proc/irq/{irq['irq']}/{f}", irq.get(f))
        _write(root, "proc/interrupts", "\n".join(lines))
    for host, record in (snap.get("isolation_verify") or {}).items():
        _write(root, f"{STATE_DIR}/verify-{host}.json", json.dumps(record, sort_keys=True))
    for dev, present in (snap.get("devices") or {}).items():
        if not present:
            continue
        if dev == RESCTRL:  # present = mounted: a mount line, not a file
            _write(root, "proc/mounts", f"resctrl {RESCTRL} resctrl rw,relatime 0 0")
        elif dev in DEVICE_PATHS:  # a plain file stands for the device node
            _write(root, dev.lstrip("/"), "")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="/", help="read a recorded tree under DIR (default /)")
    parser.add_argument(
        "--state-dir",
        default=STATE_DIR,
        help=f"where verify.yml's records are, under the root (default {STATE_DIR})",
    )
    parser.add_argument("--indent", type=int, default=None)
    args = parser.parse_args(argv)
    if not os.path.isdir(args.root):
        sys.stderr.write(f"host_facts: --root {args.root} is not a directory\n")
        return 2
    json.dump(snapshot(args.root, args.state_dir), sys.stdout, indent=args.indent, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
