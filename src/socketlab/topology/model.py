"""The host model: CPUs, physical cores, NUMA nodes, sockets, LLC domains and the kernel knobs
that isolation cares about, built from a host-facts snapshot (collectors/host_facts.py).

Pure: no I/O here. Physical cores are keyed by (package, core_id) because core_id is only
unique within a package (shared/reference/isolation.md §9.1).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

# Relative imports of stdlib-only siblings: the socketlab.lab collection links this file into
# plugins/plugin_utils/planner/, where the socketlab package is not installed.
from ..cpulist import CpuListError, CpuListLimit, format_cpulist, parse_cpulist
from ..errors import HostError

SNAPSHOT_FORMAT = "socketlab-host-facts/1"


@dataclass(frozen=True)
class Cpu:
    id: int
    package: int
    core_id: int
    node: int
    llc: int | None  #: id of the last-level cache domain, None if the host reports no caches
    siblings: tuple[int, ...]  #: every CPU of the same physical core, this one included


@dataclass(frozen=True)
class Core:
    package: int
    core_id: int
    node: int
    cpus: tuple[int, ...]  #: sorted; cpus[0] is the first thread

    @property
    def key(self) -> tuple[int, int]:
        return (self.package, self.core_id)


@dataclass(frozen=True)
class Cache:
    name: str  #: L1d, L1i, L2, L3 ...
    level: int
    type: str
    size_bytes: int
    instances: int  #: distinct caches of this kind on the host
    shared_by: int  #: CPUs per instance (largest)


@dataclass(frozen=True)
class Irq:
    irq: int
    name: str
    chip: str
    node: int  #: device NUMA node, -1 when unknown
    affinity: tuple[int, ...]  #: smp_affinity_list
    effective: tuple[int, ...]  #: effective_affinity_list (where it is delivered)


@dataclass(frozen=True)
class Topology:
    source: str  #: hostname, or the tree a fixture was read from
    cpus: tuple[Cpu, ...]
    cores: tuple[Core, ...]
    nodes: dict[int, tuple[int, ...]]
    sockets: dict[int, tuple[int, ...]]
    llcs: dict[int, tuple[int, ...]]
    caches: tuple[Cache, ...]
    ncpus: int  #: nr_cpu_ids: bits in a kernel cpumask
    online: tuple[int, ...]
    isolated: tuple[int, ...]
    vendor: str
    model_name: str
    family: str
    model: str
    stepping: str
    microcode: str
    flags: tuple[str, ...]
    kernel: str
    service_manager: str
    thp: str | None
    numa_balancing: int | None
    irqbalance_pids: tuple[int, ...]
    cpufreq_driver: str | None
    governors: dict[int, str] = field(default_factory=dict)
    irqs: tuple[Irq, ...] | None = None  #: None when /proc/interrupts is unreadable
    workqueue_cpumask: str | None = None
    hugepages_2m: dict[int, int | None] = field(default_factory=dict)
    #: the collectors/host_facts.py DEVICE_PATHS present on the host, sorted. A snapshot without
    #: the field (recorded before it) reads as none present, as its tree would.
    devices: tuple[str, ...] = ()

    # -- derived -------------------------------------------------------------------------
    @property
    def threads_per_core(self) -> int:
        return max((len(c.cpus) for c in self.cores), default=1)

    @property
    def irqbalance_running(self) -> bool:
        return bool(self.irqbalance_pids)

    @property
    def cpufreq_present(self) -> bool:
        return bool(self.governors)

    def has_flag(self, flag: str) -> bool:
        return flag in self.flags

    def cores_in_node(self, node: int) -> list[Core]:
        """The node's physical cores, sorted by (package, core_id)."""
        return sorted((c for c in self.cores if c.node == node), key=lambda c: c.key)

    def cpu(self, cpu_id: int) -> Cpu:
        for c in self.cpus:
            if c.id == cpu_id:
                return c
        raise KeyError(cpu_id)

    def facts(self) -> dict[str, Any]:
        """JSON-able summary; the shape other parts (specs, reports) consume."""
        governors: dict[str, list[int]] = {}
        for cpu, gov in sorted(self.governors.items()):
            governors.setdefault(gov, []).append(cpu)
        return {
            "source": self.source,
            "cpu_model": self.model_name,
            "vendor": self.vendor,
            "family": self.family,
            "model": self.model,
            "stepping": self.stepping,
            "microcode": self.microcode,
            "flags": sorted(self.flags),
            "amx": all(self.has_flag(f) for f in ("amx_tile", "amx_bf16")),
            "avx512_bf16": self.has_flag("avx512_bf16"),
            "sockets": len(self.sockets),
            "nodes": len(self.nodes),
            "llcs": len(self.llcs),
            "cores": len(self.cores),
            "threads": len(self.cpus),
            "threads_per_core": self.threads_per_core,
            "smt": self.threads_per_core > 1,
            "ncpus": self.ncpus,
            "cpu_online": format_cpulist(self.online),
            "cpu_isolated": format_cpulist(self.isolated),
            "socket_cpus": {str(k): format_cpulist(v) for k, v in sorted(self.sockets.items())},
            "node_cpus": {str(k): format_cpulist(v) for k, v in sorted(self.nodes.items())},
            "llc_cpus": {str(k): format_cpulist(v) for k, v in sorted(self.llcs.items())},
            "caches": {
                c.name: {
                    "size_bytes": c.size_bytes,
                    "size": _human(c.size_bytes),
                    "instances": c.instances,
                    "shared_by": c.shared_by,
                }
                for c in self.caches
            },
            "kernel": self.kernel,
            "service_manager": self.service_manager,
            "thp": self.thp,
            "numa_balancing": self.numa_balancing,
            "irqbalance": {"running": self.irqbalance_running, "pids": list(self.irqbalance_pids)},
            "cpufreq": {
                "present": self.cpufreq_present,
                "driver": self.cpufreq_driver,
                "governors": {g: format_cpulist(c) for g, c in governors.items()},
            },
            "workqueue_cpumask": self.workqueue_cpumask,
            "hugepages_2m": {str(k): v for k, v in sorted(self.hugepages_2m.items())},
            "devices": list(self.devices),
            "irqs_readable": self.irqs is not None,
            "irqs": [
                {
                    "irq": i.irq,
                    "name": i.name,
                    "chip": i.chip,
                    "node": i.node,
                    "affinity": format_cpulist(i.affinity),
                    "effective": format_cpulist(i.effective),
                }
                for i in (self.irqs or ())
            ],
        }


def _human(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            value = size / scale
            return f"{value:.0f} {unit}" if value.is_integer() else f"{value:.1f} {unit}"
    return f"{size} B"


# -- building from a snapshot ------------------------------------------------------------------


class _Reader:
    """Typed access to snapshot values with errors that name the field."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, expected: str, got: Any) -> HostError:
        return HostError(f"{self.source}: host facts: {where}: expected {expected}, got {got!r}")

    def integer(self, value: Any, where: str) -> int:
        text = str(value).strip()
        # ASCII only: int() would read Unicode digits ("٤" is 4), which sysfs never writes.
        if not re.fullmatch(r"-?[0-9]+", text, re.ASCII):
            raise self.fail(where, "an integer", value)
        return int(text)

    def record(self, value: Any, where: str, what: str = "an object") -> dict:
        """A JSON object (valid JSON of the wrong shape must not reach .get())."""
        if not isinstance(value, dict):
            got = value if isinstance(value, (str, int, float)) else type(value).__name__
            raise self.fail(where, what, got)
        return value

    def cpus(self, value: Any, where: str) -> list[int]:
        try:
            return parse_cpulist(value if isinstance(value, str) else "", where)
        except CpuListLimit as exc:  # well-formed: the limit is what to say
            raise HostError(f"{self.source}: host facts: {where}: {exc.reason}") from None
        except CpuListError:
            raise self.fail(where, "a CPU list like '0-3,8'", value) from None

    def size(self, value: Any, where: str) -> int:
        m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)\s*", str(value or ""))
        if not m:
            raise self.fail(where, "a cache size like '48K'", value)
        return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def _cache_name(level: int, ctype: str) -> str:
    suffix = {"Data": "d", "Instruction": "i"}.get(ctype, "")
    return f"L{level}{suffix}"


def _bracketed(text: str | None) -> str | None:
    """'always [madvise] never' -> 'madvise'."""
    if text is None:
        return None
    m = re.search(r"\[([^\]]+)\]", text)
    return m.group(1) if m else text.strip() or None


def _devices(r: _Reader, value: Any) -> tuple[str, ...]:
    """The device paths the snapshot's presence map says exist, sorted."""
    if value is None:
        return ()
    out = []
    for dev, present in r.record(
        value, "devices", "an object of device path -> true/false"
    ).items():
        if not isinstance(present, bool):
            raise r.fail(f"devices.{dev}", "true or false", present)
        if present:
            out.append(str(dev))
    return tuple(sorted(out))


def _usable_cpus(
    r: _Reader, snapshot: dict, raw_cpus: dict
) -> tuple[list[int], list[int], list[int]]:
    """(present, online, usable): usable CPUs are online and have topology records."""
    online_text = snapshot.get("cpu_online")
    present = sorted(r.integer(k, f"cpus.{k}") for k in raw_cpus)
    online = r.cpus(online_text, "cpu_online") if online_text else present
    usable = [c for c in online if str(c) in raw_cpus]
    if not usable:
        raise r.fail("cpus", "at least one online CPU with topology files", online_text)
    return present, online, usable


def _numa_nodes(
    r: _Reader, value: Any, usable: list[int]
) -> tuple[dict[int, int], dict[int, tuple[int, ...]], dict[int, int | None]]:
    """(node of each CPU, CPUs of each node, 2 MiB hugepages of each node)."""
    # A kernel without CONFIG_NUMA has no node directory: one node 0.
    node_of: dict[int, int] = {}
    nodes: dict[int, tuple[int, ...]] = {}
    hugepages: dict[int, int | None] = {}
    raw_nodes = r.record(value or {}, "nodes", "an object of node records")
    for key in raw_nodes:
        r.integer(key, f"nodes.{key}")
    for key, rec in sorted(raw_nodes.items(), key=lambda kv: int(kv[0])):
        n = r.integer(key, f"nodes.{key}")
        rec = r.record(rec, f"nodes.{key}")
        cpus = [c for c in r.cpus(rec.get("cpulist") or "", f"nodes.{key}.cpulist") if c in usable]
        nodes[n] = tuple(cpus)
        hp = rec.get("hugepages_2m")
        hugepages[n] = None if hp is None else r.integer(hp, f"nodes.{key}.hugepages_2m")
        for c in cpus:
            node_of[c] = n
    if not raw_nodes:
        nodes = {0: tuple(usable)}
        node_of = dict.fromkeys(usable, 0)
    return node_of, nodes, hugepages


def _cpu_caches(
    r: _Reader, c: int, where: str, value: Any, cache_groups: dict[tuple[int, str], dict[str, Any]]
) -> int | None:
    """Add CPU ``c``'s caches to ``cache_groups``; return its last-level cache's instance."""
    llc = None
    caches = r.record(value or {}, f"{where}.cache")
    top_level = 0
    for index, cache in sorted(caches.items()):
        cw = f"{where}.cache.{index}"
        cache = r.record(cache, cw)
        level = r.integer(cache.get("level"), f"{cw}.level")
        ctype = str(cache.get("type") or "Unified")
        shared = r.cpus(cache.get("shared_cpu_list") or str(c), f"{cw}.shared_cpu_list")
        cid = cache.get("id")
        # Without an id file (older kernels), the lowest sharing CPU names the instance.
        instance = r.integer(cid, f"{cw}.id") if cid not in (None, "") else min(shared)
        group = cache_groups.setdefault(
            (level, ctype),
            {"size": r.size(cache.get("size"), f"{cw}.size"), "ids": set(), "shared_by": 0},
        )
        group["ids"].add(instance)
        group["shared_by"] = max(group["shared_by"], len(shared))
        if ctype != "Instruction" and level >= top_level:
            top_level, llc = level, instance
    return llc


def _cpu_records(
    r: _Reader, raw_cpus: dict, usable: list[int], node_of: dict[int, int]
) -> tuple[
    list[Cpu],
    dict[tuple[int, int], list[int]],
    dict[int, set[int]],
    dict[tuple[int, str], dict[str, Any]],
]:
    """(CPUs, CPUs of each (package, core), CPUs of each LLC, cache groups by (level, type))."""
    cpus: list[Cpu] = []
    by_core: dict[tuple[int, int], list[int]] = {}
    llc_members: dict[int, set[int]] = {}
    cache_groups: dict[tuple[int, str], dict[str, Any]] = {}
    for c in usable:
        where = f"cpus.{c}"
        rec = r.record(raw_cpus[str(c)], where)
        package = r.integer(rec.get("physical_package_id"), f"{where}.physical_package_id")
        core_id = r.integer(rec.get("core_id"), f"{where}.core_id")
        siblings = r.cpus(
            rec.get("thread_siblings_list") or str(c), f"{where}.thread_siblings_list"
        )
        if c not in node_of:
            raise r.fail(f"{where}", "the CPU to be in one NUMA node's cpulist", None)
        llc = _cpu_caches(r, c, where, rec.get("cache"), cache_groups)
        if llc is not None:
            llc_members.setdefault(llc, set()).add(c)
        by_core.setdefault((package, core_id), []).append(c)
        cpus.append(Cpu(c, package, core_id, node_of[c], llc, tuple(siblings)))
    return cpus, by_core, llc_members, cache_groups


def _irqs(r: _Reader, value: Any) -> tuple[Irq, ...] | None:
    """The IRQ records, None when the snapshot has none."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise r.fail("irqs", "a list of IRQ records", value)
    items = []
    for i, rec in enumerate(value):
        where = f"irqs[{i}]"
        rec = r.record(rec, where)
        node = rec.get("node")
        items.append(
            Irq(
                irq=r.integer(rec.get("irq"), f"{where}.irq"),
                name=str(rec.get("name") or ""),
                chip=str(rec.get("chip") or ""),
                node=-1 if node in (None, "") else r.integer(node, f"{where}.node"),
                affinity=tuple(r.cpus(rec.get("smp_affinity_list") or "", f"{where}.affinity")),
                effective=tuple(
                    r.cpus(rec.get("effective_affinity_list") or "", f"{where}.effective")
                ),
            )
        )
    return tuple(items)


def topology_from_snapshot(snapshot: dict) -> Topology:
    """Build the host model from what ``collectors/host_facts.py`` printed."""
    if not isinstance(snapshot, dict):
        raise HostError(f"host facts: expected a JSON object, got {type(snapshot).__name__}")
    source = str(snapshot.get("hostname") or snapshot.get("root") or "host")
    r = _Reader(source)
    if snapshot.get("format") != SNAPSHOT_FORMAT:
        raise r.fail("format", repr(SNAPSHOT_FORMAT), snapshot.get("format"))
    raw_cpus = snapshot.get("cpus") or {}
    if not isinstance(raw_cpus, dict):
        raise r.fail("cpus", "an object of CPU records", raw_cpus)

    present, online, usable = _usable_cpus(r, snapshot, raw_cpus)
    node_of, nodes, hugepages = _numa_nodes(r, snapshot.get("nodes"), usable)
    cpus, by_core, llc_members, cache_groups = _cpu_records(r, raw_cpus, usable, node_of)

    cores = tuple(
        Core(pkg, cid, node_of[min(members)], tuple(sorted(members)))
        for (pkg, cid), members in sorted(by_core.items())
    )
    # A CPU's siblings are its core's usable CPUs (sysfs may list CPUs that are not).
    core_cpus = {c: core.cpus for core in cores for c in core.cpus}
    cpus = [Cpu(c.id, c.package, c.core_id, c.node, c.llc, core_cpus[c.id]) for c in cpus]
    sockets: dict[int, list[int]] = {}
    for c in cpus:
        sockets.setdefault(c.package, []).append(c.id)

    caches = tuple(
        Cache(_cache_name(level, ctype), level, ctype, g["size"], len(g["ids"]), g["shared_by"])
        for (level, ctype), g in sorted(cache_groups.items(), key=lambda kv: (kv[0][0], kv[0][1]))
    )

    possible_text = snapshot.get("cpu_possible")
    possible = r.cpus(possible_text, "cpu_possible") if possible_text else present
    ncpus = max([*possible, *present, *usable]) + 1

    info = r.record(snapshot.get("cpuinfo") or {}, "cpuinfo")
    numa_balancing = snapshot.get("numa_balancing")
    governors = {
        c: str(raw_cpus[str(c)]["scaling_governor"])
        for c in usable
        if raw_cpus[str(c)].get("scaling_governor")
    }
    drivers = {raw_cpus[str(c)].get("scaling_driver") for c in usable} - {None}
    irqs = _irqs(r, snapshot.get("irqs"))

    pid1 = snapshot.get("pid1_comm") or "unknown"
    return Topology(
        source=source,
        cpus=tuple(cpus),
        cores=cores,
        nodes=nodes,
        sockets={k: tuple(sorted(v)) for k, v in sorted(sockets.items())},
        llcs={k: tuple(sorted(v)) for k, v in sorted(llc_members.items())},
        caches=caches,
        ncpus=ncpus,
        online=tuple(online),
        isolated=tuple(r.cpus(snapshot.get("cpu_isolated") or "", "cpu_isolated")),
        vendor=str(info.get("vendor_id", "")),
        model_name=str(info.get("model name", "")),
        family=str(info.get("cpu family", "")),
        model=str(info.get("model", "")),
        stepping=str(info.get("stepping", "")),
        microcode=str(info.get("microcode", "")),
        flags=tuple(str(info.get("flags", "")).split()),
        kernel=str(snapshot.get("osrelease") or ""),
        service_manager="systemd" if pid1 == "systemd" else pid1,
        thp=_bracketed(snapshot.get("thp_enabled")),
        numa_balancing=None
        if numa_balancing in (None, "")
        else r.integer(numa_balancing, "numa_balancing"),
        irqbalance_pids=tuple(
            r.integer(p, "irqbalance_pids") for p in snapshot.get("irqbalance_pids") or ()
        ),
        cpufreq_driver=", ".join(sorted(drivers)) or None,
        governors=governors,
        irqs=irqs,
        workqueue_cpumask=snapshot.get("workqueue_cpumask"),
        hugepages_2m=hugepages,
        devices=_devices(r, snapshot.get("devices")),
    )
