"""`orchestrate cpuset`: which CPUs each job gets on a host's isolated cores (docs/cpuset.md).

Jobs are NAME=CPUS, given as separate words or comma-separated ("A=32,B=80"). By default a job
takes whole cores (all SMT threads); --threads NAME gives it first threads only (the siblings
stay for runtime host threads). The CPUs come from the isolation plan's workers (and their
siblings), never from housekeeping.

The host is this machine (the localhost inventory) unless --inventory/--limit names others, or
--topology gives a host_facts.py snapshot (JSON) or a recorded sysfs tree.

Exit status: 0 when every job was placed; 1 when a job was placed but its --hugepages are short
on a node it runs on; 2 for bad input or a job that does not fit.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from socketlab.commands._options import add_host_arguments
from socketlab.errors import HostError, PlanError, SocketlabError
from socketlab.facts import gather_all
from socketlab.inventory import load_inventory
from socketlab.placement.cpuset import (
    DECREASING,
    ORDERS,
    POLICIES,
    CpusetPlan,
    node_distances,
    plan_jobs,
)
from socketlab.placement.isolation import plan_isolation
from socketlab.topology import Topology, read_snapshot, topology_from_snapshot

#: ASCII digits only: \d would take "A=٤" (Arabic-Indic four) as 4.
_JOB = re.compile(r"^([A-Za-z0-9_.:-]+)=([0-9]+)$", re.ASCII)
PIN_HEAD = 8  #: pin-order entries shown in the table


@dataclass(frozen=True)
class Host:
    topology: Topology
    distances: dict[int, dict[int, int]] | None  #: node distance table, None when not recorded


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "cpuset",
        help="plan locality-aware CPU sets for jobs on the isolated cores",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("jobs", nargs="+", metavar="NAME=CPUS", help="jobs and their CPU counts")
    p.add_argument(
        "--policy",
        default="pack",
        metavar="|".join(POLICIES),
        help="pack: kubelet best fit (default); isolate: also keep jobs in separate domains",
    )
    p.add_argument(
        "--order",
        default=DECREASING,
        metavar="|".join(ORDERS),
        help="place the biggest job first (default), or in the order given",
    )
    for flag, metavar, what in (
        ("--distributed", "NAME", "spread this job evenly over NUMA nodes (KEP-2902)"),
        ("--threads", "NAME", "give this job first threads only, not whole cores"),
        ("--hugepages", "NAME=PAGES", "2 MiB pages the job needs on each NUMA node it runs on"),
    ):  # per-job options, each repeatable
        p.add_argument(
            flag, action="append", default=[], metavar=metavar, help=f"{what}; repeatable"
        )
    add_host_arguments(p)
    p.add_argument(
        "--topology",
        metavar="FILE|DIR",
        help="plan for a recorded host: a host_facts.py JSON snapshot or a sysfs tree",
    )
    p.set_defaults(func=run)


def parse_jobs(words: list[str], args: argparse.Namespace) -> list[dict[str, Any]]:
    """NAME=CPUS words plus the per-job options, as plan_jobs job mappings."""
    jobs: dict[str, dict[str, Any]] = {}
    for word in words:
        for item in word.split(","):
            m = _JOB.match(item.strip())
            if not m:
                raise PlanError(f"job {item.strip()!r}: expected NAME=CPUS, e.g. A=32")
            name = m.group(1)
            if name in jobs:
                raise PlanError(f"job {name!r}: given twice; expected each job once")
            jobs[name] = {"name": name, "cpus": int(m.group(2))}

    def known(name: str, option: str) -> dict[str, Any]:
        if name not in jobs:
            raise PlanError(f"{option} {name}: no such job; expected one of {', '.join(jobs)}")
        return jobs[name]

    for name in args.distributed:
        known(name, "--distributed")["distributed"] = True
    for name in args.threads:
        known(name, "--threads")["whole_cores"] = False
    for item in args.hugepages:
        m = _JOB.match(item.strip())
        if not m:
            raise PlanError(f"--hugepages {item}: expected NAME=PAGES, e.g. A=512")
        known(m.group(1), "--hugepages")["hugepages_per_node"] = int(m.group(2))
    return list(jobs.values())


def load_snapshot_file(path: str) -> dict:
    """A host_facts.py snapshot from a JSON file or a recorded sysfs tree (HostError if not)."""
    p = Path(path)
    if p.is_dir():
        return read_snapshot(p)
    if not p.is_file():
        raise HostError(
            f"{path}: --topology: no such file; expected a host_facts.py snapshot (JSON) or a "
            "recorded sysfs tree"
        )
    try:
        snapshot = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise HostError(f"{path}: --topology: not a JSON snapshot ({exc})") from None
    if not isinstance(snapshot, dict):
        raise HostError(
            f"{path}: --topology: expected a JSON object (a host_facts.py snapshot), got "
            f"{type(snapshot).__name__}"
        )
    return snapshot


def host_of_snapshot(snapshot: dict, where: str) -> Host:
    """The topology and node distance table of a snapshot; errors name ``where``."""
    try:
        topology = topology_from_snapshot(snapshot)
        return Host(topology, node_distances(snapshot, topology.source))
    except SocketlabError as exc:
        message = str(exc)
        raise HostError(message if where in message else f"{where}: {message}") from None


def load_topology_file(path: str) -> Topology:
    return host_of_snapshot(load_snapshot_file(path), path).topology


def topologies(args: argparse.Namespace) -> list[tuple[str, Host]]:
    if args.topology:
        if args.inventory or args.limit:
            raise PlanError("--topology: can't be combined with --inventory/--limit; pick one")
        host = host_of_snapshot(load_snapshot_file(args.topology), args.topology)
        return [(host.topology.source, host)]
    hosts = load_inventory(args.inventory, args.limit)
    gathered = gather_all(hosts, timeout=args.timeout)
    out = []
    for host in hosts:
        facts = gathered[host.name]
        if isinstance(facts, SocketlabError):
            raise facts
        out.append((host.name, host_of_snapshot(facts["snapshot"], host.name)))
    return out


def _pins(pins: list[int]) -> str:
    head = ",".join(str(c) for c in pins[:PIN_HEAD])
    return head + (f",... ({len(pins)})" if len(pins) > PIN_HEAD else "")


def _hugepages(hp: dict[str, Any] | None) -> str:
    if hp is None:
        return "-"
    verdict = {True: "ok", False: "SHORT", None: "unknown"}[hp["feasible"]]
    avail = ", ".join(f"n{n}: {v['available']}" for n, v in hp["nodes"].items())
    return f"{hp['per_node']}/node {verdict} ({avail})"


def _table(name: str, plan: dict[str, Any]):
    from rich.table import Table

    table = Table(
        title=f"{name}: policy {plan['policy']}, order {plan['order']}",
        caption=f"allocatable {plan['universe']}; left {plan['free'] or 'none'}",
        title_justify="left",
        caption_justify="left",
        expand=False,
    )
    for column in ("job", "cpus", "cpulist", "nodes", "shares nodes with", "pin order"):
        table.add_column(column, overflow="fold")
    show_hp = any(j["hugepages"] is not None for j in plan["jobs"])
    if show_hp:
        table.add_column("hugepages", overflow="fold")
    for j in plan["jobs"]:
        kind = ("" if j["whole_cores"] else " threads") + (" dist" if j["distributed"] else "")
        row = [
            j["name"] + kind,
            str(j["count"]),
            j["cpulist"],
            j["mems"],
            ", ".join(j["shares_nodes_with"]) or "-",
            _pins(j["pin_order"]),
        ]
        if show_hp:
            row.append(_hugepages(j["hugepages"]))
        table.add_row(*row)
    return table


def run(args: argparse.Namespace) -> int:
    if args.policy not in POLICIES:
        raise PlanError(f"--policy: expected one of {', '.join(POLICIES)}, got {args.policy!r}")
    if args.order not in ORDERS:
        raise PlanError(f"--order: expected one of {', '.join(ORDERS)}, got {args.order!r}")
    jobs = parse_jobs(args.jobs, args)
    report = []
    for name, host in topologies(args):
        topology = host.topology
        isolation = plan_isolation(topology, args.housekeeping, args.prefer_irq_cores)
        try:
            plan: CpusetPlan = plan_jobs(
                jobs, topology, isolation, args.policy, order=args.order, distances=host.distances
            )
        except PlanError as exc:
            if name == topology.source:
                raise
            raise PlanError(f"{name}: {exc}") from None
        report.append({"name": name, "isolation": isolation.facts(), "cpuset": plan.facts()})
    short = any(
        j["hugepages"] is not None and j["hugepages"]["feasible"] is False
        for entry in report
        for j in entry["cpuset"]["jobs"]
    )
    if args.json:
        json.dump({"hosts": report}, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    else:
        from rich.console import Console

        console = Console(width=max(120, Console().width), soft_wrap=False)
        for entry in report:
            console.print(_table(entry["name"], entry["cpuset"]))
    return 1 if short else 0
