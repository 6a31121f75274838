"""Shared start/stop machinery for collectors (stdlib only; copied to hosts with them).

The contract (docs/architecture.md): ``<name>.py start|stop --out DIR [--cpus LIST]``.
``start`` leaves a daemon that appends JSON lines (each with ``ts`` and ``source``) to
``DIR/<name>.jsonl`` and keeps its PID in ``DIR/<name>.pid``; ``stop`` ends exactly that PID
(checked against /proc/PID/cmdline, never by name) and waits for its last record. Where the
host lacks the source, ``start`` writes one ``{"unsupported": "<reason>"}`` record and exits 0.
A daemon also ends by itself after ``--max-seconds``, or when DIR is removed (the orchestrator
clears a run's folder before running it again), so one whose orchestrator died does not sample
forever.

A collector module provides ``NAME``, ``unsupported(args) -> str | None`` and
``loop(ctx)``, and calls ``run(sys.argv[1:], NAME, loop, unsupported)``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time


def parse_cpulist(text: str) -> list[int]:
    """'0-2,5' -> [0, 1, 2, 5]. Stdlib copy of socketlab.cpulist (collectors can't import it)."""
    cpus: set[int] = set()
    for part in (text or "").replace(" ", "").split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return sorted(cpus)


class Context:
    """What a collector's loop sees: its settings, a stop flag and a record writer."""

    def __init__(self, name: str, args: argparse.Namespace, log) -> None:
        self.name = name
        self.out = args.out
        self.cpus = parse_cpulist(args.cpus) if args.cpus else None
        self.interval = args.interval
        self.args = args
        self._log = log
        self._stop_at = time.monotonic() + args.max_seconds
        self.stopping = False

    def write(self, record: dict) -> None:
        self._log.write(json.dumps({"ts": round(time.time(), 6), "source": self.name, **record}))
        self._log.write("\n")

    def sleep(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; False once it is time to stop (SIGTERM or max lifetime)."""
        end = time.monotonic() + seconds
        while not self.stopping:
            now = time.monotonic()
            if now >= self._stop_at or not os.path.isdir(self.out):
                self.stopping = True
                break
            if now >= end:
                return True
            time.sleep(min(0.05, end - now))
        return False


def _pidfile(out: str, name: str) -> str:
    return os.path.join(out, f"{name}.pid")


def _is_ours(pid: int, name: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return f"{name}.py".encode() in fh.read()
    except OSError:
        return False


def _start(name: str, args: argparse.Namespace, loop, unsupported) -> int:
    os.makedirs(args.out, exist_ok=True)
    log_path = os.path.join(args.out, f"{name}.jsonl")
    pidfile = _pidfile(args.out, name)
    reason = unsupported(args)
    if reason:
        with open(log_path, "a") as log:
            log.write(json.dumps({"ts": time.time(), "source": name, "unsupported": reason}) + "\n")
        print(json.dumps({"source": name, "unsupported": reason}))
        return 0
    read_end, write_end = os.pipe()
    if os.fork() > 0:  # parent: return once the daemon has written its pidfile
        os.close(write_end)
        with os.fdopen(read_end) as ready:
            pid = ready.read().strip()
        if not pid:
            print(f"{name}: daemon failed to start", file=sys.stderr)
            return 1
        print(json.dumps({"source": name, "pid": int(pid), "pidfile": pidfile}))
        return 0
    os.close(read_end)
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    with open(f"{pidfile}.tmp", "w") as fh:
        fh.write(f"{os.getpid()}\n")
    os.replace(f"{pidfile}.tmp", pidfile)
    code = 0
    with open(log_path, "a", buffering=1) as log:
        ctx = Context(name, args, log)

        def on_term(signum, frame):
            ctx.stopping = True

        signal.signal(signal.SIGTERM, on_term)
        os.write(write_end, str(os.getpid()).encode())
        os.close(write_end)
        try:
            loop(ctx)
        except Exception as exc:  # noqa: BLE001 - recorded, never a silent death
            ctx.write({"error": f"{type(exc).__name__}: {exc}"})
            code = 1
    with contextlib.suppress(OSError):
        os.unlink(pidfile)
    os._exit(code)


def _stop(name: str, args: argparse.Namespace) -> int:
    pidfile = _pidfile(args.out, name)
    try:
        with open(pidfile) as fh:
            pid = int(fh.read().strip())
    except (OSError, ValueError):
        print(json.dumps({"source": name, "stopped": None, "reason": f"no pidfile {pidfile}"}))
        return 0
    if not _is_ours(pid, name):
        with contextlib.suppress(OSError):
            os.unlink(pidfile)
        print(json.dumps({"source": name, "stopped": None, "reason": f"PID {pid} is not ours"}))
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _is_ours(pid, name):
        time.sleep(0.01)
    if _is_ours(pid, name):
        print(f"{name}: PID {pid} did not stop within 10 s", file=sys.stderr)
        return 1
    print(json.dumps({"source": name, "stopped": pid}))
    return 0


def run(argv: list[str], name: str, loop, unsupported, doc: str = "",
        interval: float = 1.0) -> int:  # fmt: skip
    parser = argparse.ArgumentParser(prog=f"{name}.py", description=doc.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("start", help="start sampling in the background")
    p.add_argument("--out", required=True, help="directory for the JSON lines and pidfile")
    p.add_argument("--cpus", default="", help="CPU list to record (default: all)")
    p.add_argument("--interval", type=float, default=interval, help="seconds between samples")
    p.add_argument("--max-seconds", type=float, default=24 * 3600,
                   help="stop by itself after this long")  # fmt: skip
    p = sub.add_parser("stop", help="stop the daemon started with the same --out")
    p.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if args.command == "start":
        return _start(name, args, loop, unsupported)
    return _stop(name, args)
