"""Isolation planner (pure): which CPUs keep the host running and which run the workers.

Per NUMA node, H whole physical cores with all their SMT siblings become housekeeping (the
lowest core ids, or the cores that already serve the node's device IRQs when asked; see
shared/reference/isolation.md §9.2). Every other physical core gets one worker on its first
thread; the remaining threads of worker cores ("siblings") are where runtime host threads go.
The kernel-format lists and masks come from socketlab.cpulist, so what a role writes reads back
identical.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Relative imports of stdlib-only siblings: the socketlab.lab collection links this file into
# plugins/plugin_utils/planner/, where the socketlab package is not installed.
from ..cpulist import cpumask, format_cpulist
from ..errors import PlanError
from ..topology.model import Core, Topology

LOWEST = "lowest core ids"
IRQS = "device IRQs"


def _flat(by_node: dict[int, tuple[int, ...]]) -> list[int]:
    return sorted(c for cpus in by_node.values() for c in cpus)


@dataclass(frozen=True)
class IsolationPlan:
    source: str
    housekeeping_per_node: int
    prefer_irq_cores: bool
    ncpus: int
    housekeeping_by_node: dict[int, tuple[int, ...]]
    workers_by_node: dict[int, tuple[int, ...]]
    siblings_by_node: dict[int, tuple[int, ...]]
    chosen_by: dict[int, str]  #: per node: LOWEST or IRQS

    # every node's CPUs of one kind, sorted
    housekeeping = property(lambda self: _flat(self.housekeeping_by_node))
    workers = property(lambda self: _flat(self.workers_by_node))
    siblings = property(lambda self: _flat(self.siblings_by_node))

    @property
    def workqueue_mask(self) -> str:
        return cpumask(self.housekeeping, self.ncpus)

    def facts(self) -> dict[str, Any]:
        def by_node(d: dict[int, tuple[int, ...]]) -> dict[str, list[int]]:
            return {str(n): sorted(cpus) for n, cpus in sorted(d.items())}

        return {
            "source": self.source,
            "housekeeping_per_node": self.housekeeping_per_node,
            "prefer_irq_cores": self.prefer_irq_cores,
            "ncpus": self.ncpus,
            "housekeeping": self.housekeeping,
            "workers": self.workers,
            "siblings": self.siblings,
            "isolated": sorted(self.workers + self.siblings),
            "housekeeping_list": format_cpulist(self.housekeeping),
            "workers_list": format_cpulist(self.workers),
            "siblings_list": format_cpulist(self.siblings),
            "isolated_list": format_cpulist(self.workers + self.siblings),
            "housekeeping_by_node": by_node(self.housekeeping_by_node),
            "workers_by_node": by_node(self.workers_by_node),
            "siblings_by_node": by_node(self.siblings_by_node),
            "housekeeping_by_node_list": {
                str(n): format_cpulist(c) for n, c in sorted(self.housekeeping_by_node.items())
            },
            "chosen_by": {str(n): how for n, how in sorted(self.chosen_by.items())},
            "workqueue_mask": self.workqueue_mask,
            "housekeeping_mask": self.workqueue_mask,
        }


def _irq_load(topology: Topology, node: int, cores: list[Core]) -> dict[tuple[int, int], int]:
    """How many of the node's device IRQs each core serves now (effective affinity)."""
    load = dict.fromkeys((c.key for c in cores), 0)
    if not topology.irqs:
        return load
    owner = {cpu: core.key for core in cores for cpu in core.cpus}
    for irq in topology.irqs:
        if irq.node != node:
            continue
        # Where the kernel delivers it; fall back to the allowed set on kernels without
        # effective_affinity. An IRQ allowed everywhere says nothing about who serves it.
        targets = irq.effective or irq.affinity
        if not targets or set(targets) >= set(owner):
            continue
        for key in {owner[c] for c in targets if c in owner}:
            load[key] += 1
    return load


def plan_isolation(
    topology: Topology, housekeeping_per_node: int = 2, prefer_irq_cores: bool = False
) -> IsolationPlan:
    """Split the host into housekeeping, worker and sibling CPUs.

    Raises PlanError when H is not a whole number >= 1 or leaves a NUMA node without workers.
    """
    h = housekeeping_per_node
    if isinstance(h, bool) or not isinstance(h, int) or h < 1:
        raise PlanError(
            f"{topology.source}: housekeeping_per_node: expected a whole number >= 1, got {h!r}"
        )
    housekeeping: dict[int, tuple[int, ...]] = {}
    workers: dict[int, tuple[int, ...]] = {}
    siblings: dict[int, tuple[int, ...]] = {}
    chosen_by: dict[int, str] = {}
    for node in sorted(topology.nodes):
        cores = topology.cores_in_node(node)
        if not cores:
            continue  # memory-only node (CXL, HBM): nothing to isolate
        if h >= len(cores):
            raise PlanError(
                f"{topology.source}: housekeeping_per_node={h} leaves no worker cores on NUMA "
                f"node {node}, which has {len(cores)} physical cores; expected at most "
                f"{len(cores) - 1}"
            )
        chosen = cores[:h]
        chosen_by[node] = LOWEST
        if prefer_irq_cores:
            load = _irq_load(topology, node, cores)
            serving = sorted((c for c in cores if load[c.key]), key=lambda c: (-load[c.key], c.key))
            if serving:
                rest = [c for c in cores if c not in serving]
                chosen = (serving + rest)[:h]
                chosen_by[node] = IRQS
        chosen_keys = {c.key for c in chosen}
        kept = [c for c in cores if c.key not in chosen_keys]
        housekeeping[node] = tuple(sorted(cpu for c in chosen for cpu in c.cpus))
        workers[node] = tuple(sorted(c.cpus[0] for c in kept))
        siblings[node] = tuple(sorted(cpu for c in kept for cpu in c.cpus[1:]))
    if not housekeeping:
        raise PlanError(f"{topology.source}: no NUMA node has CPUs; nothing to plan")
    return IsolationPlan(
        source=topology.source,
        housekeeping_per_node=h,
        prefer_irq_cores=bool(prefer_irq_cores),
        ncpus=topology.ncpus,
        housekeeping_by_node=housekeeping,
        workers_by_node=workers,
        siblings_by_node=siblings,
        chosen_by=chosen_by,
    )


#: The knob files isolation writes, under the sysfs or procfs root: the one place they are named.
KNOB_FILES = {
    "workqueue cpumask": ("sys", "devices/virtual/workqueue/cpumask", "cpumask"),
    "transparent hugepages": ("sys", "kernel/mm/transparent_hugepage/enabled", "choice"),
    "kernel.numa_balancing": ("proc", "sys/kernel/numa_balancing", "int"),
    "node{} 2 MiB huge pages": (
        "sys",
        "devices/system/node/node{}/hugepages/hugepages-2048kB/nr_hugepages",
        "int",
    ),
    "cpu{} cpufreq governor": ("sys", "devices/system/cpu/cpu{}/cpufreq/scaling_governor", "text"),
}
THP_MODES = ("always", "madvise", "never")


def isolation_targets(
    plan: dict[str, Any],
    snapshot: dict[str, Any],
    *,
    roots: dict[str, str],
    thp_mode: str,
    numa_balancing: int,
    hugepages_per_node: int,
    governor: str,
) -> dict[str, list]:
    """Each knob role's list of {name, path, value, kind}, from the plan's facts and the
    host_facts.py snapshot, and ``knobs``: all of them, what the state file records and verify
    reads back, and ``summary``, a line per value. Huge pages go on every node with CPUs when
    asked; the governor on every CPU that has cpufreq. ``roots``: "sys" and "proc" mount points."""
    if thp_mode not in THP_MODES:
        raise PlanError(f"thp_mode: expected one of {', '.join(THP_MODES)}, got {thp_mode!r}")

    def knob(name: str, value: Any, at: Any = "") -> dict[str, str]:
        root, rel, kind = KNOB_FILES[name]
        return {
            "name": name.format(at),
            "path": f"{roots[root]}/{rel.format(at)}",
            "value": str(value),
            "kind": kind,
        }

    cpus = sorted(
        int(c) for c, f in snapshot["cpus"].items() if f.get("scaling_governor") is not None
    )
    out = {
        "workqueue_mask": [knob("workqueue cpumask", plan["workqueue_mask"])],
        "vm_tuning": [
            knob("transparent hugepages", thp_mode),
            knob("kernel.numa_balancing", numa_balancing),
        ],
        "hugepages": [
            knob("node{} 2 MiB huge pages", hugepages_per_node, n)
            for n in plan["housekeeping_by_node"]
            if hugepages_per_node > 0
        ],
        "cpufreq_governor": [knob("cpu{} cpufreq governor", governor, c) for c in cpus],
    }
    shown = [
        f"{k['name']} = {k['value']}"
        for r in ("workqueue_mask", "vm_tuning", "hugepages")
        for k in out[r]
    ]
    return {
        **out,
        "knobs": [k for role in out.values() for k in role],
        "summary": [*shown, f"cpufreq governor = {governor} on {len(cpus)} CPU(s)"],
    }
