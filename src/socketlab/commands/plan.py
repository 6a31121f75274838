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
from socketlab.errors import HostError, SocketlabError
from socketlab.spec.expand import Plan, Skip, expand_points
from socketlab.spec.hosts import gather_host_facts, select_hosts
from socketlab.spec.load import load_spec


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "plan",
        help="show every point a spec would run, per host, and what is skipped",
        description="Load and check SPEC, gather facts of its hosts, and print every run "
        "point in run order, counts per host and experiment, skipped experiments with the "
        "reason, and an estimated time when past runs are in the store. Runs nothing.",
    )
    add_spec_arguments(
        parser,
        repetitions_help="repetitions per point instead of the spec's",
        profile_help="apply the spec's profiles.NAME overrides, as run does",
    )
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    add_results_argument(parser, "results folder whose past runs give the estimate "
                         "(default: results/, or $SOCKETLAB_RESULTS)")  # fmt: skip
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    spec = load_spec(args.spec, profile=args.profile)
    hosts = select_hosts(spec, args.hosts, args.inventory)
    errors: dict[str, SocketlabError] = {}
    facts = gather_host_facts(spec, hosts, errors)
    if not facts:
        first = next(iter(errors.values()))
        raise HostError(f"no host could be reached ({len(errors)} tried); first: {first}")
    plan = expand_points(spec, facts, repetitions=args.repetitions)
    # Unreachable hosts are part of the answer: every experiment there is skipped, with why.
    plan.skipped.extend(
        Skip(name, exp.name, f"host unreachable: {exc}")
        for name, exc in errors.items()
        for exp in spec.experiments
    )
    estimate = estimate_seconds(plan, getattr(args, "results", None))
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
    if plan.skipped:
        print("skipped")
        for s in plan.skipped:
            print(f"  {s.host:<16} {s.experiment:<20} {s.reason}")
    if estimate:
        print(
            f"estimated time: {_duration(estimate['seconds'])} "
            f"(from {estimate['past_runs']} past runs; {estimate['unknown_runs']} runs unknown)"
        )
    else:
        print("estimated time: unknown (no past runs in the store)")


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
