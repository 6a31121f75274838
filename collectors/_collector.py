"""Shared machinery for collectors and the host tools beside them (stdlib only; shipped with them).

The contract (docs/architecture.md): ``<name>.py start|stop --out DIR [--cpus LIST]``.
``start`` leaves a daemon that appends JSON lines (each with ``ts`` and ``source``) to
``DIR/<name>.jsonl`` and keeps its PID in ``DIR/<name>.pid``; ``stop`` ends exactly that PID
(checked against /proc/PID/cmdline, never by name) and waits for its last record. Where the
host lacks the source, ``start`` writes one ``{"unsupported": "<reason>"}`` record and exits 0.
A daemon also ends by itself after ``--max-seconds``, or when DIR is removed (the orchestrator
clears a run's folder before running it again), so one whose orchestrator died does not sample
forever.

A collector module provides ``NAME``, ``unsupported(args) -> str | None`` and
``loop(ctx)``, and calls ``run(sys.argv[1:], NAME, loop, unsupported)``; ``extend`` adds
options and subcommands of its own (proc_noise's one-shot ``sample``).

Whoever ships a collector ships this file beside it: the orchestrator copies the whole
collectors/ folder, the isolation roles copy the script they run together with this file.
The process helpers (pidfile, detach, stop by PID) also serve dma_latency_hold.py.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time

# ---------------------------------------------------------------- CPU lists
# CPU lists: _cpulist.py, shipped beside this file (and to Ansible as module_utils).
if __package__:  # imported by the orchestrator, as socketlab.hostside._collector
    from . import _cpulist
else:  # beside the collector that imports it, whose folder is on sys.path
    import _cpulist

parse_cpulist, format_cpulist = _cpulist.parse_cpulist, _cpulist.format_cpulist


# ---------------------------------------------------------------- our own processes
def read_pid(pidfile: str) -> int | None:
    try:
        with open(pidfile) as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def is_ours(pid: int, prog: str) -> bool:
    """True while PID runs the script ``prog`` (an exited or unreaped PID is not ours)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return prog.encode() in fh.read()
    except OSError:
        return False


def write_pidfile(pidfile: str) -> None:
    """Write this process's PID atomically, so a reader never sees a half-written file."""
    with open(f"{pidfile}.tmp", "w") as fh:
        fh.write(f"{os.getpid()}\n")
    os.replace(f"{pidfile}.tmp", pidfile)


def detach(workdir: str | None = None) -> tuple[str | None, int | None]:
    """Double-fork a daemon in its own session with stdio on /dev/null.

    In the caller returns ``(text, None)`` once the daemon passed ``text`` to ``ready()`` (or
    ``""`` when it died first); in the daemon returns ``(None, fd)`` for ``ready(fd, text)``.
    """
    read_end, write_end = os.pipe()
    if os.fork() > 0:
        os.close(write_end)
        with os.fdopen(read_end) as ready_pipe:
            return ready_pipe.read().strip(), None
    os.close(read_end)
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    if workdir:
        os.chdir(workdir)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    return None, write_end


def ready(fd: int, text: str) -> None:
    """Tell the process that called detach() that the daemon is up (its PID) or why not."""
    os.write(fd, text.encode())
    os.close(fd)


def stop_pid(pid: int, prog: str, timeout: float = 10.0) -> bool:
    """SIGTERM our own PID (checked by the caller) and wait until it no longer runs ``prog``."""
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and is_ours(pid, prog):
        time.sleep(0.05)
    return not is_ours(pid, prog)


def start_child(argv: list[str]) -> subprocess.Popen:
    """A tool the daemon runs (perf, turbostat): no stdin, stdout dropped, stderr kept."""
    return subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


def end_children(children: list[subprocess.Popen], timeout: float = 10.0) -> list[str]:
    """SIGINT our own children by their PIDs (perf and turbostat print their totals and exit),
    kill any still there after ``timeout``; returns each one's last 300 characters of stderr."""
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGINT)
    tails = []
    for child in children:
        try:
            child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        err = child.stderr.read().decode(errors="replace").strip() if child.stderr else ""
        tails.append(err[-300:])
    return tails


# ---------------------------------------------------------------- the collector daemon
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
        """One JSON line: ``ts`` (now, unless the record brings its own), ``source``, record."""
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


def _start(name: str, args: argparse.Namespace, loop, unsupported) -> int:
    os.makedirs(args.out, exist_ok=True)
    log_path = os.path.join(args.out, f"{name}.jsonl")
    pidfile = _pidfile(args.out, name)
    pid = read_pid(pidfile) if os.path.exists(pidfile) else None
    if pid and is_ours(pid, f"{name}.py"):
        print(f"{name}: already running as PID {pid} ({pidfile})", file=sys.stderr)
        return 1
    with contextlib.suppress(OSError):
        os.unlink(pidfile)  # stale: its daemon is gone
    reason = unsupported(args)
    if reason:
        with open(log_path, "a") as log:
            log.write(json.dumps({"ts": time.time(), "source": name, "unsupported": reason}) + "\n")
        print(json.dumps({"source": name, "unsupported": reason}))
        return 0
    text, ready_fd = detach()
    if ready_fd is None:  # the caller: the daemon has written its pidfile, or died
        if not text:
            print(f"{name}: daemon failed to start", file=sys.stderr)
            return 1
        print(json.dumps({"source": name, "pid": int(text), "pidfile": pidfile}))
        return 0
    write_pidfile(pidfile)
    code = 0
    with open(log_path, "a", buffering=1) as log:
        ctx = Context(name, args, log)

        def on_term(signum, frame):
            ctx.stopping = True

        signal.signal(signal.SIGTERM, on_term)
        ready(ready_fd, str(os.getpid()))
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
    pid = read_pid(pidfile)
    if pid is None:
        print(json.dumps({"source": name, "stopped": None, "reason": f"no pidfile {pidfile}"}))
        return 0
    if not is_ours(pid, f"{name}.py"):
        with contextlib.suppress(OSError):
            os.unlink(pidfile)
        print(json.dumps({"source": name, "stopped": None, "reason": f"PID {pid} is not ours"}))
        return 0
    if not stop_pid(pid, f"{name}.py"):
        print(f"{name}: PID {pid} did not stop within 10 s", file=sys.stderr)
        return 1
    with contextlib.suppress(OSError):
        os.unlink(pidfile)  # the daemon removes it itself; this covers one that was killed
    print(json.dumps({"source": name, "stopped": pid}))
    return 0


def run(
    argv: list[str], name: str, loop, unsupported, doc: str = "", interval: float = 1.0, extend=None
) -> int:
    """The command line of collector ``name``; ``extend(parser, subparsers)`` may add options
    and subcommands (each sets ``func(args) -> int``)."""
    parser = argparse.ArgumentParser(prog=f"{name}.py", description=doc.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    if extend:
        extend(parser, sub)
    p = sub.add_parser("start", help="start sampling in the background")
    p.add_argument("--out", required=True, help="directory for the JSON lines and pidfile")
    p.add_argument("--cpus", default="", help="CPU list to record (default: all)")
    p.add_argument("--interval", type=float, default=interval, help="seconds between samples")
    p.add_argument(
        "--max-seconds", type=float, default=24 * 3600, help="stop by itself after this long"
    )
    p = sub.add_parser("stop", help="stop the daemon started with the same --out")
    p.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    for key in ("seconds", "interval", "max_seconds"):
        if getattr(args, key, 1) <= 0:
            parser.error(f"--{key.replace('_', '-')} must be positive")
    try:
        if args.command == "start":
            parse_cpulist(args.cpus)  # a bad list is a usage error here, not a dead daemon
            return _start(name, args, loop, unsupported)
        if args.command == "stop":
            return _stop(name, args)
        return args.func(args)
    except ValueError as exc:
        parser.error(str(exc))
    return 2
