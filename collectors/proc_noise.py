#!/usr/bin/env python3
"""Per-CPU noise from procfs: device IRQs/s, local-timer IRQs/s, other IRQs/s, context switches/s.

Stdlib only; runs on the target host. Two uses:

* one-shot, for ``playbooks/verify.yml``::

    proc_noise.py sample --seconds 10 --groups housekeeping=0,workers=1,siblings=

  prints one JSON object: per-CPU rates, per-group means and maxima, and ``table`` (the same
  figures as text lines).

* as an orchestrator collector (ARCHITECTURE.md contract)::

    proc_noise.py start --out DIR [--cpus LIST] [--interval 1]
    proc_noise.py stop --out DIR

  ``start`` leaves a daemon that appends one JSON line per CPU per interval to
  ``DIR/proc_noise.jsonl`` and keeps its PID in ``DIR/proc_noise.pid``; ``stop`` ends that PID
  (and only that PID) after writing a last sample.

Sources, all readable without a PMU: ``/proc/interrupts`` (numbered rows are device IRQs, the
LOC row is the local APIC timer, the other named rows are IPIs, TLB shootdowns and so on) and,
for context switches, the per-thread ``voluntary/nonvoluntary_ctxt_switches`` counters in
``/proc/<pid>/task/<tid>/status`` attributed to the CPU each thread last ran on
(``/proc/<pid>/task/<tid>/stat`` field 39). That is exact for pinned threads and an
approximation for threads that migrate; threads that exit inside the window are not counted.
Many kernels lack ``/proc/schedstat`` (CONFIG_SCHEDSTATS), so it is not used.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time

NAME = "proc_noise"
METRICS = ("device_irqs_per_s", "local_timer_irqs_per_s", "other_irqs_per_s", "ctx_switches_per_s")
# Rows of /proc/interrupts that are counters of errors, not interrupts, and have one column.
_SINGLE_COLUMN_ROWS = {"ERR", "MIS"}


# ---------------------------------------------------------------- cpu lists
def parse_cpulist(text: str) -> list[int]:
    """'0-2,5' -> [0, 1, 2, 5]. Stdlib copy of socketlab.cpulist (collectors can't import it)."""
    cpus: set[int] = set()
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            if int(hi) < int(lo):
                raise ValueError(f"bad CPU range {part!r}")
            cpus.update(range(int(lo), int(hi) + 1))
        else:
            cpus.add(int(part))
    return sorted(cpus)


def format_cpulist(cpus) -> str:
    out, run = [], []
    for cpu in sorted(set(cpus)):
        if run and cpu == run[-1] + 1:
            run.append(cpu)
            continue
        if run:
            out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
        run = [cpu]
    if run:
        out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ",".join(out)


# ---------------------------------------------------------------- reading procfs
def read_interrupts(proc: str = "/proc") -> dict[int, dict[str, int]]:
    """Per CPU: cumulative device, local-timer and other interrupt counts."""
    with open(os.path.join(proc, "interrupts")) as f:
        lines = f.read().splitlines()
    cpus = [int(col[3:]) for col in lines[0].split() if col.startswith("CPU")]
    counts = {cpu: {"device": 0, "local_timer": 0, "other": 0} for cpu in cpus}
    for line in lines[1:]:
        label, _, rest = line.partition(":")
        label = label.strip()
        if not label or label in _SINGLE_COLUMN_ROWS:
            continue
        fields = rest.split()
        if len(fields) < len(cpus):
            continue
        kind = "device" if label.isdigit() else "local_timer" if label == "LOC" else "other"
        for cpu, field in zip(cpus, fields[: len(cpus)], strict=True):
            with contextlib.suppress(ValueError):
                counts[cpu][kind] += int(field)
    return counts


def read_thread_switches(proc: str = "/proc") -> dict[tuple[int, int], tuple[int, int]]:
    """(tid, start time) -> (last CPU, cumulative context switches) for every thread."""
    threads: dict[tuple[int, int], tuple[int, int]] = {}
    for pid in os.listdir(proc):
        if not pid.isdigit():
            continue
        task_dir = os.path.join(proc, pid, "task")
        try:
            tids = os.listdir(task_dir)
        except OSError:
            continue  # exited
        for tid in tids:
            base = os.path.join(task_dir, tid)
            try:
                with open(os.path.join(base, "stat")) as f:
                    stat = f.read()
                with open(os.path.join(base, "status")) as f:
                    status = f.read()
            except OSError:
                continue
            # comm may contain spaces and parentheses: split after the last ')'.
            fields = stat[stat.rfind(")") + 2 :].split()
            start, cpu = int(fields[19]), int(fields[36])  # stat fields 22 and 39
            switches = 0
            for line in status.splitlines():
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    switches += int(line.split()[1])
            threads[(int(tid), start)] = (cpu, switches)
    return threads


def take_sample(proc: str = "/proc") -> dict:
    return {
        "t": time.monotonic(),
        "irqs": read_interrupts(proc),
        "threads": read_thread_switches(proc),
    }


def rates(first: dict, second: dict, cpus: list[int] | None = None) -> dict[int, dict[str, float]]:
    """Per-CPU rates between two samples."""
    dt = max(second["t"] - first["t"], 1e-9)
    present = sorted(second["irqs"])
    wanted = present if cpus is None else [c for c in cpus if c in second["irqs"]]
    switches = {cpu: 0 for cpu in present}
    for key, (cpu, count) in second["threads"].items():
        before = first["threads"].get(key, (cpu, 0))[1]
        if cpu in switches:
            switches[cpu] += max(count - before, 0)
    out: dict[int, dict[str, float]] = {}
    for cpu in wanted:
        a, b = first["irqs"].get(cpu, {}), second["irqs"][cpu]
        out[cpu] = {
            "device_irqs_per_s": (b["device"] - a.get("device", 0)) / dt,
            "local_timer_irqs_per_s": (b["local_timer"] - a.get("local_timer", 0)) / dt,
            "other_irqs_per_s": (b["other"] - a.get("other", 0)) / dt,
            "ctx_switches_per_s": switches[cpu] / dt,
        }
    return out


# ---------------------------------------------------------------- one-shot sample
def parse_groups(text: str) -> dict[str, list[int]]:
    """'housekeeping=0,workers=1-3,siblings=' -> {name: cpus}. A name starts each group."""
    groups: dict[str, list[int]] = {}
    current = None
    for part in text.split(","):
        if "=" in part:
            current, _, part = part.partition("=")
            current = current.strip()
            if not current:
                raise ValueError(f"--groups: empty group name in {text!r}")
            groups[current] = []
        elif current is None:
            raise ValueError(f"--groups: expected NAME=CPULIST, got {text!r}")
        groups[current] = sorted(set(groups[current]) | set(parse_cpulist(part)))
    return groups


def summarise(per_cpu: dict[int, dict[str, float]], groups: dict[str, list[int]]) -> dict:
    summary = {}
    for name, cpus in groups.items():
        rows = [per_cpu[c] for c in cpus if c in per_cpu]
        entry: dict = {"cpus": format_cpulist(cpus), "count": len(rows)}
        for metric in METRICS:
            values = [row[metric] for row in rows]
            entry[metric] = {
                "mean": round(sum(values) / len(values), 2) if values else None,
                "max": round(max(values), 2) if values else None,
            }
        summary[name] = entry
    return summary


def table(summary: dict, seconds: float) -> list[str]:
    header = (
        f"{'group':<13} {'cpus':<16} {'device IRQ/s':>13} {'timer IRQ/s':>12} "
        f"{'other IRQ/s':>12} {'ctx sw/s':>10}"
    )
    lines = [f"noise over {seconds:g} s, mean per CPU (max in brackets)", header]

    def cell(value: dict, width: int) -> str:
        if value["mean"] is None:
            return f"{'-':>{width}}"
        return f"{value['mean']:.1f} ({value['max']:.0f})".rjust(width)

    for name, entry in summary.items():
        lines.append(
            f"{name:<13} {entry['cpus'] or '(none)':<16} "
            f"{cell(entry['device_irqs_per_s'], 13)} {cell(entry['local_timer_irqs_per_s'], 12)} "
            f"{cell(entry['other_irqs_per_s'], 12)} {cell(entry['ctx_switches_per_s'], 10)}"
        )
    return lines


def cmd_sample(args) -> int:
    groups = parse_groups(args.groups) if args.groups else {}
    interrupts = os.path.join(args.proc, "interrupts")
    if not os.path.exists(interrupts):
        print(json.dumps({"unsupported": f"{interrupts} does not exist"}))
        return 0
    first = take_sample(args.proc)
    time.sleep(args.seconds)
    second = take_sample(args.proc)
    per_cpu = rates(first, second)
    summary = summarise(per_cpu, groups)
    print(json.dumps({
        "source": NAME,
        "seconds": args.seconds,
        "cpus": {str(c): {k: round(v, 2) for k, v in r.items()} for c, r in per_cpu.items()},
        "groups": summary,
        "table": table(summary, args.seconds),
    }))  # fmt: skip
    return 0


# ---------------------------------------------------------------- collector daemon
def _pidfile(out: str) -> str:
    return os.path.join(out, f"{NAME}.pid")


def _is_ours(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f"{NAME}.py".encode() in f.read()
    except OSError:
        return False


def _daemon_loop(
    out: str, cpus: list[int] | None, interval: float, proc: str, max_seconds: float
) -> None:
    """Sample every ``interval`` s until SIGTERM, ``max_seconds``, or ``out`` is removed (the
    orchestrator clears a run's folder before a rerun), so a daemon whose orchestrator died
    does not sample forever (same rule as collectors/_collector.py)."""
    stopping = False
    stop_at = time.monotonic() + max_seconds

    def on_term(signum, frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    path = os.path.join(out, f"{NAME}.jsonl")
    with open(path, "a", buffering=1) as log:
        previous = take_sample(proc)
        while True:
            deadline = time.monotonic() + interval
            while not stopping and time.monotonic() < deadline:
                time.sleep(min(0.2, max(deadline - time.monotonic(), 0)))
                if time.monotonic() >= stop_at or not os.path.isdir(out):
                    stopping = True
            if not os.path.isdir(out):
                return  # nowhere to write: the run's folder is gone
            current = take_sample(proc)
            ts = time.time()
            dt = current["t"] - previous["t"]
            for cpu, row in rates(previous, current, cpus).items():
                record = {
                    "ts": round(ts, 3),
                    "source": NAME,
                    "cpu": cpu,
                    "interval_s": round(dt, 3),
                }
                record.update({k: round(v, 2) for k, v in row.items()})
                log.write(json.dumps(record) + "\n")
            previous = current
            if stopping:
                return


def cmd_start(args) -> int:
    os.makedirs(args.out, exist_ok=True)
    pidfile = _pidfile(args.out)
    if os.path.exists(pidfile):
        with open(pidfile) as f:
            pid = int(f.read().strip() or 0)
        if pid and _is_ours(pid):
            print(f"{NAME}: already running as PID {pid} ({pidfile})", file=sys.stderr)
            return 1
        os.unlink(pidfile)
    interrupts = os.path.join(args.proc, "interrupts")
    if not os.path.exists(interrupts):
        with open(os.path.join(args.out, f"{NAME}.jsonl"), "a") as log:
            record = {"ts": round(time.time(), 3), "source": NAME}
            record["unsupported"] = f"{interrupts} does not exist"
            log.write(json.dumps(record) + "\n")
        return 0
    cpus = parse_cpulist(args.cpus) if args.cpus else None
    read_end, write_end = os.pipe()
    if os.fork() > 0:  # parent: wait until the daemon has written its pidfile
        os.close(write_end)
        with os.fdopen(read_end) as ready:
            pid = ready.read().strip()
        if not pid:
            print(f"{NAME}: daemon failed to start", file=sys.stderr)
            return 1
        print(json.dumps({"source": NAME, "pid": int(pid), "pidfile": pidfile}))
        return 0
    os.close(read_end)
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    tmp = f"{pidfile}.tmp"
    with open(tmp, "w") as f:
        f.write(f"{os.getpid()}\n")
    os.replace(tmp, pidfile)
    os.write(write_end, str(os.getpid()).encode())
    os.close(write_end)
    try:
        _daemon_loop(args.out, cpus, args.interval, args.proc, args.max_seconds)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(pidfile)
    os._exit(0)


def cmd_stop(args) -> int:
    pidfile = _pidfile(args.out)
    try:
        with open(pidfile) as f:
            pid = int(f.read().strip())
    except (OSError, ValueError):
        print(json.dumps({"source": NAME, "stopped": None, "reason": f"no pidfile {pidfile}"}))
        return 0
    if not _is_ours(pid):
        os.unlink(pidfile)
        print(json.dumps({"source": NAME, "stopped": None, "reason": f"PID {pid} is not ours"}))
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _is_ours(pid):
        time.sleep(0.05)
    if _is_ours(pid):
        print(f"{NAME}: PID {pid} did not stop within 10 s", file=sys.stderr)
        return 1
    with contextlib.suppress(OSError):
        os.unlink(pidfile)
    print(json.dumps({"source": NAME, "stopped": pid}))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=NAME, description=__doc__.split("\n\n")[0])
    parser.add_argument("--proc", default="/proc", help="procfs root (default /proc)")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("sample", help="sample once and print a JSON table")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--groups", default="", help="NAME=CPULIST,NAME=CPULIST,...")
    p.set_defaults(func=cmd_sample)
    p = sub.add_parser("start", help="start the collector daemon")
    p.add_argument("--out", required=True)
    p.add_argument("--cpus", default="", help="CPU list to record (default: all)")
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--max-seconds", type=float, default=24 * 3600,
                   help="stop by itself after this long (default 1 day)")  # fmt: skip
    p.set_defaults(func=cmd_start)
    p = sub.add_parser("stop", help="stop the collector daemon started with --out DIR")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_stop)
    args = parser.parse_args(argv)
    if min(getattr(args, k, 1) for k in ("seconds", "interval", "max_seconds")) <= 0:
        parser.error("--seconds, --interval and --max-seconds must be positive")
    try:
        return args.func(args)
    except ValueError as exc:
        parser.error(str(exc))
    return 2


if __name__ == "__main__":
    sys.exit(main())
