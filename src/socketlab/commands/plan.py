"""`orchestrate plan SPEC`: every point that would run, per host, with counts and skips."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
from typing import Any

from socketlab.commands._options import add_results_argument, add_spec_arguments
from socketlab.spec.estimate import BUILD_ALLOWANCE_S, RUN_OVERHEAD_S
from socketlab.spec.expand import Plan


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "plan",
        help="show every point a spec would run, per host, and what is skipped",
        description="Load and check SPEC, gather facts of its hosts (or take them from "
        "--assume-host snapshots, so a controller without hosts can size a campaign), and print "
        "every run point in run order, counts per host and experiment, skipped experiments with "
        "the reason, and an estimated time: from past runs in the store (not with --assume-host), "
        "else from the spec's own durations (--seconds x --reps of each command, plus a build "
        "allowance). Runs nothing.",
    )
    add_spec_arguments(
        parser,
        repetitions_help="repetitions per point instead of the spec's",
        profile_help="apply the spec's profiles.NAME overrides, as run does",
    )
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    parser.add_argument(
        "--assume-host",
        action="append",
        metavar="[NAME=]FACTS",
        help="plan for a host described by FACTS (collectors/host_facts.py output, e.g. "
        "tests/fixtures/topology/c8i-metal-48xl.json) instead of the inventory; NAME "
        "defaults to the file's stem; repeatable",
    )
    add_results_argument(
        parser,
        "results folder whose past runs give the estimate "
        "(default: results/, or $SOCKETLAB_RESULTS)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from socketlab.session import preview
    from socketlab.shipped import spec_path

    plan, estimate = preview(
        spec_path(args.spec),
        profile=args.profile,
        pattern=args.hosts,
        inventory=args.inventory,
        repetitions=args.repetitions,
        assume=getattr(args, "assume_host", None),
        results=getattr(args, "results", None),
    )
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
            print(
                f"adaptive {exp.name}: {exp.extra['adaptive'].describe()} (at most the "
                "points above run)"
            )
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


def _duration(seconds: float) -> str:
    minutes, sec = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m {sec:02d}s" if hours else f"{minutes}m {sec:02d}s"
