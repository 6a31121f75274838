"""`orchestrate tailor`: demand-sized, compact, disjoint CPU sets for cgroups (docs/tailor.md).

    orchestrate tailor start --workload NAME=CGROUP... [--cpus LIST | --housekeeping H] [...]
    orchestrate tailor stop                  # the controller restores every cpuset and exits
    orchestrate tailor --restore             # after a SIGKILL: undo from the state file
    orchestrate tailor timeline              # what it sampled and applied, one row per period
    orchestrate tailor simulate TRACE --topology SNAPSHOT.json [...]

start/stop/restore run the host side, socketlab/daemons/tailor.py, on this machine with this
interpreter; its options are the daemon's own (``add_options``). The state folder
(--state-dir, default /run/socketlab/tailor) holds the pidfile, the state file with every
cgroup's original cpuset, and the timeline.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from socketlab.daemons import tailor as daemon
from socketlab.errors import HostError, SocketlabError

STATE_DIR = "/run/socketlab/tailor"
#: the daemon runs as a script of its own (a pidfile, a detached process) named tailor.py
SCRIPT = Path(daemon.__file__)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "tailor",
        help="run the Affinity-Tailor-style CPU-set controller, or simulate it",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--restore", action="store_true", help="undo a killed controller's changes")
    p.add_argument("--state-dir", default=STATE_DIR, help=f"default {STATE_DIR}")
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    start = sub.add_parser("start", help="start the controller (a daemon with a pidfile)")
    # One list of options: the host side's own (the daemon's add_options).
    daemon.add_options(start, state_dir=False)
    start.set_defaults(start_parser=start)
    sub.add_parser("stop", help="stop it; it restores every cpuset first")
    sub.add_parser("restore", help="the same as --restore")
    timeline = sub.add_parser("timeline", help="print the recorded timeline")
    timeline.add_argument("--json", action="store_true")
    register_simulate(sub)
    p.set_defaults(func=run)


def start_argv(args: argparse.Namespace) -> list[str]:
    """The start options given, as the daemon's arguments."""
    out: list[str] = []
    own = argparse.ArgumentParser(add_help=False)  # the host side's options, not -v/-q/--log-file
    daemon.add_options(own, state_dir=False)
    for action in own._actions:
        if not action.option_strings:
            continue
        value = getattr(args, action.dest, action.default)
        if value == action.default:
            continue
        flag = action.option_strings[-1]
        for v in value if isinstance(value, list) else [value]:
            out += [flag, str(v)]
    return out


def host_side(*argv: str) -> subprocess.CompletedProcess:
    """The daemon's script with this interpreter; its one-line errors become ours."""
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, timeout=120
    )
    if proc.returncode == 2:
        lines = proc.stderr.strip().splitlines() or ["the host side failed"]
        raise HostError(
            lines[-1].removeprefix("tailor: error: ").removeprefix("tailor.py: error: ")
        )
    return proc


def read_timeline(state_dir: str) -> list[dict[str, Any]]:
    path = Path(state_dir) / "tailor.jsonl"
    if not path.is_file():
        raise HostError(f"{path}: no timeline; expected `orchestrate tailor start` to have run")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def print_timeline(records: list[dict[str, Any]]) -> None:
    names = sorted({n for r in records for n in (r.get("sets") or {})})
    head = ["sample", "time"] + [f"{n} used/demand" for n in names] + [f"{n} set" for n in names]
    print("  ".join(head))
    t0 = records[0]["ts"] if records else 0
    for r in records:
        if r.get("event") == "stop":
            print(
                f"{r['sample']:>6}  {r['ts'] - t0:5.1f}s  stop ({r['reason']}): restored "
                + ", ".join(
                    f"{n}={v.get('now', v.get('error'))}" for n, v in sorted(r["restored"].items())
                )
            )
            continue
        used, demand = r.get("used") or {}, r.get("demand") or {}
        cells = [f"{r['sample']:>6}", f"{r['ts'] - t0:5.1f}s"]
        cells += [f"{used.get(n, '-')}/{demand.get(n, '-')}" for n in names]
        cells += [
            r["sets"][n]
            + (" (parked)" if n in r.get("parked", []) else "")
            + (" *" if r.get("changed") else "")
            for n in names
        ]
        print("  ".join(cells))


def run(args: argparse.Namespace) -> int:
    state_dir = args.state_dir
    action = "restore" if args.restore else args.action
    if args.restore and args.action not in (None, "restore"):
        raise SocketlabError(f"--restore: can't be combined with {args.action}; pick one")
    if action is None:
        raise SocketlabError("tailor: expected an action: start, stop, restore, timeline, simulate")
    if action == "simulate":
        return simulate(args)
    if action == "timeline":
        records = read_timeline(state_dir)
        if args.json:
            json.dump(records, sys.stdout, indent=1)
            sys.stdout.write("\n")
        else:
            print_timeline(records)
        return 0
    if action == "start":
        proc = host_side("start", "--state-dir", state_dir, *start_argv(args))
    else:
        proc = host_side(action, "--state-dir", state_dir)
    sys.stdout.write(proc.stdout)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
    return proc.returncode


# -- simulate ------------------------------------------------------------------------------------


def register_simulate(sub: argparse._SubParsersAction) -> None:
    from socketlab.tailor.simulator import MIXES, POLICIES

    p = sub.add_parser("simulate", help="replay a demand trace under cfs, static and tailor")
    p.add_argument("trace", nargs="?", help="CSV (t,workload,cpus) or JSON lines")
    p.add_argument("--generate", metavar="|".join(MIXES), help="a synthetic mix instead")
    p.add_argument("--minutes", type=float, default=10.0, help="generated trace length")
    p.add_argument("--period", type=float, default=1.0, help="generated trace step (s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--peak", type=float, default=0.4, help="generated: each peak, x CPUs")
    p.add_argument("--write-trace", metavar="FILE", help="also write the trace as CSV")
    p.add_argument("--topology", required=True, metavar="SNAPSHOT", help="host_facts.py JSON")
    p.add_argument("--housekeeping", type=int, default=2, metavar="H")
    p.add_argument("--policy", action="append", choices=POLICIES, help="default: all three")
    p.add_argument("--window", type=int, default=6)
    p.add_argument("--shrink-after", type=int, default=3)
    p.add_argument("--headroom", type=float, default=0.10)
    p.add_argument("--spill", type=int, default=0)
    p.add_argument("--plot", metavar="DIR", help="write a PNG per policy into DIR")
    p.add_argument("--json", action="store_true")


def _snapshot_topology(path: str):
    from socketlab.commands.cpuset import host_of_snapshot, load_snapshot_file

    host = host_of_snapshot(load_snapshot_file(path), path)
    missing = [c.id for c in host.topology.cpus if c.llc is None]
    if missing:
        raise HostError(
            f"{path}: --topology: no LLC information for CPU {missing[0]} (cpus.{missing[0]}"
            ".cache); expected a snapshot with cache/index*/ level, id and shared_cpu_list"
        )
    return host


def simulate(args: argparse.Namespace) -> int:
    from socketlab.placement.isolation import plan_isolation
    from socketlab.tailor.controller import EstimatorConfig
    from socketlab.tailor.simulator import POLICIES, generate_mix, load_trace, trace_csv
    from socketlab.tailor.simulator import simulate as run_policy

    if bool(args.trace) == bool(args.generate):
        raise SocketlabError("simulate: expected a TRACE file or --generate MIX, one of them")
    host = _snapshot_topology(args.topology)
    topology = host.topology
    isolation = plan_isolation(topology, args.housekeeping)
    capacity = len(isolation.workers) + len(isolation.siblings)
    if args.generate:
        trace = generate_mix(
            args.generate,
            capacity=capacity,
            minutes=args.minutes,
            period=args.period,
            seed=args.seed,
            peak=args.peak,
        )
    else:
        trace = load_trace(args.trace)
    if args.write_trace:
        Path(args.write_trace).write_text(trace_csv(trace))
    config = EstimatorConfig(
        window=args.window, shrink_after=args.shrink_after, headroom=args.headroom, spill=args.spill
    )
    results = [
        run_policy(trace, topology, isolation, policy, config, host.distances)
        for policy in (args.policy or POLICIES)
    ]
    if args.plot:
        out = Path(args.plot)
        out.mkdir(parents=True, exist_ok=True)
        for r in results:
            plot(trace, r, out / f"{topology.source}-{r.policy}.png")
    if args.json:
        json.dump(
            {
                "topology": topology.source,
                "trace": trace.source,
                "capacity": capacity,
                "minutes": round(trace.minutes, 2),
                "workloads": list(trace.workloads),
                "policies": {r.policy: r.summary for r in results},
            },
            sys.stdout,
            indent=1,
            sort_keys=True,
        )
        sys.stdout.write("\n")
        return 0
    print(
        f"{topology.source}: {capacity} managed CPUs in {results[0].summary['llcs']} LLCs; "
        f"trace {trace.source}, {len(trace.workloads)} workloads, {trace.minutes:.1f} min"
    )
    head = (
        "policy",
        "LLCs/workload",
        "nodes/workload",
        "LLC shared",
        "stranded",
        "unserved",
        "changes/min",
    )
    print("  ".join(f"{h:>14}" for h in head))
    for r in results:
        m = r.summary
        row = (
            r.policy,
            f"{m['llcs_per_workload']:.2f}",
            f"{m['nodes_per_workload']:.2f}",
            f"{100 * m['llc_shared']:.1f}%",
            f"{100 * m['stranded']:.2f}%",
            f"{100 * m['unserved']:.2f}%",
            f"{m['changes_per_minute']:.1f}",
        )
        print("  ".join(f"{c:>14}" for c in row))
    return 0


def plot(trace, result, path: Path) -> None:
    """Demand and CPUs held per workload over time, and the LLCs each spans."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [i * trace.period / 60 for i in range(len(trace.demand))]
    # The locality domain that varies: LLCs, or NUMA nodes where the L3 is socket-wide.
    level, of = (
        ("LLCs", result.llc_of)
        if len(set(result.llc_of.values())) > 1
        else ("NUMA nodes", result.node_of)
    )
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True)
    for n in trace.workloads:
        (line,) = top.plot(t, [d[n] for d in trace.demand], lw=0.8, alpha=0.6)
        held = [len(tick.own.get(n, ())) for tick in result.ticks]
        top.step(t, held, where="post", lw=1.4, color=line.get_color(), label=n)
        spans = [len({of[c] for c in tick.own.get(n, ())}) for tick in result.ticks]
        bottom.step(t, spans, where="post", color=line.get_color(), lw=1.2)
    top.set_ylabel("CPUs: demand (thin), held (thick)")
    bottom.set_ylabel(f"{level} spanned")
    bottom.set_xlabel("minutes")
    m = result.summary
    top.set_title(
        f"{result.topology}, {result.policy}: {m['llcs_per_workload']:.2f} LLCs per "
        f"workload, stranded {100 * m['stranded']:.2f}%, unserved "
        f"{100 * m['unserved']:.2f}%",
        fontsize=10,
    )
    top.legend(fontsize=8, ncol=len(trace.workloads), loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
