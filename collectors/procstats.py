"""Server-side sampler: peak memory of a process tree and CPU time per thread group.

Stdlib only and runnable as a script, so it can be copied to a target host beside the server:

    python3 procstats.py --root-pid PID --out FILE.jsonl [--interval-ms 100]

Every interval it appends ``{"t": unix_s, "pss_bytes": sum, "procs": n, "threads": n}``: the
sum of ``Pss`` from /proc/<pid>/smaps_rollup over the tree (PSS splits shared pages among the
processes that map them, so the sum counts each page once). On SIGTERM/SIGINT, or when the root
exits, it appends one ``{"type": "summary", ...}`` record: ``peak_pss_bytes`` and
``cpu_s_by_group`` - CPU time (utime+stime from /proc/<pid>/task/<tid>/stat) used since the
sampler started, per thread group, where a group is the thread name without trailing digits
and separators ("plow-cpu-12" -> "plow-cpu"). Threads that exit keep their last sample.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import time
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
_GROUP = re.compile(r"[-_:/.#\s]*\d+$")


def thread_group(comm: str) -> str:
    return _GROUP.sub("", comm) or comm


def tree(root: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                raw = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            ppid = int(raw[raw.rindex(")") + 2 :].split()[1])
            parents.setdefault(ppid, []).append(int(name))
    out, todo = [root], [root]
    while todo:
        for c in parents.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def pss_bytes(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


def thread_times(pid: int) -> dict[int, tuple[str, int]]:
    """tid -> (comm, utime+stime ticks)."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            raw = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        comm = raw[raw.index("(") + 1 : raw.rindex(")")]
        f = raw[raw.rindex(")") + 2 :].split()
        out[int(tid)] = (comm, int(f[11]) + int(f[12]))
    return out


class Sampler:
    def __init__(self, root: int):
        self.root = root
        self.peak = 0
        self.base: dict[int, int] = {}  #: tid -> ticks at first sight
        self.last: dict[int, tuple[str, int]] = {}
        self.first = True

    def sample(self) -> dict:
        pids = tree(self.root)
        total, procs, threads = 0, 0, 0
        for pid in pids:
            pss = pss_bytes(pid)
            if pss is None:
                continue
            total += pss
            procs += 1
            for tid, (comm, ticks) in thread_times(pid).items():
                threads += 1
                # a thread born after the first sample spent all its time in the window
                self.base.setdefault(tid, ticks if self.first else 0)
                self.last[tid] = (comm, ticks)
        self.peak = max(self.peak, total)
        self.first = False
        return {"t": time.time(), "pss_bytes": total, "procs": procs, "threads": threads}

    def summary(self) -> dict:
        groups: dict[str, float] = {}
        threads: dict[str, int] = {}
        for tid, (comm, ticks) in self.last.items():
            g = thread_group(comm)
            groups[g] = groups.get(g, 0.0) + (ticks - self.base[tid]) / TICK
            threads[g] = threads.get(g, 0) + 1
        return {
            "type": "summary",
            "t": time.time(),
            "root_pid": self.root,
            "peak_pss_bytes": self.peak,
            "cpu_s_by_group": groups,
            "threads_by_group": threads,
            "clock_ticks_per_s": TICK,
        }


def read_summary(path: Path) -> dict | None:
    """The summary record of a sampler output file (None if the sampler never finished)."""
    if not path.exists():
        return None
    out = None
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("type") == "summary":
            out = rec
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root-pid", type=int, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--interval-ms", type=float, default=100.0)
    args = ap.parse_args(argv)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    s = Sampler(args.root_pid)
    with open(args.out, "a") as f:
        if pss_bytes(args.root_pid) is None:
            f.write(
                json.dumps(
                    {
                        "unsupported": f"no readable /proc/{args.root_pid}/smaps_rollup",
                        "t": time.time(),
                    }
                )
                + "\n"
            )
            return 0
        while not stop and os.path.exists(f"/proc/{args.root_pid}"):
            f.write(json.dumps(s.sample()) + "\n")
            f.flush()
            time.sleep(args.interval_ms / 1000)
        f.write(json.dumps(s.summary()) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
