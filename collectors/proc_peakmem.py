#!/usr/bin/env python3
"""Peak memory of a run's process tree, sampled from procfs. Stdlib only; runs on the host.

    proc_peakmem.py start --out DIR [--cpus LIST] [--interval 0.02]
    proc_peakmem.py stop --out DIR

The orchestrator writes the run's PID to ``DIR/target.pid`` when it starts the command (the
collector starts first, so it waits for that file). Each interval the daemon sums VmRSS over
the PID and its descendants (``/proc/PID/task/TID/children``) and tracks each process's VmHWM,
the kernel's own high-water mark, which also catches peaks shorter than the interval. On stop it
writes the figures as metric records of the native contract (``{"type": "metric", ...}``), so
they are stored like any other metric: ``peak_tree_rss`` and ``peak_process_hwm`` in KiB.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _collector  # noqa: E402 - shipped next to this file

NAME = "proc_peakmem"
PROC = "/proc"


def _status(pid: int) -> dict[str, int]:
    values = {}
    try:
        with open(f"{PROC}/{pid}/status") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    values[key] = int(rest.split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return values


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        tids = os.listdir(f"{PROC}/{pid}/task")
    except OSError:
        return kids
    for tid in tids:
        try:
            with open(f"{PROC}/{pid}/task/{tid}/children") as fh:
                kids.extend(int(k) for k in fh.read().split())
        except (OSError, ValueError):
            continue
    return kids


def tree(root: int) -> list[int]:
    seen, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.append(pid)
        todo.extend(_children(pid))
    return seen


def unsupported(args) -> str | None:
    if not os.path.exists(f"{PROC}/self/status"):
        return f"{PROC}/self/status does not exist"
    if not os.path.exists(f"{PROC}/self/task/{os.getpid()}/children"):
        return "kernel lacks /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN)"
    return None


def loop(ctx: _collector.Context) -> None:
    target_file = os.path.join(ctx.out, "target.pid")
    target = None
    peak_rss = peak_hwm = samples = 0
    procs_max = 0
    while True:
        if target is None:
            try:
                with open(target_file) as fh:
                    target = int(fh.read().strip())
                ctx.write({"target": target})
            except (OSError, ValueError):
                pass
        if target is not None:
            pids = tree(target)
            total = 0
            for pid in pids:
                status = _status(pid)
                total += status.get("VmRSS", 0)
                peak_hwm = max(peak_hwm, status.get("VmHWM", 0))
            if total:
                samples += 1
                peak_rss = max(peak_rss, total)
                procs_max = max(procs_max, len(pids))
        if not ctx.sleep(ctx.interval):
            break
    ctx.write({"samples": samples, "processes_max": procs_max, "target": target})
    if samples:
        ctx.write({"type": "metric", "name": "peak_tree_rss", "value": peak_rss, "unit": "KiB"})
        ctx.write({"type": "metric", "name": "peak_process_hwm", "value": peak_hwm, "unit": "KiB"})


if __name__ == "__main__":
    sys.exit(_collector.run(sys.argv[1:], NAME, loop, unsupported, __doc__, interval=0.02))
