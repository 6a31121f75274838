"""Affinity-Tailor-style controller logic (pure): demand estimates -> demand-sized CPU sets.

Seed 002 (Ng et al., arXiv 2604.27915; shared/reference/isolation.md §7): a controller
estimates each workload's CPU demand online and gives it a preferred CPU set sized to that
demand, as disjoint as possible from the others and spanning as few LLCs as possible. Here the
sets come from the multi-job planner (``socketlab.placement.cpuset.plan_jobs``, docs/cpuset.md) and
are applied as hard cgroup cpusets by the host side (socketlab/daemons/tailor.py); this module
only decides. Rules (docs/tailor.md):

- A sample is the larger of the CPUs a workload used over one period (usage delta / period)
  and the mean number of its threads that were runnable during it (``demand_sample``): with
  hard sets a workload can't use more than its set, and on a loaded host it uses less than
  it wants, but its busy threads stay runnable.
- The estimate is the ``percentile`` of the last ``window`` samples, times (1 + headroom),
  rounded up to whole cores, ignoring ``tolerance`` CPUs above a whole number. An estimate
  below ``idle_below`` CPUs is 0: the workload is idle and is parked.
- Hysteresis: a bigger estimate is taken at once; a smaller one only after it held for
  ``shrink_after`` samples in a row (so sets don't flap on a noisy sample).
- Sizes that don't fit in the managed CPUs are water-filled: every busy workload gets one core,
  the rest is shared in proportion to what each wants beyond that (largest remainder, ties by
  name). More busy workloads than cores: the ones wanting least are parked.
- Parked (idle) workloads hold no CPUs of their own: they get the managed CPUs nobody holds, or,
  when all are handed out, the last core of the managed CPUs (shared; marked ``parked``).
  Housekeeping CPUs are never in any set.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from socketlab.cpulist import format_cpulist
from socketlab.errors import PlanError
from socketlab.placement.cpuset import Job, plan_jobs
from socketlab.placement.isolation import IsolationPlan
from socketlab.topology.model import Topology


@dataclass(frozen=True)
class EstimatorConfig:
    window: int = 6  #: samples in the percentile window
    percentile: float = 90.0
    headroom: float = 0.10  #: fraction added to the percentile
    tolerance: float = 0.15  #: CPUs above a whole number not worth another core
    idle_below: float = 0.10  #: an estimate under this many CPUs is idle (parked)
    shrink_after: int = 3  #: samples a smaller estimate must hold before a set shrinks
    spill: int = 0  #: CPUs added to each busy set from the unheld ones (may be shared)

    def check(self) -> None:
        checks = [
            ("window", self.window, isinstance(self.window, int) and self.window >= 1, ">= 1"),
            ("percentile", self.percentile, 0 < self.percentile <= 100, "in (0, 100]"),
            ("headroom", self.headroom, self.headroom >= 0, ">= 0"),
            ("tolerance", self.tolerance, 0 <= self.tolerance < 1, "in [0, 1)"),
            ("idle_below", self.idle_below, self.idle_below >= 0, ">= 0"),
            (
                "shrink_after",
                self.shrink_after,
                isinstance(self.shrink_after, int) and self.shrink_after >= 1,
                "a whole number >= 1",
            ),
            (
                "spill",
                self.spill,
                isinstance(self.spill, int) and self.spill >= 0,
                "a whole number >= 0",
            ),
        ]
        for name, value, ok, expected in checks:
            if isinstance(value, bool) or not ok:
                raise PlanError(f"tailor: {name}: expected {expected}, got {value!r}")


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (a value that was seen, never an interpolation)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


class Estimator:
    """One workload's demand, in cores, from its samples (see the module rules)."""

    def __init__(self, config: EstimatorConfig, threads_per_core: int = 1) -> None:
        self.config = config
        self.tpc = threads_per_core
        self.samples: deque[float] = deque(maxlen=config.window)
        self.cores = 0  #: the size in force
        self._lower = 0  #: samples in a row that asked for less

    def raw(self) -> int:
        """Cores the window asks for, before hysteresis."""
        if not self.samples:
            return 0
        c = self.config
        want = percentile(self.samples, c.percentile) * (1 + c.headroom)
        if want < c.idle_below:
            return 0
        cpus = max(1, math.ceil(want - c.tolerance))
        return math.ceil(cpus / self.tpc)

    def add(self, cpus_used: float) -> int:
        if cpus_used < 0 or math.isnan(cpus_used):
            raise PlanError(f"tailor: a usage sample must be >= 0 CPUs, got {cpus_used!r}")
        self.samples.append(float(cpus_used))
        want = self.raw()
        if want >= self.cores:
            self.cores, self._lower = want, 0
        else:
            self._lower += 1
            if self._lower >= self.config.shrink_after:
                self.cores, self._lower = want, 0
        return self.cores


def water_fill(wants: Mapping[str, int], capacity: int) -> dict[str, int]:
    """Cores per workload when the wants exceed ``capacity`` cores (module rules)."""
    busy = {n: w for n, w in wants.items() if w > 0}
    out = {n: 0 for n in wants}
    if sum(busy.values()) <= capacity:
        out.update(busy)
        return out
    ranked = sorted(busy, key=lambda n: (-busy[n], n))
    kept = ranked[:capacity]  # more busy workloads than cores: the smallest wants are parked
    for n in kept:
        out[n] = 1
    spare = capacity - len(kept)
    extra = {n: busy[n] - 1 for n in kept}
    total = sum(extra.values())
    if spare <= 0 or total == 0:
        return out
    shares = {n: spare * extra[n] / total for n in kept}
    for n in kept:
        out[n] += int(shares[n])
    left = spare - sum(int(s) for s in shares.values())
    for n in sorted(kept, key=lambda n: (-(shares[n] - int(shares[n])), n))[:left]:
        out[n] += 1
    return out


def demand_sample(used: float, runnable: float | None = None) -> float:
    """The demand one period shows: the larger of the CPUs used and the mean number of the
    workload's threads that were runnable (state R: running or waiting for a CPU).

    Usage alone undercounts a workload that waits for a CPU: one capped by its hard set (it
    can't use more than it holds) or crowded out by other load on the host. A busy thread is
    runnable whether it got the CPU or not, so the runnable mean is its demand either way.
    """
    if used < 0 or (runnable is not None and runnable < 0):
        raise PlanError(f"tailor: a sample must be >= 0, got used={used!r} runnable={runnable!r}")
    return max(used, runnable or 0.0)


@dataclass(frozen=True)
class Assignment:
    """What the controller wants applied after a sample."""

    sets: dict[str, tuple[int, ...]]  #: workload -> CPUs (parked ones included)
    cores: dict[str, int]  #: workload -> cores of its own (0 = parked)
    parked: tuple[str, ...]
    changed: bool  #: sets differ from the previous assignment
    own: dict[str, tuple[int, ...]] = field(default_factory=dict)  #: before spill; () if parked

    def facts(self) -> dict[str, Any]:
        return {
            "sets": {n: format_cpulist(c) for n, c in sorted(self.sets.items())},
            "cores": dict(sorted(self.cores.items())),
            "parked": list(self.parked),
            "changed": self.changed,
        }


def universe_plan(topology: Topology, cpus: Iterable[int]) -> IsolationPlan:
    """An isolation plan whose allocatable CPUs are exactly ``cpus`` (``--cpus``): the first
    online thread of each core in it is a worker, the rest siblings, every other CPU is
    housekeeping."""
    wanted = set(cpus)
    online = {c.id for c in topology.cpus}
    unknown = sorted(wanted - online)
    if unknown or not wanted:
        raise PlanError(
            f"{topology.source}: --cpus: expected online CPUs of this host "
            f"({format_cpulist(online)}), got {format_cpulist(unknown) or 'none'}"
        )
    hk: dict[int, list[int]] = {}
    workers: dict[int, list[int]] = {}
    siblings: dict[int, list[int]] = {}
    for core in topology.cores:
        mine = [c for c in core.cpus if c in wanted]
        for c in core.cpus:
            if c not in wanted:
                hk.setdefault(core.node, []).append(c)
        if mine:
            workers.setdefault(core.node, []).append(mine[0])
            siblings.setdefault(core.node, []).extend(mine[1:])
    nodes = sorted(topology.nodes)
    return IsolationPlan(
        source=topology.source,
        housekeeping_per_node=0,
        prefer_irq_cores=False,
        ncpus=topology.ncpus,
        housekeeping_by_node={n: tuple(sorted(hk.get(n, ()))) for n in nodes},
        workers_by_node={n: tuple(sorted(workers.get(n, ()))) for n in nodes},
        siblings_by_node={n: tuple(sorted(siblings.get(n, ()))) for n in nodes},
        chosen_by={n: "--cpus" for n in nodes},
    )


@dataclass
class Tailor:
    """The controller: feed it one sample per workload per period, apply what it returns."""

    topology: Topology
    isolation: IsolationPlan
    workloads: Sequence[str]
    config: EstimatorConfig = field(default_factory=EstimatorConfig)
    policy: str = "isolate"
    distances: Mapping[int, Mapping[int, int]] | None = None

    def __post_init__(self) -> None:
        self.config.check()
        if not self.workloads or len(set(self.workloads)) != len(self.workloads):
            raise PlanError("tailor: expected one or more workloads, each named once")
        self.universe = tuple(sorted(self.isolation.workers + self.isolation.siblings))
        self.housekeeping = tuple(self.isolation.housekeeping)
        self.tpc = self.topology.threads_per_core
        core_of = {c: core for core in self.topology.cores for c in core.cpus}
        in_u = set(self.universe)
        self.whole_cores = [
            core
            for core in self.topology.cores
            if len(core.cpus) == self.tpc and set(core.cpus) <= in_u
        ]
        if not self.whole_cores:
            raise PlanError(
                f"{self.topology.source}: tailor: no whole core among the managed CPUs "
                f"{format_cpulist(self.universe)}"
            )
        self.last_core = tuple(core_of[max(c for k in self.whole_cores for c in k.cpus)].cpus)
        self.estimators = {n: Estimator(self.config, self.tpc) for n in self.workloads}
        self.current: Assignment | None = None

    def plan(self, cores: Mapping[str, int]) -> Assignment:
        fitted = water_fill(cores, len(self.whole_cores))
        busy = [n for n in self.workloads if fitted[n] > 0]
        sets: dict[str, tuple[int, ...]] = {}
        free = set(self.universe)
        if busy:
            jobs = [Job(n, fitted[n] * self.tpc) for n in busy]
            plan = plan_jobs(
                jobs, self.topology, self.isolation, self.policy, distances=self.distances
            )
            for p in plan.placements:
                sets[p.job.name] = p.cpus
            free = set(plan.free)
        parked = tuple(n for n in self.workloads if fitted[n] == 0)
        own = {n: sets.get(n, ()) for n in self.workloads}
        spare = tuple(sorted(free)) or self.last_core
        for n in parked:
            sets[n] = spare
        if self.config.spill and busy and free:
            # Spill margin: let a busy workload run past its estimate on unheld CPUs (these are
            # shared between the workloads that spill, never taken from another's own set).
            extra = tuple(sorted(free))[: self.config.spill]
            for n in busy:
                sets[n] = tuple(sorted(set(sets[n]) | set(extra)))
        changed = self.current is None or self.current.sets != sets
        return Assignment(sets, dict(fitted), parked, changed, own)

    def step(self, cpus_used: Mapping[str, float]) -> Assignment:
        """One period: a sample per workload (CPUs used) -> the assignment to apply."""
        missing = [n for n in self.workloads if n not in cpus_used]
        if missing:
            raise PlanError(f"tailor: no sample for workload {missing[0]!r}")
        cores = {n: self.estimators[n].add(cpus_used[n]) for n in self.workloads}
        if self.current is not None and cores == self.current.cores:
            c = self.current
            self.current = Assignment(c.sets, c.cores, c.parked, False, c.own)
            return self.current
        self.current = self.plan(cores)
        return self.current

    def start(self) -> Assignment:
        """The first assignment, before any sample: one core each (the demand is unknown)."""
        for e in self.estimators.values():
            e.cores = 1
        self.current = self.plan({n: 1 for n in self.workloads})
        return self.current

    def size_of(self, name: str) -> int:
        """CPUs of the workload's own set (its cores x threads), 0 when parked."""
        if self.current is None:
            return 0
        return self.current.cores[name] * self.tpc
