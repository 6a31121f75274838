"""`orchestrate plan SPEC`: every point that would run, per host, with counts and skips."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import statistics
import sys
from typing import Any

from socketlab.commands._options import add_results_argument, add_spec_arguments
from socketlab.spec.expand import Plan, Skip


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "plan",
        help="show every point a spec would run, per host, and what is skipped",
        description="Load and check SPEC, gather facts of its hosts (or take them from "
        "--assume-host snapshots, so a controller without hosts can size a campaign), and print "
        "every run point in run order, counts per host and experiment, skipped experiments with "
        "the reason, and an estimated time: from past runs in the store (not with --assume-host), "
        "else from the spec's own durations (--seconds x --reps of each command, plus a build allowance). Runs "
        "nothing.",
    )
    add_spec_arguments(
        parser,
        repetitions_help="repetitions per point instead of the spec's",
        profile_help="apply the spec's profiles.NAME overrides, as run does",
    )
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    parser.add_argument(
        "--assume-host", action="append", metavar="[NAME=]FACTS",
        help="plan for a host described by FACTS (collectors/host_facts.py output, e.g. "
             "tests/fixtures/topology/c8i-metal-48xl.json) instead of the inventory; NAME "
             "defaults to the file's stem; repeatable")  # fmt: skip
    add_results_argument(parser, "results folder whose past runs give the estimate "
                         "(default: results/, or $SOCKETLAB_RESULTS)")  # fmt: skip
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from socketlab.session import prepare, require_a_host
    from socketlab.shipped import spec_path

    campaign = prepare(spec_path(args.spec), profile=args.profile, pattern=args.hosts,
                       inventory=args.inventory, repetitions=args.repetitions,
                       assume=getattr(args, "assume_host", None))  # fmt: skip
    require_a_host(campaign)
    plan = campaign.plan
    # Unreachable hosts are part of the answer: every experiment there is skipped, with why.
    plan.skipped.extend(
        Skip(name, exp.name, f"host unreachable: {exc}")
        for name, exc in campaign.unreachable.items()
        for exp in campaign.spec.experiments
    )
    # An assumed host has no past runs of its own (those in the store are of other machines,
    # maybe with another profile), so its estimate comes from the spec.
    assumed = bool(getattr(args, "assume_host", None))
    estimate = (None if assumed else estimate_seconds(plan, getattr(args, "results", None))
                ) or spec_estimate(plan)  # fmt: skip
    if args.json:
        json.dump(plan_document(plan, estimate), sys.stdout, indent=1, default=str)
        print()
    else:
        print_plan(plan, estimate)
    return 0


def plan_document(plan: Plan, estimate: dict[str, Any] | None) -> dict[str, Any]:
    spec = plan.spec
    return {
        "campaign": spec.campaign,
        "description": spec.description,
        "spec": str(spec.path),
        "spec_sha256": spec.sha256,
        "hosts": {
            host: {"profile_sha256": plan.profile_hash(host), "profile": plan.host_profiles[host]}
            for host in plan.hosts
        },
        "counts": plan.counts(),
        "total_runs": len(plan.points),
        "points": [dataclasses.asdict(p) for p in plan.points],
        "skipped": [dataclasses.asdict(s) for s in plan.skipped],
        "estimate": estimate,
    }


def print_plan(plan: Plan, estimate: dict[str, Any] | None) -> None:
    spec = plan.spec
    print(f"campaign {spec.campaign}: {spec.path} (sha256 {spec.sha256[:12]})")
    if spec.description:
        print(f"  {spec.description.strip().splitlines()[0]}")
    for host in plan.hosts:
        print(f"\nhost {host} (profile {plan.profile_hash(host)[:12]})")
        for p in (p for p in plan.points if p.host == host):
            rep = f"warm-up {-p.repetition}" if p.warmup else f"rep {p.repetition}"
            params = " ".join(f"{k}={v}" for k, v in p.params.items()) or "-"
            pin = f" cpus={p.cpus}" if p.cpus else ""
            print(f"  {p.experiment:<16} {rep:<10} {params}{pin}: {shlex.join(p.argv)}")
    print("\ncounts")
    print(f"  {'host':<16} {'experiment':<20} {'points':>6} {'runs':>6} {'warm-ups':>8}")
    for host, by_exp in plan.counts().items():
        for exp, n in by_exp.items():
            print(f"  {host:<16} {exp:<20} {n['points']:>6} {n['runs']:>6} {n['warmups']:>8}")
    warm = sum(1 for p in plan.points if p.warmup)
    print(
        f"total: {len(plan.points)} runs ({len(plan.points) - warm} measured, {warm} warm-up) "
        f"on {len(plan.hosts)} host(s)"
    )
    for exp in spec.experiments:  # the stop rule decides at run time how far the sweep goes
        if exp.extra.get("adaptive") is not None:
            print(f"adaptive {exp.name}: {exp.extra['adaptive'].describe()} (at most the "
                  "points above run)")  # fmt: skip
    if plan.skipped:
        print("skipped")
        for s in plan.skipped:
            print(f"  {s.host:<16} {s.experiment:<20} {s.reason}")
    if estimate and estimate.get("source") == "spec":
        print(
            f"estimated time: at most {_duration(estimate['seconds'])} (from the spec: "
            f"--seconds x --reps per run + {RUN_OVERHEAD_S:g} s each + {BUILD_ALLOWANCE_S:g} s "
            f"per build; {estimate['unknown_runs']} runs without --seconds counted at their "
            f"timeout_s); the {len(plan.points) - estimate['unknown_runs']} timed runs alone: "
            f"{_duration(estimate['timed_seconds'])}"
        )
    elif estimate:
        print(
            f"estimated time: {_duration(estimate['seconds'])} "
            f"(from {estimate['past_runs']} past runs; {estimate['unknown_runs']} runs unknown)"
        )
    else:
        print("estimated time: unknown (no past runs in the store)")


#: per run, besides the command: two fingerprints, collector start/stop, fetch and store
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


def spec_estimate(plan: Plan) -> dict[str, Any]:
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
    return {"source": "spec", "seconds": max(per_host.values(), default=0.0),
            "timed_seconds": max(timed.values(), default=0.0), "per_host": per_host,
            "past_runs": 0, "unknown_runs": unknown}  # fmt: skip


def _duration(seconds: float) -> str:
    minutes, sec = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m {sec:02d}s" if hours else f"{minutes}m {sec:02d}s"


def estimate_seconds(plan: Plan, results: str | None = None) -> dict[str, Any] | None:
    """Median past duration per (experiment, host), else per experiment, summed over the plan.

    Reads results/<campaign>/store.sqlite through socketlab.store when it exists; None when
    there is no store or no past run has a duration. Hosts run in parallel, so the estimate is
    the longest host's sum.
    """
    from socketlab.store import Store, store_path

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
