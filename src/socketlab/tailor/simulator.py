"""The controller's simulator (pure): a demand trace and a topology -> CPU sets over time,
under three policies, and what each costs (docs/tailor.md).

Policies, every tick of the trace:

- ``cfs``: a CFS-like spread. Work-conserving: all managed CPUs are shared; each workload's
  demand, in threads (rounded up), is spread the way the load balancer spreads runnable
  threads onto idle domains, one thread at a time onto the LLC with the most idle CPUs left
  (workloads taking turns). Oversubscribed, each workload gets a share in proportion to its
  demand. Nothing is stranded; locality is what the spread leaves.
- ``static``: hard partitions sized once, by an oracle, to each workload's 95th-percentile
  demand over the whole trace (water-filled to the managed cores), placed by the planner.
  Demand beyond a partition is not served.
- ``tailor``: the controller (``socketlab.tailor.controller.Tailor``) fed the trace as its samples.
  The sets in force at a tick are the ones it chose after the previous tick (it can't see the
  future), applied as hard sets; a parked workload and the spill margin use the CPUs no set
  holds.

Per policy: locality domains (LLCs, and NUMA nodes) spanned per busy workload, the share of
busy workload-ticks that share an LLC with another busy workload, idle capacity stranded (idle
CPUs at a tick where some demand went unserved, as a share of all CPU-time), demand not
served, and set changes per minute.
"""

from __future__ import annotations

import csv
import io
import json
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from socketlab.errors import PlanError, SpecError
from socketlab.placement.cpuset import Job, plan_jobs
from socketlab.placement.isolation import IsolationPlan
from socketlab.tailor.controller import EstimatorConfig, Tailor, percentile, water_fill
from socketlab.topology.model import Topology

POLICIES = ("cfs", "static", "tailor")
MIXES = ("mixed", "steady", "bursty")


@dataclass(frozen=True)
class Trace:
    period: float  #: seconds per tick
    workloads: tuple[str, ...]
    demand: tuple[dict[str, float], ...]  #: per tick: workload -> CPUs wanted
    source: str = "trace"

    @property
    def minutes(self) -> float:
        return len(self.demand) * self.period / 60


# -- traces --------------------------------------------------------------------------------------


def _number(value: Any, where: str, field_name: str) -> float:
    text = str(value).strip()
    try:
        if not text.isascii():
            raise ValueError(text)
        number = float(text)
    except (TypeError, ValueError):
        raise SpecError(f"{where}: {field_name}: expected a number, got {value!r}") from None
    if not math.isfinite(number):
        raise SpecError(f"{where}: {field_name}: expected a finite number, got {value!r}")
    return number


def parse_trace(text: str, source: str = "trace") -> Trace:
    """A trace from CSV (header ``t,workload,cpus``) or JSON lines (``{"t", "workload",
    "cpus"}``): one row per workload and time; a workload missing at a time wants 0 CPUs."""
    rows: list[tuple[str, Any, Any, Any]] = []  # (where, t, workload, cpus)
    stripped = text.lstrip()
    if stripped.startswith("{"):
        for n, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            where = f"{source}:{n}"
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SpecError(f"{where}: not a JSON object ({exc.msg})") from None
            if not isinstance(rec, dict) or set(rec) != {"t", "workload", "cpus"}:
                raise SpecError(f"{where}: expected an object with t, workload and cpus")
            rows.append((where, rec["t"], rec["workload"], rec["cpus"]))
    else:
        reader = csv.reader(io.StringIO(text))
        header = next(reader, None)
        if header is None or [h.strip() for h in header] != ["t", "workload", "cpus"]:
            raise SpecError(f"{source}:1: header: expected t,workload,cpus, got {header!r}")
        for n, row in enumerate(reader, start=2):
            if not row:
                continue
            if len(row) != 3:
                raise SpecError(f"{source}:{n}: expected 3 fields (t,workload,cpus), got {row!r}")
            rows.append((f"{source}:{n}", *row))
    if not rows:
        raise SpecError(f"{source}: no rows; expected t,workload,cpus records")
    by_t: dict[float, dict[str, float]] = {}
    names: list[str] = []
    for where, t, workload, cpus in rows:
        t = _number(t, where, "t")
        if not isinstance(workload, str) or not workload.strip():
            raise SpecError(f"{where}: workload: expected a name, got {workload!r}")
        workload = workload.strip()
        cpus = _number(cpus, where, "cpus")
        if cpus < 0:
            raise SpecError(f"{where}: cpus: expected a demand >= 0, got {cpus:g}")
        if t < 0:
            raise SpecError(f"{where}: t: expected seconds >= 0, got {t:g}")
        tick = by_t.setdefault(t, {})
        if workload in tick:
            raise SpecError(f"{where}: workload {workload!r} at t={t:g} given twice")
        tick[workload] = cpus
        if workload not in names:
            names.append(workload)
    times = sorted(by_t)
    steps = sorted({round(b - a, 9) for a, b in zip(times, times[1:], strict=False)})
    period = steps[0] if steps else 1.0
    if any(abs(s / period - round(s / period)) > 1e-6 for s in steps):
        raise SpecError(f"{source}: t: expected a regular time grid, got steps {steps[:4]}")
    ticks: list[dict[str, float]] = []
    for a, b in zip(times, [*times[1:], times[-1] + period], strict=True):
        tick = {n: by_t[a].get(n, 0.0) for n in names}
        ticks += [tick] * max(1, round((b - a) / period))  # a gap holds the last demand
    return Trace(period, tuple(names), tuple(ticks), source)


def load_trace(path: str | Path) -> Trace:
    p = Path(path)
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{p}: can't read the trace ({exc})") from None
    return parse_trace(text, str(p))


def trace_csv(trace: Trace) -> str:
    out = ["t,workload,cpus"]
    for i, tick in enumerate(trace.demand):
        for n in trace.workloads:
            out.append(f"{i * trace.period:g},{n},{tick[n]:.3f}")
    return "\n".join(out) + "\n"


def generate_mix(
    kind: str = "mixed",
    *,
    capacity: int,
    minutes: float = 10.0,
    period: float = 1.0,
    seed: int = 0,
    peak: float = 0.4,
) -> Trace:
    """A synthetic mix of four workloads for ``capacity`` managed CPUs, each peaking at about
    ``peak`` of them (0.4: the peaks add up to 1.6 x the CPUs but rarely coincide, which is
    where demand-sized sets and static partitions part).

    ``mixed``: a steady service, a diurnal one (a sine over the trace), a bursty batch job
    (on/off, seconds to a minute each), and one that ramps up and down; ``steady``: four at
    constant demand with noise; ``bursty``: four bursty jobs.
    """
    if kind not in MIXES:
        raise PlanError(f"--generate: expected one of {', '.join(MIXES)}, got {kind!r}")
    if minutes <= 0 or period <= 0 or not 0 < peak <= 1:
        raise PlanError("--minutes, --period: expected numbers > 0; --peak: in (0, 1]")
    rng = random.Random(seed)
    n = max(1, round(minutes * 60 / period))
    share = peak * capacity

    def bursty(level: float) -> list[float]:
        out: list[float] = []
        on = rng.random() < 0.5
        while len(out) < n:
            run = rng.randint(max(1, round(5 / period)), max(2, round(60 / period)))
            out += [level * (0.8 + 0.2 * rng.random()) if on else 0.05 * level] * run
            on = not on
        return out[:n]

    def steady(level: float) -> list[float]:
        return [max(0.0, level * (0.9 + 0.2 * rng.random())) for _ in range(n)]

    def diurnal(level: float) -> list[float]:
        return [level * (0.55 + 0.45 * math.sin(2 * math.pi * i / n)) for i in range(n)]

    def ramp(level: float) -> list[float]:
        return [level * (0.1 + 0.9 * (1 - abs(2 * i / n - 1))) for i in range(n)]

    makers = {
        "mixed": [("steady", steady), ("diurnal", diurnal), ("batch", bursty), ("ramp", ramp)],
        "steady": [(f"steady{i}", steady) for i in range(4)],
        "bursty": [(f"batch{i}", bursty) for i in range(4)],
    }[kind]
    series = {name: make(share) for name, make in makers}
    names = tuple(series)
    ticks = tuple({w: round(series[w][i], 3) for w in names} for i in range(n))
    return Trace(period, names, ticks, f"generated:{kind}:seed={seed}")


# -- the policies ---------------------------------------------------------------------------------


@dataclass
class Tick:
    own: dict[str, tuple[int, ...]]  #: CPUs each workload may run on (hard sets) or ran on
    served: dict[str, float]
    idle: float  #: managed CPUs not serving anything
    unmet: float


@dataclass
class Result:
    policy: str
    topology: str
    capacity: int
    ticks: list[Tick] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    llc_of: dict[int, int] = field(default_factory=dict)  #: managed CPU -> its LLC
    node_of: dict[int, int] = field(default_factory=dict)  #: managed CPU -> its NUMA node


class _Domains:
    def __init__(self, topology: Topology, universe: Sequence[int]) -> None:
        self.universe = tuple(sorted(universe))
        cpu = {c.id: c for c in topology.cpus}
        self.llc = {c: cpu[c].llc if cpu[c].llc is not None else -1 for c in self.universe}
        self.node = {c: cpu[c].node for c in self.universe}
        self.by_llc: dict[int, list[int]] = {}
        for c in self.universe:
            self.by_llc.setdefault(self.llc[c], []).append(c)


def _cfs(trace: Trace, dom: _Domains) -> list[Tick]:
    capacity = len(dom.universe)
    ticks = []
    for demand in trace.demand:
        total = sum(demand.values())
        scale = min(1.0, capacity / total) if total else 1.0
        served = {n: d * scale for n, d in demand.items()}
        threads = {n: math.ceil(s - 1e-9) for n, s in served.items()}
        idle_in = {llc: list(cpus) for llc, cpus in dom.by_llc.items()}
        placed: dict[str, list[int]] = {n: [] for n in demand}
        left = dict(threads)
        # Workloads take turns placing one runnable thread on the LLC with the most idle CPUs
        # (ties by LLC id): what idle balancing does when threads wake up.
        while any(left.values()):
            for n in trace.workloads:
                if left[n] <= 0:
                    continue
                llc = max(idle_in, key=lambda x: (len(idle_in[x]), -x))
                if not idle_in[llc]:
                    left = dict.fromkeys(left, 0)
                    break
                placed[n].append(idle_in[llc].pop(0))
                left[n] -= 1
        used = sum(served.values())
        ticks.append(
            Tick(
                own={n: tuple(sorted(c)) for n, c in placed.items()},
                served=served,
                idle=capacity - used,
                unmet=max(0.0, total - used),
            )
        )
    return ticks


def _hard(trace: Trace, dom: _Domains, sets_at, pools) -> list[Tick]:
    """Hard sets: each serves up to its own CPUs; the pool of unheld CPUs serves parked
    workloads and spills, in proportion to what they still want."""
    capacity = len(dom.universe)
    ticks = []
    for i, demand in enumerate(trace.demand):
        own = sets_at(i)
        pool, pool_users = pools(i)
        served = {n: min(d, len(own.get(n, ()))) for n, d in demand.items()}
        for n in set(demand) - set(own):
            served[n] = 0.0
        excess = {n: demand[n] - served[n] for n in pool_users if demand[n] > served[n]}
        want = sum(excess.values())
        if want and pool:
            give = min(1.0, pool / want)
            for n, e in excess.items():
                served[n] += e * give
        total, used = sum(demand.values()), sum(served.values())
        ticks.append(
            Tick(
                own=own, served=served, idle=max(0.0, capacity - used), unmet=max(0.0, total - used)
            )
        )
    return ticks


def _static_sets(trace, topology, isolation, distances) -> dict[str, tuple[int, ...]]:
    tpc = topology.threads_per_core
    cores_total = len(isolation.workers)
    p95 = {n: percentile([t[n] for t in trace.demand], 95) for n in trace.workloads}
    wants = {n: max(1, math.ceil(p95[n] / tpc)) for n in trace.workloads}
    fitted = water_fill(wants, cores_total)
    jobs = [Job(n, fitted[n] * tpc) for n in trace.workloads if fitted[n]]
    plan = plan_jobs(jobs, topology, isolation, "isolate", distances=distances)
    return {p.job.name: p.cpus for p in plan.placements}


def simulate(
    trace: Trace,
    topology: Topology,
    isolation: IsolationPlan,
    policy: str,
    config: EstimatorConfig | None = None,
    distances: Mapping[int, Mapping[int, int]] | None = None,
) -> Result:
    if policy not in POLICIES:
        raise PlanError(f"policy: expected one of {', '.join(POLICIES)}, got {policy!r}")
    universe = sorted(isolation.workers + isolation.siblings)
    dom = _Domains(topology, universe)
    changes = 0
    if policy == "cfs":
        ticks = _cfs(trace, dom)
    elif policy == "static":
        sets = _static_sets(trace, topology, isolation, distances)
        unheld = len(universe) - sum(len(s) for s in sets.values())
        ticks = _hard(
            trace,
            dom,
            lambda i: sets,
            lambda i: (unheld, [n for n in trace.workloads if n not in sets]),
        )
    else:
        tailor = Tailor(
            topology,
            isolation,
            list(trace.workloads),
            config or EstimatorConfig(),
            "isolate",
            distances,
        )
        history = [tailor.start()]
        for demand in trace.demand[:-1]:
            history.append(tailor.step(demand))
        changes = sum(
            sum(a.sets[n] != b.sets[n] for n in trace.workloads)
            for a, b in zip(history, history[1:], strict=False)
        )
        spill = (config or EstimatorConfig()).spill
        busy_pool = list(trace.workloads) if spill else []

        def sets_at(i: int) -> dict[str, tuple[int, ...]]:
            return history[i].own

        def pools(i: int) -> tuple[float, list[str]]:
            # The CPUs no set holds: they serve parked workloads and, with a spill margin,
            # every workload past its own set.
            a = history[i]
            unheld = len(universe) - sum(len(c) for c in a.own.values())
            return float(unheld), list(a.parked) + busy_pool

        ticks = _hard(trace, dom, sets_at, pools)
    result = Result(policy, topology.source, len(universe), ticks, llc_of=dom.llc, node_of=dom.node)
    result.summary = summarize(trace, dom, ticks, changes)
    return result


def summarize(trace: Trace, dom: _Domains, ticks: list[Tick], changes: int) -> dict[str, Any]:
    llcs, nodes, shared, busy = 0, 0, 0, 0
    per: dict[str, list[int]] = {n: [] for n in trace.workloads}
    for tick, demand in zip(ticks, trace.demand, strict=True):
        mine = {
            n: {dom.llc[c] for c in tick.own.get(n, ())}
            for n in trace.workloads
            if demand[n] > 0.05 and tick.own.get(n)
        }
        for n, ls in mine.items():
            busy += 1
            llcs += len(ls)
            per[n].append(len(ls))
            nodes += len({dom.node[c] for c in tick.own[n]})
            shared += any(ls & other for m, other in mine.items() if m != n)
    capacity = len(dom.universe) * len(ticks)
    total = sum(sum(d.values()) for d in trace.demand)
    unmet = sum(t.unmet for t in ticks)
    stranded = sum(max(0.0, min(t.idle, t.unmet)) for t in ticks)  # float noise is not < 0
    return {
        "llcs_per_workload": round(llcs / busy, 3) if busy else 0.0,
        "nodes_per_workload": round(nodes / busy, 3) if busy else 0.0,
        "llcs_by_workload": {n: round(sum(v) / len(v), 2) if v else 0.0 for n, v in per.items()},
        "llc_shared": round(shared / busy, 3) if busy else 0.0,
        "stranded": round(stranded / capacity, 4) if capacity else 0.0,
        "unserved": round(unmet / total, 4) if total else 0.0,
        "utilization": round((total - unmet) / capacity, 4) if capacity else 0.0,
        "changes_per_minute": round(changes / trace.minutes, 2) if trace.minutes else 0.0,
        "llcs": len(dom.by_llc),
        "capacity": len(dom.universe),
        "ticks": len(ticks),
    }
