"""How long a plan takes: from the campaign's past runs in its store, else from the spec.

``from_store`` takes the median past duration per (experiment, host), else per experiment;
``from_spec`` each run's ``--seconds x --reps`` plus a per-run and per-build allowance. Hosts
run in parallel, so an estimate is the longest host's sum. `orchestrate plan` prints it
(socketlab.session.preview).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from socketlab.spec.expand import Plan
from socketlab.store import Store, store_path


def estimate(
    plan: Plan, results: str | Path | None = None, *, assumed: bool = False
) -> dict[str, Any]:
    """The store's estimate where it has past runs, else the spec's. An assumed host (``plan
    --assume-host``) has no past runs of its own (those in the store are of other machines,
    maybe with another profile), so its estimate comes from the spec."""
    return (None if assumed else from_store(plan, results)) or from_spec(plan)


#: per run, besides the command: fingerprints, collector start/stop, fetch and store; an
#: allowance for collectors and slow hosts (a no-op point costs ~15 ms here: docs/performance.md)
RUN_OVERHEAD_S = 2.0
#: per build and host: `make -C native all` of a fresh checkout (compile + self-checks)
BUILD_ALLOWANCE_S = 120.0


def _argv_seconds(argv: tuple[str, ...]) -> float | None:
    """--seconds S x --reps R (R defaults to 1) of a native benchmark's command line."""
    seconds = reps = None
    for flag, value in zip(argv, argv[1:], strict=False):
        try:
            if flag == "--seconds":
                seconds = float(value)
            elif flag == "--reps":
                reps = int(value)
        except ValueError:
            return None
    return None if seconds is None else seconds * (reps or 1)


def from_spec(plan: Plan) -> dict[str, Any]:
    """The time the plan takes from the spec alone: each run's --seconds x --reps plus
    RUN_OVERHEAD_S, runs without --seconds at their timeout_s (a ceiling), plus
    BUILD_ALLOWANCE_S per build per host; hosts run in parallel (the longest host counts)."""
    per_host: dict[str, float] = {}
    timed: dict[str, float] = {}
    builds: dict[str, set[str]] = {}
    unknown = 0
    for p in plan.points:
        seconds = _argv_seconds(p.argv)
        if seconds is None:
            unknown += 1
        else:
            timed[p.host] = timed.get(p.host, 0.0) + seconds + RUN_OVERHEAD_S
        ceiling = p.timeout_s if seconds is None else seconds
        per_host[p.host] = per_host.get(p.host, 0.0) + ceiling + RUN_OVERHEAD_S
        if p.build:
            builds.setdefault(p.host, set()).add(p.build)
    for host, names in builds.items():
        per_host[host] += BUILD_ALLOWANCE_S * len(names)
        timed[host] = timed.get(host, 0.0) + BUILD_ALLOWANCE_S * len(names)
    # "seconds" is the ceiling, what `hours` must cover; "timed_seconds" the part the spec
    # fixes exactly (step-counted runs take what the CPU makes of their steps)
    return {
        "source": "spec",
        "seconds": max(per_host.values(), default=0.0),
        "timed_seconds": max(timed.values(), default=0.0),
        "per_host": per_host,
        "past_runs": 0,
        "unknown_runs": unknown,
    }


def from_store(plan: Plan, results: str | Path | None = None) -> dict[str, Any] | None:
    """Median past duration per (experiment, host), else per experiment, summed over the plan.

    Reads results/<campaign>/store.sqlite through socketlab.store when it exists; None when
    there is no store or no past run has a duration. Hosts run in parallel, so the estimate is
    the longest host's sum.
    """
    path = store_path(plan.spec.campaign, results)
    if not path.exists():
        return None
    durations: dict[tuple[str, str | None], list[float]] = {}
    past = 0
    with Store(path, create=False) as store:
        records = store.runs(plan.spec.campaign)
    for record in records:
        if record.duration_s is None:
            continue
        past += 1
        durations.setdefault((record.experiment, record.host), []).append(record.duration_s)
        durations.setdefault((record.experiment, None), []).append(record.duration_s)
    if not past:
        return None
    per_host: dict[str, float] = {}
    unknown = 0
    for p in plan.points:
        known = durations.get((p.experiment, p.host)) or durations.get((p.experiment, None))
        if known:
            per_host[p.host] = per_host.get(p.host, 0.0) + statistics.median(known)
        else:
            unknown += 1
    return {
        "seconds": max(per_host.values(), default=0.0),
        "per_host": per_host,
        "past_runs": past,
        "unknown_runs": unknown,
    }
