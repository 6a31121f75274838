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

import contextlib
import json
import os
import sys
import time

sys.dont_write_bytecode = True  # verify.yml runs it from a folder it removes again
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _collector  # noqa: E402 - shipped next to this file
from _collector import format_cpulist, parse_cpulist  # noqa: E402

NAME = "proc_noise"
METRICS = ("device_irqs_per_s", "local_timer_irqs_per_s", "other_irqs_per_s", "ctx_switches_per_s")
# Rows of /proc/interrupts that are counters of errors, not interrupts, and have one column.
_SINGLE_COLUMN_ROWS = {"ERR", "MIS"}


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
        # fields has at least len(cpus) items (checked above); plain zip, as strict= is 3.10+
        # and this runs on the host's python3 (3.9 on Amazon Linux 2023).
        for cpu, field in zip(cpus, fields[: len(cpus)]):
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
    print(
        json.dumps(
            {
                "source": NAME,
                "seconds": args.seconds,
                "cpus": {
                    str(c): {k: round(v, 2) for k, v in r.items()} for c, r in per_cpu.items()
                },
                "groups": summary,
                "table": table(summary, args.seconds),
            }
        )
    )
    return 0


# ---------------------------------------------------------------- collector (_collector.py)
def unsupported(args) -> str | None:
    interrupts = os.path.join(args.proc, "interrupts")
    return None if os.path.exists(interrupts) else f"{interrupts} does not exist"


def loop(ctx: _collector.Context) -> None:
    """One record per CPU per interval, and a last one when told to stop; nothing once the
    run's folder is gone (the orchestrator removed it)."""
    proc = ctx.args.proc
    previous = take_sample(proc)
    while True:
        stopping = not ctx.sleep(ctx.interval)
        if not os.path.isdir(ctx.out):
            return  # nowhere to write: the run's folder is gone
        current = take_sample(proc)
        ts = round(time.time(), 3)  # one timestamp for all CPUs of an interval
        dt = current["t"] - previous["t"]
        for cpu, row in rates(previous, current, ctx.cpus).items():
            record = {"ts": ts, "cpu": cpu, "interval_s": round(dt, 3)}
            record.update({k: round(v, 2) for k, v in row.items()})
            ctx.write(record)
        previous = current
        if stopping:
            return


def extend(parser, sub) -> None:
    """proc_noise's own: ``--proc`` and the one-shot ``sample`` that verify.yml runs."""
    parser.add_argument("--proc", default="/proc", help="procfs root (default /proc)")
    p = sub.add_parser("sample", help="sample once and print a JSON table")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--groups", default="", help="NAME=CPULIST,NAME=CPULIST,...")
    p.set_defaults(func=cmd_sample)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return _collector.run(argv, NAME, loop, unsupported, __doc__, extend=extend)


if __name__ == "__main__":
    sys.exit(main())
