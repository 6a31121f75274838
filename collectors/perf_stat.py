#!/usr/bin/env python3
"""perf stat with named events while a run runs: cycles, instructions, DRAM bytes at the IMCs.

    perf_stat.py start --out DIR [--cpus LIST] [--interval 1]
    perf_stat.py stop --out DIR

Stdlib only (runs on the target). Two perf processes, each ours by PID and stopped with SIGINT:

* core events ``cycles,instructions`` on ``--cpus`` (system-wide on those CPUs) into
  ``DIR/perf_core.csv``;
* the memory controllers' CAS counts, system-wide, into ``DIR/perf_imc.csv``. The events are
  chosen from what ``/sys/bus/event_source/devices/uncore_imc*/events/`` exposes: on Granite
  Rapids / Sierra Forest both schedulers, ``cas_count_{read,write}_sch{0,1}`` (bytes = 64 x
  (SCH0 + SCH1)); elsewhere ``cas_count_read`` / ``cas_count_write``. A GNR/SRF host that only
  has the legacy alias (which counts SCH0, about half) is refused rather than measured wrong
  (shared/reference/measurement.md Part C).

Both use ``perf stat -x, -I <ms>`` (CSV, one line per event per interval). The parser is
socketlab.parse.collectors.perf_stat. Where a part has no counters (a VM: "<not supported>"), its
reason is recorded; when neither works, ``start`` writes one ``{"unsupported": ...}`` record.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _collector  # noqa: E402

NAME = "perf_stat"
CORE_EVENTS = "cycles,instructions"
EVENT_ROOT = os.environ.get("SOCKETLAB_PERF_EVENTS", "/sys/bus/event_source/devices")
#: (family, model) of parts with two CAS schedulers per channel: GNR, GNR-D, SRF
TWO_SCHEDULERS = {(6, 173), (6, 174), (6, 175)}


def cpu_id() -> tuple[int, int]:
    fam = mod = 0
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                key, _, val = line.partition(":")
                key = key.strip()
                if key == "cpu family":
                    fam = int(val)
                elif key == "model":
                    mod = int(val)
                if fam and mod:
                    break
    except (OSError, ValueError):
        pass
    return fam, mod


def imc_events(root: str = EVENT_ROOT, cpu: tuple[int, int] | None = None) -> tuple[str, str]:
    """(perf event list, '') or ('', reason) for DRAM traffic at the memory controllers."""
    boxes = sorted(glob.glob(os.path.join(root, "uncore_imc*")))
    if not boxes:
        return "", "no uncore_imc PMU"
    names = set()
    for box in boxes:
        names.update(
            os.listdir(os.path.join(box, "events"))
            if os.path.isdir(os.path.join(box, "events"))
            else ()
        )
    if {"cas_count_read_sch0", "cas_count_read_sch1"} <= names:
        ev = [
            f"uncore_imc/{e}/"
            for e in (
                "cas_count_read_sch0",
                "cas_count_read_sch1",
                "cas_count_write_sch0",
                "cas_count_write_sch1",
            )
        ]
        return ",".join(ev), ""
    if "cas_count_read" in names:
        if (cpu or cpu_id()) in TWO_SCHEDULERS:
            return "", (
                "refused: only the legacy cas_count_read alias, which counts one of the "
                "two CAS schedulers on this CPU"
            )
        return "uncore_imc/cas_count_read/,uncore_imc/cas_count_write/", ""
    return "", "uncore_imc PMU has no cas_count events"


def core_events_work(perf: str) -> str | None:
    """None when cycles and instructions count here, else why not."""
    try:
        probe = subprocess.run(
            [perf, "stat", "-x,", "-e", CORE_EVENTS, "--", "true"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"perf stat failed: {exc}"
    text = probe.stderr
    for marker in ("<not supported>", "<not counted>"):
        if marker in text:
            return f"no hardware PMU (perf stat reports cycles {marker})"
    if probe.returncode != 0:
        return f"perf stat exit {probe.returncode}: {text.strip()[-200:]}"
    return None


def unsupported(args) -> str | None:
    perf = shutil.which("perf")
    if perf is None:
        return "perf is not installed"
    args.perf = perf
    args.core_reason = core_events_work(perf)
    args.imc_events, args.imc_reason = imc_events()
    if args.core_reason and args.imc_reason:
        return f"{args.core_reason}; DRAM: {args.imc_reason}"
    return None


def _start(perf: str, events: str, out: str, interval: float, cpus: str | None):
    argv = [perf, "stat", "-x,", "-I", str(max(int(interval * 1000), 10)), "-e", events, "-o", out]
    argv += ["-C", cpus] if cpus else ["-a"]
    return _collector.start_child(argv), argv


def loop(ctx) -> None:
    a = ctx.args
    children = []
    if not a.core_reason:
        cpus = ",".join(str(c) for c in ctx.cpus) if ctx.cpus else None
        child, argv = _start(
            a.perf, CORE_EVENTS, os.path.join(ctx.out, "perf_core.csv"), ctx.interval, cpus
        )
        children.append(child)
        ctx.write({"part": "core", "pid": child.pid, "file": "perf_core.csv", "argv": argv})
    else:
        ctx.write({"part": "core", "unsupported": a.core_reason})
    if not a.imc_reason:
        child, argv = _start(
            a.perf, a.imc_events, os.path.join(ctx.out, "perf_imc.csv"), ctx.interval, None
        )
        children.append(child)
        ctx.write({"part": "imc", "pid": child.pid, "file": "perf_imc.csv", "argv": argv})
    else:
        ctx.write({"part": "imc", "unsupported": a.imc_reason})
    while ctx.sleep(0.2):
        if all(c.poll() is not None for c in children):
            break
    errors = _collector.end_children(children)
    # zip(strict=) is 3.10+ and hosts may run 3.9; end_children returns one tail per child.
    for child, err in zip(children, errors):
        ctx.write({"pid": child.pid, "exit": child.returncode, "stderr": err})


if __name__ == "__main__":
    sys.exit(_collector.run(sys.argv[1:], NAME, loop, unsupported, __doc__))
