#!/usr/bin/env python3
"""The host side of `orchestrate tailor` (docs/tailor.md): sample cgroups, apply CPU sets.

    python3 .../socketlab/daemons/tailor.py start   --state-dir DIR --workload NAME=CGROUP...
    ... run     (the same, in the foreground)
    ... stop    --state-dir DIR      # restores every cpuset, then exits
    ... restore --state-dir DIR      # after a SIGKILL: undo from the state file

`orchestrate tailor` runs this file with its own interpreter on the machine it tailors; the
decisions come from socketlab's pure planners (socketlab.tailor.controller,
socketlab.placement.cpuset), the pidfile, detaching and stopping from collectors/_collector.py
(socketlab.hostside).

Workloads are cgroups, given by their path below the hierarchy root: cgroup v2 when the
unified hierarchy has the cpuset controller (``cpuset.cpus``, usage from ``cpu.stat``), else
v1 (``cpuset/<path>/cpuset.cpus``, usage from ``cpuacct/<path>/cpuacct.usage``). Before the
first write every cgroup's original ``cpuset.cpus`` is recorded in ``DIR/tailor-state.json``
(written atomically); ``stop`` (SIGTERM) writes them back and removes the file; a daemon
killed with SIGKILL leaves it, and ``restore`` undoes it. Each period appends one JSON line to
``DIR/tailor.jsonl``: usage, demand, cores, sets and whether they were applied.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time

from socketlab.cpulist import parse_cpulist
from socketlab.errors import SocketlabError
from socketlab.hostside import _collector
from socketlab.placement.cpuset import node_distances
from socketlab.placement.isolation import plan_isolation
from socketlab.tailor.controller import EstimatorConfig, Tailor, demand_sample, universe_plan
from socketlab.topology import read_snapshot, topology_from_snapshot

NAME = "tailor"
STATE = "tailor-state.json"
STATE_FORMAT = "socketlab-tailor-state/1"
PIDFILE = "tailor.pid"
TIMELINE = "tailor.jsonl"
CGROUP_ROOT = "/sys/fs/cgroup"
SUBSAMPLES = 10  #: runnable-thread counts per period


class TailorError(SocketlabError):
    """A cgroup that is missing or unusable, a bad option, a state file that can't be used."""


def _read(path: str) -> str:
    with open(path) as fh:
        return fh.read().strip()


def _write(path: str, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)


# ---------------------------------------------------------------- cgroup backends
class CgroupV2:
    version = 2

    def __init__(self, root: str, path: str) -> None:
        self.dir = os.path.join(root, path.strip("/"))
        self.cpus_file = os.path.join(self.dir, "cpuset.cpus")

    def check(self, name: str) -> None:
        if not os.path.isdir(self.dir):
            raise TailorError(
                f"workload {name}: cgroup {self.dir} does not exist; expected an "
                "existing cgroup v2 directory"
            )
        if not os.path.exists(self.cpus_file):
            raise TailorError(
                f"workload {name}: {self.cpus_file} is missing; expected the "
                "cpuset controller enabled in the parent's cgroup.subtree_control"
            )

    def usage_s(self) -> float:
        for line in _read(os.path.join(self.dir, "cpu.stat")).splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
        raise TailorError(f"{self.dir}/cpu.stat: no usage_usec line")

    def threads(self) -> list[int]:
        return [int(t) for t in _read(os.path.join(self.dir, "cgroup.threads")).split()]


class CgroupV1:
    version = 1

    def __init__(self, root: str, path: str) -> None:
        self.dir = os.path.join(root, "cpuset", path.strip("/"))
        self.cpus_file = os.path.join(self.dir, "cpuset.cpus")
        acct = [os.path.join(root, h, path.strip("/")) for h in ("cpuacct", "cpu,cpuacct")]
        self.acct = next((d for d in acct if os.path.isdir(d)), acct[0])

    def check(self, name: str) -> None:
        for d, what in ((self.dir, "cpuset"), (self.acct, "cpuacct")):
            if not os.path.isdir(d):
                raise TailorError(
                    f"workload {name}: cgroup {d} does not exist; expected the "
                    f"workload's {what} cgroup (cgroup v1)"
                )

    def usage_s(self) -> float:
        return int(_read(os.path.join(self.acct, "cpuacct.usage"))) / 1e9

    def threads(self) -> list[int]:
        return [int(t) for t in _read(os.path.join(self.dir, "tasks")).split()]


def backend_for(root: str) -> type:
    """The cgroup version that can hold cpusets on this host (TailorError if neither)."""
    controllers = os.path.join(root, "cgroup.controllers")
    if os.path.exists(controllers) and "cpuset" in _read(controllers).split():
        return CgroupV2
    if os.path.exists(os.path.join(root, "cpuset", "cpuset.cpus")):
        return CgroupV1
    raise TailorError(
        f"{root}: not available on this host: no cpuset controller in cgroup v2 or v1"
    )


def runnable(tids: list[int]) -> int:
    """Threads in state R (running or waiting for a CPU) among ``tids``."""
    count = 0
    for tid in tids:
        try:
            stat = _read(f"/proc/{tid}/stat")
        except OSError:
            continue  # exited since the list was read
        if stat[stat.rfind(")") + 2 :].startswith("R"):
            count += 1
    return count


def sched_ext_state() -> str | None:
    """The sched_ext state ("enabled", "disabled") or None when the kernel has no sched_ext."""
    try:
        return _read("/sys/kernel/sched_ext/state")
    except OSError:
        return None


# ---------------------------------------------------------------- the state file
def write_state(state_dir: str, state: dict) -> None:
    path = os.path.join(state_dir, STATE)
    with open(f"{path}.tmp", "w") as fh:
        json.dump(state, fh, indent=1, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(f"{path}.tmp", path)


def read_state(state_dir: str) -> dict | None:
    path = os.path.join(state_dir, STATE)
    try:
        with open(path) as fh:
            state = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise TailorError(f"{path}: not a tailor state file ({exc})") from None
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        raise TailorError(f"{path}: format: expected {STATE_FORMAT!r}")
    return state


def restore_from(state: dict) -> dict:
    """Write every recorded original cpuset back; returns per workload what was done."""
    done = {}
    for name, rec in sorted(state["workloads"].items()):
        path = rec["cpus_file"]
        try:
            _write(path, rec["original"] or "\n")
            done[name] = {"cpus_file": path, "restored": rec["original"], "now": _read(path)}
        except OSError as exc:
            done[name] = {"cpus_file": path, "error": f"{exc.strerror or exc}"}
    return done


def restore(state_dir: str) -> dict:
    """``restore``: undo what a dead daemon left (refused while it still runs)."""
    state = read_state(state_dir)
    if state is None:
        return {"restored": {}, "note": f"nothing to restore: no {STATE} in {state_dir}"}
    pid = state.get("pid")
    if isinstance(pid, int) and pid != os.getpid() and _collector.is_ours(pid, "tailor.py"):
        raise TailorError(
            f"{state_dir}: the controller (PID {pid}) is still running; expected "
            "`stop`, or --restore once it is gone"
        )
    done = restore_from(state)
    if not any("error" in d for d in done.values()):
        os.remove(os.path.join(state_dir, STATE))
    return {"restored": done}


# ---------------------------------------------------------------- the controller loop
def parse_workloads(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path or not name.replace("-", "").replace("_", "").isalnum():
            raise TailorError(
                f"--workload {item!r}: expected NAME=CGROUP, e.g. web=system.slice/web"
            )
        if name in out:
            raise TailorError(f"--workload {name}: given twice; expected each workload once")
        out[name] = path
    if not out:
        raise TailorError("--workload: expected at least one NAME=CGROUP")
    return out


def make_controller(args: argparse.Namespace):
    """The topology, the managed CPUs and the controller (socketlab.tailor.controller)."""

    snap = read_snapshot("/")
    topology = topology_from_snapshot(snap)
    if args.cpus:
        isolation = universe_plan(topology, parse_cpulist(args.cpus, "--cpus"))
    else:
        isolation = plan_isolation(topology, args.housekeeping)
    config = EstimatorConfig(
        window=args.window,
        percentile=args.percentile,
        headroom=args.headroom,
        tolerance=args.tolerance,
        idle_below=args.idle_below,
        shrink_after=args.shrink_after,
        spill=args.spill,
    )
    names = list(parse_workloads(args.workload))
    return Tailor(topology, isolation, names, config, args.policy, node_distances(snap))


def prepare(args: argparse.Namespace):
    """Check everything a start needs before anything is changed (errors: one line)."""
    if args.mode == "soft":
        state = sched_ext_state()
        if state is None:
            raise TailorError(
                "--mode soft: not available on this host: no sched_ext "
                "(/sys/kernel/sched_ext is missing)"
            )
        raise TailorError(
            f"--mode soft: sched_ext is {state} here, but no soft-affinity "
            "scheduler ships with socketlab yet; expected --mode hard"
        )
    if not (args.period > 0):
        raise TailorError(f"--period: expected seconds > 0, got {args.period!r}")
    workloads = parse_workloads(args.workload)
    kind = backend_for(args.cgroup_root)
    groups = {name: kind(args.cgroup_root, path) for name, path in workloads.items()}
    for name, group in groups.items():
        group.check(name)
    tailor = make_controller(args)
    return tailor, groups


def loop(args: argparse.Namespace, tailor, groups: dict, report) -> None:
    """Record the originals, then sample / decide / apply every period until told to stop."""

    state_dir = args.state_dir
    state = {
        "format": STATE_FORMAT,
        "pid": os.getpid(),
        "started": time.time(),
        "cgroup_version": next(iter(groups.values())).version,
        "managed": list(tailor.universe),
        "housekeeping": list(tailor.housekeeping),
        "workloads": {
            name: {"cpus_file": g.cpus_file, "original": _read(g.cpus_file)}
            for name, g in groups.items()
        },
    }
    write_state(state_dir, state)  # before the first change: a SIGKILL from here on is undoable
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append("SIGTERM"))
    signal.signal(signal.SIGINT, lambda *_: stopping.append("SIGINT"))
    timeline = open(os.path.join(state_dir, TIMELINE), "a", buffering=1)  # noqa: SIM115

    def apply(assignment) -> dict:
        errors = {}
        # cpusets are not exclusive (neither v1 without cpu_exclusive nor v2 without a
        # partition), so the kernel accepts the moment between two writes where an old and a
        # new set overlap; it lasts one write.
        for name in sorted(groups):
            try:
                _write(groups[name].cpus_file, ",".join(map(str, assignment.sets[name])))
            except OSError as exc:
                errors[name] = exc.strerror or str(exc)
        return errors

    def record(**fields) -> None:
        timeline.write(json.dumps({"ts": round(time.time(), 3), **fields}, sort_keys=True) + "\n")

    first = tailor.start()
    errors = apply(first)
    record(sample=0, event="start", **first.facts(), errors=errors)
    report(str(os.getpid()))
    last = {n: g.usage_s() for n, g in groups.items()}
    last_t = time.monotonic()
    deadline = last_t + args.max_seconds if args.max_seconds else None
    sample = 0
    try:
        while not stopping and os.path.isdir(state_dir):
            # The runnable threads are counted SUBSAMPLES times per period; their mean is the
            # demand that usage can't show (socketlab.tailor.controller.demand_sample).
            ready_sum = dict.fromkeys(groups, 0)
            for _ in range(SUBSAMPLES):
                time.sleep(args.period / SUBSAMPLES)
                for name, g in groups.items():
                    with contextlib.suppress(OSError, ValueError):
                        ready_sum[name] += runnable(g.threads())
            if deadline and time.monotonic() > deadline:
                stopping.append("max-seconds")
                break
            now_t = time.monotonic()
            used, demand = {}, {}
            for name, g in groups.items():
                try:
                    u = g.usage_s()
                except (OSError, ValueError):
                    u = last[name]
                used[name] = round(max(0.0, u - last[name]) / (now_t - last_t), 3)
                last[name] = u
                demand[name] = round(demand_sample(used[name], ready_sum[name] / SUBSAMPLES), 3)
            last_t = now_t
            sample += 1
            assignment = tailor.step(demand)
            errors = apply(assignment) if assignment.changed else {}
            record(sample=sample, used=used, demand=demand, **assignment.facts(), errors=errors)
    finally:
        done = restore_from(state)
        if not any("error" in d for d in done.values()):
            # A removed state folder is how an orphan is told to stop: nothing left to remove.
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(state_dir, STATE))
        record(sample=sample, event="stop", reason=(stopping or ["error"])[0], restored=done)
        timeline.close()


def add_options(p: argparse.ArgumentParser, state_dir: bool = True) -> None:
    """The start/run options (also `orchestrate tailor start`'s, which passes them on)."""
    if state_dir:
        p.add_argument("--state-dir", required=True, help="pidfile, state file and timeline")
    p.add_argument(
        "--workload",
        action="append",
        default=[],
        metavar="NAME=CGROUP",
        help="a workload: its name and cgroup path below the hierarchy root",
    )
    p.add_argument("--cgroup-root", default=CGROUP_ROOT)
    p.add_argument("--cpus", help="the CPUs to hand out (default: the isolation plan's)")
    p.add_argument("--housekeeping", type=int, default=2, metavar="H")
    p.add_argument("--policy", default="isolate", choices=("pack", "isolate"))
    p.add_argument("--mode", default="hard", choices=("hard", "soft"))
    p.add_argument("--period", type=float, default=1.0, help="seconds between samples")
    p.add_argument("--window", type=int, default=6)
    p.add_argument("--percentile", type=float, default=90.0)
    p.add_argument("--headroom", type=float, default=0.10)
    p.add_argument("--tolerance", type=float, default=0.15)
    p.add_argument("--idle-below", type=float, default=0.10)
    p.add_argument("--shrink-after", type=int, default=3)
    p.add_argument("--spill", type=int, default=0)
    p.add_argument("--max-seconds", type=float, default=0, help="0 = until stopped")


class _OneLine(argparse.ArgumentParser):
    """Usage errors on one line, as the rest of socketlab prints them."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"tailor.py: error: {message}\n")


def main(argv: list[str] | None = None) -> int:
    parser = _OneLine(prog="tailor.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True, parser_class=_OneLine)
    for cmd in ("start", "run"):
        add_options(sub.add_parser(cmd))
    for cmd in ("stop", "restore"):
        sub.add_parser(cmd).add_argument("--state-dir", required=True)
    args = parser.parse_args(argv)
    try:
        return _main(args)
    except SocketlabError as exc:
        print(f"tailor: error: {exc}", file=sys.stderr)
        return 2


def _main(args: argparse.Namespace) -> int:
    state_dir = args.state_dir
    pidfile = os.path.join(state_dir, PIDFILE)
    if args.cmd == "restore":
        print(json.dumps(restore(state_dir), sort_keys=True))
        return 0
    if args.cmd == "stop":
        pid = _collector.read_pid(pidfile)
        if pid is None or not _collector.is_ours(pid, "tailor.py"):
            print(json.dumps({"stopped": None, "note": "no controller running"}))
            return 0
        ok = _collector.stop_pid(pid, "tailor.py", timeout=30)
        with_state = read_state(state_dir)
        print(json.dumps({"stopped": pid, "exited": ok, "state_left": with_state is not None}))
        return 0 if ok and with_state is None else 1
    os.makedirs(state_dir, exist_ok=True)
    if read_state(state_dir) is not None:
        raise TailorError(
            f"{state_dir}/{STATE}: a controller's changes are still recorded; "
            "expected `stop` or `restore` first"
        )
    pid = _collector.read_pid(pidfile)
    if pid is not None and _collector.is_ours(pid, "tailor.py"):
        raise TailorError(f"{state_dir}: a controller already runs (PID {pid})")
    tailor, groups = prepare(args)
    if args.cmd == "run":
        _collector.write_pidfile(pidfile)
        loop(args, tailor, groups, lambda text: None)
        return 0
    text, fd = _collector.detach()
    if fd is None:  # the caller: the daemon's PID, or "" when it died before it was ready
        if not text.isdigit():
            print(
                f"tailor: error: the controller did not start: {text or 'it exited'}",
                file=sys.stderr,
            )
            return 1
        print(json.dumps({"started": int(text), "state_dir": state_dir}))
        return 0
    try:
        _collector.write_pidfile(pidfile)
        loop(args, tailor, groups, lambda text: _collector.ready(fd, text))
    except BaseException as exc:  # the caller waits on the pipe: tell it why
        with contextlib.suppress(OSError):  # already told it that we started
            _collector.ready(fd, f"{type(exc).__name__}: {exc}")
        os._exit(1)
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
