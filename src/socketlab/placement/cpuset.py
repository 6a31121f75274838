"""Locality-aware CPU-set planner (pure): which CPUs each job gets, inside the isolated CPUs.

Two layers (shared/reference/isolation.md §9, docs/cpuset.md):

- kubelet's CPU manager allocators, re-implemented over a topology *view* restricted to the
  allocatable universe U (§9.1): ``take_packed`` is ``takeByTopologyNUMAPacked`` (best fit at
  every level: whole first-level domains, whole second-level domains, LLCs when they are finer
  than NUMA, whole cores, then single CPUs packed or spread) and ``take_distributed`` is
  ``takeByTopologyNUMADistributed`` (KEP-2902: an even share per NUMA node, remainder placed
  for the most balanced free capacity).
- ``plan_jobs``, an Affinity-Tailor-style outer layer for several jobs (§9.5): first fit
  decreasing, every candidate NUMA-node combination, and a lexicographic score (domains touched,
  other tenants in them under ``isolate``, domains left partially used, lowest highest CPU).

U is the isolation plan's worker CPUs, plus their SMT siblings for jobs that take whole cores;
housekeeping CPUs are never handed out. A domain counts as "entirely free" relative to U, not to
the whole machine (kubelet compares against the machine, which would make a node holding
housekeeping CPUs never free).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from socketlab.cpulist import format_cpulist
from socketlab.errors import PlanError
from socketlab.placement.isolation import IsolationPlan
from socketlab.topology.model import Topology

PACK = "pack"
ISOLATE = "isolate"
POLICIES = (PACK, ISOLATE)
DECREASING = "decreasing"  #: first fit decreasing (§9.5 step 1)
GIVEN = "given"  #: the order the jobs were given in (jobs arriving one after another)
ORDERS = (DECREASING, GIVEN)
#: Above this many NUMA nodes the combinations are not enumerated (kubelet caps hint generation
#: at 8 nodes for the same reason); such a job is placed by the allocator over all free CPUs.
MAX_COMBINATION_NODES = 8

#: Feasible LLC sets of the fewest LLCs ranked per node combination before the search is cut
#: short (and the placement says ``search: "bounded"``); 12 LLCs choose 4 is 495.
MAX_LLC_COMBINATIONS = 512
#: Of the ranked LLC sets, this many best (by the cheap rank) are allocated and scored in full.
LLC_SETS_SCORED = 6
#: Node distance assumed when the host has no distance table: kernel SLIT conventions.
LOCAL_DISTANCE, SAME_SOCKET_DISTANCE, OTHER_SOCKET_DISTANCE = 10, 12, 21

CoreKey = tuple[int, int]


# -- the topology view ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TopologyView:
    """The topology restricted to a universe U of allocatable CPUs.

    ``domains[level][id]`` are the CPUs of U in that domain; levels are "socket", "node", "llc"
    (present only when the LLC level is used) and "core" (ids are (package, core_id) keys).
    """

    universe: frozenset[int]
    domains: Mapping[str, Mapping[Any, frozenset[int]]]
    owner: Mapping[str, Mapping[int, Any]]  #: level -> CPU -> domain id
    first: str  #: the bigger of socket/node (§9.1 "domain order")
    second: str
    use_llc: bool
    threads_per_core: int  #: CPUs of U per physical core (1 for a workers-only view)
    thread_index: Mapping[int, int]  #: CPU -> its position in its physical core (0 = first)

    @property
    def levels(self) -> list[str]:
        """The nesting used for sorting, outermost first."""
        return [self.first, self.second, *(["llc"] if self.use_llc else [])]

    @property
    def locality(self) -> str:
        """The finest locality domain: LLC when it is finer than NUMA, else the NUMA node."""
        return "llc" if self.use_llc else "node"

    def core_of(self, cpu: int) -> CoreKey:
        return self.owner["core"][cpu]

    def core_cpus(self, cpu: int) -> frozenset[int]:
        return self.domains["core"][self.core_of(cpu)]

    def cpus_in(self, level: str, ids: Iterable[Any]) -> frozenset[int]:
        out: set[int] = set()
        for i in ids:
            out |= self.domains[level].get(i, frozenset())
        return frozenset(out)


def _llc_is_finer(
    domains: dict[str, dict[Any, set[int]]], owner: dict[str, dict[int, Any]]
) -> bool:
    """True when every LLC sits inside one NUMA node and one socket and there are more LLCs than
    either; with SNC the L3 id is socket-wide, so the level would add nothing (§9.1)."""
    llcs = domains.get("llc") or {}
    if len(llcs) <= max(len(domains["node"]), len(domains["socket"])):
        return False
    for cpus in llcs.values():
        if len({owner["node"][c] for c in cpus}) != 1:
            return False
        if len({owner["socket"][c] for c in cpus}) != 1:
            return False
    return True


def make_view(topology: Topology, universe: Iterable[int], llc: bool | None = None) -> TopologyView:
    """The view of ``topology`` restricted to ``universe``.

    ``llc``: None = use the LLC level when it is finer than NUMA; False = never; True = whenever
    the host reports LLCs.
    """
    cpus = {c.id: c for c in topology.cpus}
    universe = frozenset(int(c) for c in universe)
    unknown = sorted(universe - set(cpus))
    if unknown:
        raise PlanError(
            f"{topology.source}: CPUs {format_cpulist(unknown)} are not online CPUs of this "
            "host; expected the isolation plan made from the same topology"
        )
    if not universe:
        raise PlanError(f"{topology.source}: no allocatable CPUs; expected isolated worker CPUs")
    domains: dict[str, dict[Any, set[int]]] = {"socket": {}, "node": {}, "llc": {}, "core": {}}
    owner: dict[str, dict[int, Any]] = {level: {} for level in domains}
    thread_index: dict[int, int] = {}
    for cid in sorted(universe):
        cpu = cpus[cid]
        ids = {
            "socket": cpu.package,
            "node": cpu.node,
            "llc": cpu.llc,
            "core": (cpu.package, cpu.core_id),
        }
        for level, i in ids.items():
            if i is None:
                continue
            domains[level].setdefault(i, set()).add(cid)
            owner[level][cid] = i
        thread_index[cid] = sorted(cpu.siblings).index(cid) if cid in cpu.siblings else 0
    has_llc = len(owner["llc"]) == len(universe)
    use_llc = has_llc and (_llc_is_finer(domains, owner) if llc is None else bool(llc))
    if not use_llc:
        domains.pop("llc")
        owner.pop("llc")
    # kubelet: NUMA first when sockets >= nodes (a node holds whole sockets), else sockets first.
    sockets, nodes = len(topology.sockets), len([n for n, c in topology.nodes.items() if c])
    first, second = ("node", "socket") if sockets >= nodes else ("socket", "node")
    return TopologyView(
        universe=universe,
        domains={lvl: {i: frozenset(c) for i, c in d.items()} for lvl, d in domains.items()},
        owner=owner,
        first=first,
        second=second,
        use_llc=use_llc,
        threads_per_core=max(len(c) for c in domains["core"].values()),
        thread_index=thread_index,
    )


# -- kubelet's accumulator -----------------------------------------------------------------------


class _Accumulator:
    """kubelet's cpuAccumulator: the free CPUs, the result so far, and the CPUs still needed."""

    def __init__(self, view: TopologyView, free: frozenset[int], need: int) -> None:
        self.view = view
        self.free = set(free)
        self.need = need
        self.result: set[int] = set()
        self._counts: dict[str, dict[Any, int]] = {}  #: per level, until the next take

    def take(self, cpus: Iterable[int]) -> None:
        cpus = set(cpus)
        self.free -= cpus
        self.result |= cpus
        self.need -= len(cpus)
        self._counts.clear()

    def counts(self, level: str) -> dict[Any, int]:
        """Free CPUs per domain of ``level`` (cached: the planner asks for them many times)."""
        cached = self._counts.get(level)
        if cached is not None:
            return cached
        out: dict[Any, int] = {}
        owner = self.view.owner[level]
        for c in self.free:
            key = owner[c]
            out[key] = out.get(key, 0) + 1
        self._counts[level] = out
        return out

    def sorted_ids(self, level: str) -> list[Any]:
        """Domains with free CPUs, fewest free first, then by id (best fit)."""
        counts = self.counts(level)
        return sorted(counts, key=lambda i: (counts[i], i))

    def entirely_free(self, level: str) -> list[Any]:
        counts = self.counts(level)
        return [i for i in self.sorted_ids(level) if counts[i] == len(self.view.domains[level][i])]

    def sorted_cores(self) -> list[CoreKey]:
        """Cores with free CPUs, each sorted inside its parents (§9.3 step 1)."""
        counts = {level: self.counts(level) for level in [*self.view.levels, "core"]}
        first_cpu: dict[CoreKey, int] = {}
        for c in sorted(self.free):
            first_cpu.setdefault(self.view.core_of(c), c)

        def key(core: CoreKey) -> tuple:
            cpu = first_cpu[core]
            path: list[Any] = []
            for level in self.view.levels:
                i = self.view.owner[level][cpu]
                path += [counts[level][i], i]
            return (*path, counts["core"][core], core)

        return sorted(first_cpu, key=key)

    def take_whole(self, level: str) -> None:
        for i in self.entirely_free(level):
            cpus = self.view.domains[level][i]
            if self.need >= len(cpus):
                self.take(cpus)

    def take_llcs(self) -> None:
        self.take_whole("llc")
        if self.need <= 0:
            return
        tpc = self.view.threads_per_core
        cores = self.sorted_cores()
        for llc in self.sorted_ids("llc"):
            k = math.ceil(self.need / tpc)
            whole = [
                core
                for core in cores
                if self.view.owner["llc"][min(self.view.domains["core"][core])] == llc
                and self.view.domains["core"][core] <= self.free
            ][:k]
            if len(whole) < k:
                continue
            candidate = sorted(c for core in whole for c in self.view.domains["core"][core])
            # With SMT and an odd need kubelet drops the highest CPU of the last core.
            candidate = candidate[: self.need]
            if len(candidate) == self.need:
                self.take(candidate)
                return

    def take_whole_cores(self) -> None:
        for core in self.sorted_cores():
            cpus = self.view.domains["core"][core]
            if cpus <= self.free and self.need >= len(cpus):
                self.take(cpus)

    def take_single(self, spread: bool) -> None:
        if spread:
            # distribute-cpus-across-cores: sockets in sorted order, CPUs by id inside; with Linux
            # sibling numbering that is one thread per core before any second thread.
            levels = self.view.levels[: self.view.levels.index("socket") + 1]
            counts = {level: self.counts(level) for level in levels}

            def key(cpu: int) -> tuple:
                path: list[Any] = []
                for level in levels:
                    i = self.view.owner[level][cpu]
                    path += [counts[level][i], i]
                return (*path, cpu)

            order = sorted(self.free, key=key)
        else:
            order = [
                c
                for core in self.sorted_cores()
                for c in sorted(self.view.domains["core"][core] & self.free)
            ]
        for cpu in order:
            if self.need <= 0:
                return
            self.take([cpu])


def _check_request(n: int, free: frozenset[int], view: TopologyView, whole_cores: bool) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise PlanError(f"CPU count: expected a whole number >= 0, got {n!r}")
    outside = free - view.universe
    if outside:
        raise PlanError(
            f"free CPUs {format_cpulist(outside)} are outside the allocatable CPUs "
            f"{format_cpulist(view.universe)}"
        )
    if whole_cores and n % view.threads_per_core:
        raise PlanError(
            f"{n} CPUs is not a whole number of cores; expected a multiple of "
            f"{view.threads_per_core} (threads per core) when whole cores are required"
        )
    if n > len(free):
        raise PlanError(f"asked for {n} CPUs but only {len(free)} are free")


def _whole_free_cores(free: frozenset[int], view: TopologyView) -> frozenset[int]:
    """The free CPUs whose whole core (in U) is free and complete.

    A core with an offline SMT sibling has fewer threads than the view's cores; handing it to a
    whole-core job would make the job take half a core elsewhere to reach its count, stranding
    that core's other thread (issue 18). Such a core serves first-thread jobs only.
    """
    tpc = view.threads_per_core
    return frozenset(c for c in free if len(view.core_cpus(c)) == tpc and view.core_cpus(c) <= free)


def take_packed(
    n: int,
    free: Iterable[int],
    view: TopologyView,
    *,
    whole_cores: bool = False,
    spread: bool = False,
) -> list[int]:
    """kubelet's takeByTopologyNUMAPacked (§9.3): ``n`` CPUs out of ``free`` (a subset of U).

    ``whole_cores`` is kubelet's full-pcpus-only (n must be a multiple of the threads per core,
    and only entirely free cores are used); ``spread`` is distribute-cpus-across-cores.
    Raises PlanError when the request can't be met.
    """
    free = frozenset(free)
    _check_request(n, free, view, whole_cores)
    if n == 0:
        return []
    if whole_cores:
        free = _whole_free_cores(free, view)
        if n > len(free):
            raise PlanError(f"asked for {n} CPUs in whole cores but only {len(free)} are free")
    acc = _Accumulator(view, free, n)
    for level in (view.first, view.second):
        acc.take_whole(level)
        if acc.need == 0:
            return sorted(acc.result)
    if view.use_llc:
        acc.take_llcs()
        if acc.need == 0:
            return sorted(acc.result)
    if not spread:
        acc.take_whole_cores()
    acc.take_single(spread)
    if acc.need != 0:  # cannot happen when n <= |free|; kept as kubelet's accounting check
        raise PlanError(f"accounting error: {acc.need} CPUs still needed after taking {n}")
    return sorted(acc.result)


def take_distributed(
    n: int,
    free: Iterable[int],
    view: TopologyView,
    *,
    whole_cores: bool = False,
) -> list[int]:
    """kubelet's takeByTopologyNUMADistributed (KEP-2902, §9.4): spread ``n`` CPUs evenly over
    the fewest NUMA nodes that can share them, in groups of a whole core when ``whole_cores``.
    """
    free = frozenset(free)
    _check_request(n, free, view, whole_cores)
    g = view.threads_per_core if whole_cores else 1
    if n == 0:
        return []
    if n % g:
        return take_packed(n, free, view, whole_cores=whole_cores)
    if whole_cores:
        free = _whole_free_cores(free, view)
        if n > len(free):
            raise PlanError(f"asked for {n} CPUs in whole cores but only {len(free)} are free")
    acc = _Accumulator(view, free, n)
    nodes = acc.sorted_ids("node")
    free_in = acc.counts("node")
    all_nodes = len(view.domains["node"])
    groups_per_node = math.ceil(math.ceil(len(view.universe) / g) / all_nodes)
    need_groups = math.ceil(n / g)
    min_k = math.ceil(need_groups / groups_per_node)
    max_k = min(need_groups, len(nodes))
    for k in range(min_k, max_k + 1):
        best: tuple[float, tuple[int, ...], tuple[int, ...]] | None = None
        for combo in itertools.combinations(nodes, k):
            if best is not None and best[0] == 0:
                break
            if sum(free_in[x] for x in combo) < n:
                continue
            if sum(free_in[x] // g for x in combo) * g < n:
                continue
            share = (n // k // g) * g
            if any(free_in[x] < share for x in combo):
                continue
            after = dict(free_in)
            for x in combo:
                after[x] -= share
            remainder = n - share * k
            local: tuple[float, tuple[int, ...]] | None = None
            if remainder == 0:
                local = (statistics.pstdev(after.values()), ())
            takers = [x for x in combo if after[x] >= g]
            for size in range(len(takers), 0, -1) if remainder else ():
                for subset in itertools.combinations(takers, size):
                    if sum(after[x] for x in subset) < remainder:
                        continue
                    left, rest = dict(after), remainder
                    while rest > 0:
                        progressed = False
                        for x in subset:
                            if rest > 0 and left[x] >= g:
                                left[x] -= g
                                rest -= g
                                progressed = True
                        if not progressed:
                            break
                    if rest > 0:
                        continue
                    balance = statistics.pstdev(left.values())
                    if local is None or balance < local[0]:
                        local = (balance, subset)
            if local is not None and (best is None or local[0] < best[0]):
                best = (local[0], combo, local[1])
        if best is None:
            continue
        _, combo, subset = best
        share = (n // k // g) * g
        for x in combo:
            in_node = frozenset(acc.free) & view.domains["node"][x]
            acc.take(take_packed(share, in_node, view, whole_cores=whole_cores))
        remainder = n - share * k
        while remainder > 0:
            for x in subset:
                in_node = frozenset(acc.free) & view.domains["node"][x]
                if remainder == 0 or len(in_node) < g:
                    continue
                acc.take(take_packed(g, in_node, view, whole_cores=whole_cores))
                remainder -= g
        if acc.need != 0:
            raise PlanError(f"accounting error: {acc.need} CPUs off after distributing {n}")
        return sorted(acc.result)
    return take_packed(n, free, view, whole_cores=whole_cores)


# -- jobs and the multi-job planner ---------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    name: str
    cpus: int  #: logical CPUs wanted
    whole_cores: bool = True  #: all SMT threads of each core (else first threads only)
    distributed: bool = False  #: spread over NUMA nodes for memory bandwidth (KEP-2902)
    hugepages_per_node: int = 0  #: 2 MiB pages needed on every NUMA node the job runs on


JOB_FIELDS = ("name", "cpus", "whole_cores", "distributed", "hugepages_per_node")


def make_job(spec: Job | Mapping[str, Any], where: str = "job") -> Job:
    """A Job from a Job or a mapping with JOB_FIELDS; PlanError names the bad field."""
    if isinstance(spec, Job):
        fields = {f: getattr(spec, f) for f in JOB_FIELDS}
    elif isinstance(spec, Mapping):
        unknown = sorted(set(spec) - set(JOB_FIELDS))
        if unknown:
            raise PlanError(
                f"{where}: unknown field {unknown[0]!r}; expected one of {', '.join(JOB_FIELDS)}"
            )
        fields = dict(spec)
    else:
        raise PlanError(f"{where}: expected a job (name, cpus, ...), got {type(spec).__name__}")
    name = fields.get("name")
    if not isinstance(name, str) or not name or any(ch in name for ch in "=, \t"):
        raise PlanError(f"{where}: name: expected a non-empty word, got {name!r}")
    where = f"job {name!r}"
    for key in ("cpus", "hugepages_per_node"):
        value = fields.get(key, 0 if key == "hugepages_per_node" else None)
        low = 1 if key == "cpus" else 0
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise PlanError(f"{where}: {key}: expected a whole number >= {low}, got {value!r}")
    for key in ("whole_cores", "distributed"):
        if not isinstance(fields.get(key, False), bool):
            raise PlanError(f"{where}: {key}: expected true or false, got {fields[key]!r}")
    return Job(**fields)


@dataclass(frozen=True)
class Placement:
    job: Job
    cpus: tuple[int, ...]
    nodes: tuple[int, ...]
    llcs: tuple[int, ...]
    pin_order: tuple[int, ...]  #: first thread of every core first, then the second threads...
    score: tuple[int, ...]  #: SCORE_FIELDS: nodes, distance, LLCs, tenants, partial, highest CPU
    candidates: int  #: distinct CPU sets considered
    hugepages: dict[str, Any] | None  #: None when the job asked for none
    search: str = "exact"  #: EXACT, or BOUNDED when a candidate cap cut the search short

    def facts(self) -> dict[str, Any]:
        return {
            "name": self.job.name,
            "cpus": list(self.cpus),
            "count": len(self.cpus),
            "cpulist": format_cpulist(self.cpus),
            "nodes": list(self.nodes),
            "mems": format_cpulist(self.nodes),
            "llcs": list(self.llcs),
            "pin_order": list(self.pin_order),
            "whole_cores": self.job.whole_cores,
            "distributed": self.job.distributed,
            "score": dict(zip(SCORE_FIELDS, self.score, strict=True)),
            "candidates": self.candidates,
            "search": self.search,
            "hugepages": self.hugepages,
        }


SCORE_FIELDS = ("nodes", "distance", "llcs", "tenants", "partial_domains", "max_cpu")
EXACT = "exact"  #: every candidate of the rules was scored
BOUNDED = "bounded"  #: a cap cut the candidates short (the LLC count is still the fewest)


@dataclass(frozen=True)
class CpusetPlan:
    source: str
    policy: str
    order: str
    universe: tuple[int, ...]  #: workers + siblings of the isolation plan
    locality: str  #: "node" or "llc": the domain the score counts tenants and fragments in
    placements: tuple[Placement, ...]  #: in the order they were placed
    free: tuple[int, ...]  #: what is left of U

    def placement(self, name: str) -> Placement:
        for p in self.placements:
            if p.job.name == name:
                return p
        raise KeyError(name)

    def sharing(self, name: str) -> list[str]:
        """Other jobs holding CPUs on a NUMA node this job runs on."""
        mine = set(self.placement(name).nodes)
        return sorted(
            p.job.name for p in self.placements if p.job.name != name and mine & set(p.nodes)
        )

    def facts(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "policy": self.policy,
            "order": self.order,
            "locality": self.locality,
            "universe": format_cpulist(self.universe),
            "free": format_cpulist(self.free),
            "jobs": [
                {**p.facts(), "shares_nodes_with": self.sharing(p.job.name)}
                for p in self.placements
            ],
        }


def pin_order(cpus: Iterable[int], view: TopologyView) -> list[int]:
    """Where worker threads go, one per CPU: first threads of every core, then second threads."""
    return sorted(cpus, key=lambda c: (view.thread_index[c], c))


def _min_domains(n: int, free_by_domain: Mapping[int, int]) -> int:
    """The fewest domains whose free CPUs add up to n."""
    total, k = 0, 0
    for count in sorted(free_by_domain.values(), reverse=True):
        if total >= n:
            break
        total += count
        k += 1
    return max(k, 1)


def node_distances(snapshot: Any, source: str = "host facts") -> dict[int, dict[int, int]] | None:
    """The node distance table of a host-facts snapshot, or None when it has none.

    Each ``nodes.N.distance`` is the sysfs row (``/sys/devices/system/node/nodeN/distance``,
    e.g. "10 12 21 21"): one distance per online node, in ascending node order. A snapshot
    without rows gives None (the planner then assumes SLIT-like distances from the sockets).
    """
    nodes = snapshot.get("nodes") if isinstance(snapshot, Mapping) else None
    if not isinstance(nodes, Mapping) or not nodes:
        return None
    rows = [r.get("distance") if isinstance(r, Mapping) else None for r in nodes.values()]
    if all(row in (None, "") for row in rows):
        return None
    ids = sorted(int(k) for k in nodes if isinstance(k, str) and k.isascii() and k.isdigit())
    if len(ids) != len(nodes):
        return None  # the topology model reports the bad node key itself
    table: dict[int, dict[int, int]] = {}
    for n in ids:
        rec = nodes[str(n)]
        row = rec.get("distance") if isinstance(rec, Mapping) else None
        words = row.split() if isinstance(row, str) else []
        if len(words) != len(ids) or not all(w.isascii() and w.isdigit() for w in words):
            raise PlanError(
                f"{source}: nodes.{n}.distance: expected {len(ids)} whole numbers (one per "
                f"node, as in sysfs), got {row!r}"
            )
        table[n] = {m: int(words[i]) for i, m in enumerate(ids)}
    return table


class _Planner:
    def __init__(
        self,
        topology: Topology,
        isolation: IsolationPlan,
        policy: str,
        llc: bool | None,
        distances: Mapping[int, Mapping[int, int]] | None = None,
    ):
        self.topology = topology
        workers = isolation.workers
        self.universe = frozenset(workers + isolation.siblings)
        self.views = {
            True: make_view(topology, self.universe, llc),
            False: make_view(topology, workers, llc),
        }
        self.whole = self.views[True]
        self.policy = policy
        self.free = set(self.universe)
        self.holders: dict[int, str] = {}  #: CPU -> job
        self.hugepages_used: dict[int, int] = {}
        socket_of_node = {c.node: c.package for c in topology.cpus}
        self.distance = _distance_table(sorted(topology.nodes), socket_of_node, distances)

    def locality_of(self, cpu: int) -> Any:
        return self.whole.owner[self.whole.locality][cpu]

    def score(self, cpus: Sequence[int]) -> tuple[int, ...]:
        w = self.whole
        nodes = sorted({w.owner["node"][c] for c in cpus})
        spread = sum(self.distance[a][b] for a, b in itertools.combinations(nodes, 2))
        llcs = {w.owner["llc"][c] for c in cpus} if w.use_llc else set()
        touched = {self.locality_of(c) for c in cpus}
        tenants = 0
        if self.policy == ISOLATE:
            tenants = len(
                {job for c, job in self.holders.items() if self.locality_of(c) in touched}
            )
        left = self.free - set(cpus)
        partial = 0
        for members in w.domains[w.locality].values():
            used = len(members - left)
            partial += 0 < used < len(members)
        return (len(nodes), spread, len(llcs), tenants, partial, max(cpus))

    def hugepages(self, job: Job, nodes: Iterable[int]) -> dict[str, Any] | None:
        if not job.hugepages_per_node:
            return None
        per_node: dict[str, Any] = {}
        feasible: bool | None = True
        for node in sorted(nodes):
            total = self.topology.hugepages_2m.get(node)
            available = None if total is None else total - self.hugepages_used.get(node, 0)
            ok = None if available is None else available >= job.hugepages_per_node
            per_node[str(node)] = {"available": available, "ok": ok}
            if ok is False:
                feasible = False
            elif ok is None and feasible:
                feasible = None
        return {"per_node": job.hugepages_per_node, "nodes": per_node, "feasible": feasible}

    def llc_tenants(self, llc: int) -> int:
        if self.policy != ISOLATE:
            return 0
        members = self.whole.domains["llc"].get(llc, frozenset())
        return len({job for c, job in self.holders.items() if c in members})

    def llc_sets(self, need: int, by_llc: Mapping[int, int]) -> tuple[list[tuple[int, ...]], bool]:
        """The sets of the fewest LLCs whose usable CPUs hold ``need``, best first.

        The fewest count k is exact (the k fullest LLCs hold the most). The k-sets are found by a
        depth-first search over LLCs sorted fullest first that prunes a branch as soon as even
        its fullest completion falls short; it stops after MAX_LLC_COMBINATIONS feasible sets
        (then ``complete`` is False). The sets are ranked by other jobs in them (isolate), CPUs
        left over in them (best fit), then LLC ids, and the LLC_SETS_SCORED best are returned.
        """
        k = _min_domains(need, by_llc)
        order = sorted(by_llc, key=lambda x: (-by_llc[x], x))
        caps = [by_llc[x] for x in order]
        found: list[tuple[int, ...]] = []
        complete = True

        def dfs(start: int, chosen: list[int], total: int) -> bool:
            """False once the cap is reached."""
            left = k - len(chosen)
            if left == 0:
                if total >= need:
                    found.append(tuple(sorted(order[i] for i in chosen)))
                    return len(found) < MAX_LLC_COMBINATIONS
                return True
            for i in range(start, len(order) - left + 1):
                # caps is sorted descending: the best completion from i is caps[i:i+left].
                if total + sum(caps[i : i + left]) < need:
                    break
                chosen.append(i)
                going = dfs(i + 1, chosen, total + caps[i])
                chosen.pop()
                if not going:
                    return False
            return True

        complete = dfs(0, [], 0)

        def rank(llcs: tuple[int, ...]) -> tuple:
            tenants = sum(self.llc_tenants(x) for x in llcs)
            return (tenants, sum(by_llc[x] for x in llcs) - need, llcs)

        found.sort(key=rank)
        return found[:LLC_SETS_SCORED], complete

    def combo_sets(
        self,
        job: Job,
        view: TopologyView,
        free: frozenset[int],
        usable: frozenset[int],
        combo: tuple[int, ...],
    ) -> tuple[list[list[int]], bool]:
        """CPU sets for ``job`` inside the nodes of ``combo``: kubelet's take over the nodes, and
        (when LLCs are a level) the take inside each of the best sets of the fewest LLCs."""
        subset = free & view.cpus_in("node", combo)
        domain_sets = [subset]
        complete = True
        if view.use_llc:
            # Affinity Tailor's objective is fewest LLCs; kubelet's take inside a node combination
            # fills the fullest LLC first, which can split a job that fits in fewer free LLCs.
            by_llc: dict[int, int] = {}
            for c in usable & subset:
                llc = view.owner["llc"][c]
                by_llc[llc] = by_llc.get(llc, 0) + 1
            sets, complete = self.llc_sets(job.cpus, by_llc)
            domain_sets += [free & view.cpus_in("llc", llcs) for llcs in sets]
        out = []
        for cpus_of_domains in domain_sets:
            if len(usable & cpus_of_domains) < job.cpus:
                continue
            try:
                out.append(
                    take_packed(job.cpus, cpus_of_domains, view, whole_cores=job.whole_cores)
                )
            except PlanError:
                continue
        return out, complete

    def place(self, job: Job) -> Placement:
        view = self.views[job.whole_cores]
        free = frozenset(self.free) & view.universe
        usable = _whole_free_cores(free, view) if job.whole_cores else free
        what = "CPUs in whole free cores" if job.whole_cores else "free worker CPUs (first threads)"
        if job.whole_cores and job.cpus % view.threads_per_core:
            raise PlanError(
                f"{self.topology.source}: job {job.name!r}: cpus={job.cpus} is not a whole number "
                f"of cores; expected a multiple of {view.threads_per_core} (threads per core) or "
                "first threads only"
            )
        if job.cpus > len(usable):
            raise PlanError(
                f"{self.topology.source}: job {job.name!r}: asks for {job.cpus} CPUs but only "
                f"{len(usable)} {what} are left of {len(view.universe)} allocatable"
            )
        scored: list[tuple[bool, tuple[int, ...], list[int], Any]] = []
        seen: set[tuple[int, ...]] = set()
        exact = True

        def consider(cpus: list[int]) -> None:
            if tuple(cpus) in seen:
                return
            seen.add(tuple(cpus))
            nodes = {view.owner["node"][c] for c in cpus}
            hp = self.hugepages(job, nodes)
            fits = hp is None or hp["feasible"] is not False
            scored.append((not fits, self.score(cpus), cpus, hp))

        if job.distributed:
            # KEP-2902 already picks its nodes (by balance); narrowing it to a combination would
            # undo the spread the job asked for.
            consider(take_distributed(job.cpus, free, view, whole_cores=job.whole_cores))
        else:
            by_node: dict[int, int] = {}
            for c in usable:
                node = view.owner["node"][c]
                by_node[node] = by_node.get(node, 0) + 1
            nodes = sorted(by_node)
            if len(nodes) > MAX_COMBINATION_NODES:
                sizes: list[list[tuple[int, ...]]] = [[tuple(nodes)]]
                exact = False
            else:
                start = _min_domains(job.cpus, by_node)
                sizes = [
                    list(itertools.combinations(nodes, k)) for k in range(start, len(nodes) + 1)
                ]
            for combos in sizes:
                for combo in combos:
                    if sum(by_node[x] for x in combo) < job.cpus:
                        continue
                    sets, complete = self.combo_sets(job, view, free, usable, combo)
                    exact = exact and complete
                    for cpus in sets:
                        consider(cpus)
                # Nodes touched is the first score term: once k nodes give a placement (with its
                # hugepages), a bigger combination can only tie or lose on it.
                if any(not short for short, *_ in scored):
                    break
        if not scored:
            raise PlanError(
                f"{self.topology.source}: job {job.name!r}: no placement of {job.cpus} CPUs fits "
                f"the {what}"
            )
        _, score, cpus, hp = min(scored, key=lambda s: (s[0], s[1]))
        for c in cpus:
            self.free.discard(c)
            self.holders[c] = job.name
        nodes = sorted({view.owner["node"][c] for c in cpus})
        if job.hugepages_per_node:
            for node in nodes:
                self.hugepages_used[node] = (
                    self.hugepages_used.get(node, 0) + job.hugepages_per_node
                )
        llcs = sorted({self.whole.owner["llc"][c] for c in cpus}) if self.whole.use_llc else []
        return Placement(
            job=job,
            cpus=tuple(cpus),
            nodes=tuple(nodes),
            llcs=tuple(llcs),
            pin_order=tuple(pin_order(cpus, self.whole)),
            score=score,
            candidates=len(scored),
            hugepages=hp,
            search=EXACT if exact else BOUNDED,
        )


def _distance_table(
    nodes: Sequence[int],
    socket_of_node: Mapping[int, int],
    distances: Mapping[int, Mapping[int, int]] | None,
) -> dict[int, dict[int, int]]:
    """Node-to-node distances: the host's table, or SLIT-like values from the sockets."""
    if distances:
        missing = [n for n in nodes if n not in distances or set(nodes) - set(distances[n])]
        if missing:
            raise PlanError(
                f"node distance table: node {missing[0]}: expected a distance to every node "
                f"({format_cpulist(nodes)})"
            )
        return {a: {b: int(distances[a][b]) for b in nodes} for a in nodes}

    def guess(a: int, b: int) -> int:
        if a == b:
            return LOCAL_DISTANCE
        same = socket_of_node.get(a) == socket_of_node.get(b)
        return SAME_SOCKET_DISTANCE if same else OTHER_SOCKET_DISTANCE

    return {a: {b: guess(a, b) for b in nodes} for a in nodes}


def plan_jobs(
    jobs: Iterable[Job | Mapping[str, Any]],
    topology: Topology,
    isolation_plan: IsolationPlan,
    policy: str = PACK,
    *,
    order: str = DECREASING,
    llc: bool | None = None,
    distances: Mapping[int, Mapping[int, int]] | None = None,
) -> CpusetPlan:
    """Place every job on disjoint CPUs of the isolation plan's worker cores (§9.5).

    ``policy``: "pack" (kubelet's best fit) or "isolate" (Affinity Tailor: also keep jobs out of
    each other's NUMA/LLC domains). ``order``: "decreasing" (first fit decreasing, ties by name)
    or "given". ``distances``: the node distance table (``node_distances(snapshot)``); None
    assumes SLIT-like distances from the sockets. Raises PlanError for an unknown policy/order,
    a bad or duplicate job, or a job that does not fit in what is left.
    """
    if policy not in POLICIES:
        raise PlanError(f"policy: expected one of {', '.join(POLICIES)}, got {policy!r}")
    if order not in ORDERS:
        raise PlanError(f"order: expected one of {', '.join(ORDERS)}, got {order!r}")
    checked = [make_job(j, f"jobs[{i}]") for i, j in enumerate(jobs)]
    names = [j.name for j in checked]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise PlanError(f"job {duplicates[0]!r}: named twice; expected unique job names")
    if order == DECREASING:
        checked.sort(key=lambda j: (-j.cpus, j.name))
    planner = _Planner(topology, isolation_plan, policy, llc, distances)
    placements = tuple(planner.place(job) for job in checked)
    return CpusetPlan(
        source=topology.source,
        policy=policy,
        order=order,
        universe=tuple(sorted(planner.universe)),
        locality=planner.whole.locality,
        placements=placements,
        free=tuple(sorted(planner.free)),
    )
