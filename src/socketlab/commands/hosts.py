"""`orchestrate hosts`: each inventory host's topology and the isolation plan the planner makes.

Exit status: 0 when every host answered; 1 when a host could not be reached or its facts not
read (it is reported as a line and the other hosts are still shown); 2 for bad input (no such
inventory, a --limit that matches nothing). A host whose plan is impossible, e.g. a 2-core VM
with the default 2 housekeeping cores per node, shows its topology and the planner's one-line
reason; that is not a failure unless --strict is given (then exit 1), so `make run` works on
small machines.

"isolated now" is what playbooks/isolate.yml left: verify.yml's record for the host (restore.yml
removes it, and verify.yml keeps none without the state file) and the workqueue mask the plan
sets, read now; "boot isolcpus" is the kernel's own isolcpus= list, a boot-time setting.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from socketlab.commands._options import add_host_arguments
from socketlab.report.hosts import host_entries


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "hosts",
        help="show each host's topology and isolation plan",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_host_arguments(p)
    p.add_argument("--strict", action="store_true", help="exit 1 if any host has no valid plan")
    p.set_defaults(func=run)


def _yes(value: bool) -> str:
    return "yes" if value else "no"


def _table(entry: dict[str, Any]):
    from rich.table import Table

    title = f"{entry['name']}  ({entry['connection']} {entry['address']})"
    table = Table(title=title, show_header=False, title_justify="left", expand=False)
    table.add_column("fact", style="bold")
    table.add_column("value", overflow="fold")
    t = entry["topology"]
    caches = ", ".join(
        f"{name} {c['size']}" + (f" x{c['instances']}" if c["instances"] > 1 else "")
        for name, c in t["caches"].items()
    )
    cpufreq = t["cpufreq"]
    governors = ", ".join(f"{g} ({cpus})" for g, cpus in cpufreq["governors"].items())
    rows = [
        (
            "cpu",
            f"{t['cpu_model']} (family {t['family']} model {t['model']}, "
            f"microcode {t['microcode']})",
        ),
        ("isa", f"AMX {_yes(t['amx'])}, AVX512-BF16 {_yes(t['avx512_bf16'])}"),
        (
            "layout",
            f"{t['sockets']} socket(s), {t['nodes']} NUMA node(s), {t['llcs']} LLC(s), "
            f"{t['cores']} cores, {t['threads']} threads, SMT {t['threads_per_core']}",
        ),
        *((f"node {n}", cpus) for n, cpus in t["node_cpus"].items()),
        ("caches", caches),
        ("kernel", f"{t['kernel']}, PID 1: {t['service_manager']}"),
        (
            "knobs",
            f"THP {t['thp']}, numa_balancing {t['numa_balancing']}, "
            f"irqbalance {'running' if t['irqbalance']['running'] else 'not running'}",
        ),
        ("cpufreq", f"{cpufreq['driver']}: {governors}" if cpufreq["present"] else "not present"),
        ("irqs", f"{len(t['irqs'])} device IRQs" if t["irqs_readable"] else "unreadable"),
        ("isolated now", entry["isolated_now"]["text"]),
        ("boot isolcpus", t["cpu_isolated"] or "none"),
    ]
    plan = entry["isolation"]
    if plan:
        rows += [
            (
                "housekeeping",
                f"{plan['housekeeping_list']}  "
                f"({plan['housekeeping_per_node']} cores/node, "
                f"{', '.join(sorted(set(plan['chosen_by'].values())))})",
            ),
            ("workers", f"{plan['workers_list']}  ({len(plan['workers'])})"),
            ("siblings", plan["siblings_list"] or "none (no SMT)"),
            ("workqueue mask", plan["workqueue_mask"]),
        ]
    else:
        rows.append(("plan", f"[red]not possible:[/red] {entry['plan_error']}"))
    for name, value in rows:
        table.add_row(name, str(value))
    return table


def run(args: argparse.Namespace) -> int:
    report = host_entries(
        args.inventory,
        args.limit,
        timeout=args.timeout,
        housekeeping=args.housekeeping,
        prefer_irq=args.prefer_irq_cores,
    )
    if args.json:
        json.dump({"hosts": report}, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    else:
        from rich.console import Console

        console = Console(width=max(100, Console().width), soft_wrap=False)
        for entry in report:
            if entry["error"]:
                console.print(
                    f"[bold]{entry['name']}[/bold]: [red]unreachable:[/red] {entry['error']}"
                )
            else:
                console.print(_table(entry))
    unreachable = any(e["error"] for e in report)
    unplanned = any(e["plan_error"] for e in report)
    return 1 if unreachable or (args.strict and unplanned) else 0
