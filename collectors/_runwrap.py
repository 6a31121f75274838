#!/usr/bin/env python3
"""The orchestrator's agent on a target host: runs commands shell-free. Stdlib only.

Over SSH every exec goes through the login shell (and its rc files: 100+ ms on some hosts).
So the orchestrator starts this agent once per host and sends it requests, one JSON object
per line on stdin; each reply is one JSON line on stdout. No user-written string is ever
parsed by a shell: argv travels as JSON and reaches execve() as is.

    _runwrap.py serve [--idle SECONDS]

It says ``{"ready": true, "pid": N}`` and serves requests. ``--idle``: the orchestrator sends an
empty line every few seconds; after this long without one (or at EOF) the agent kills what it
is running and exits, so a vanished orchestrator never holds the host's lock or cores for
long. On an SSH host collectors/_boot.py starts it, in the session that installed the tools.

Requests: ``{"op": "run", "argv": [...], "env": {}, "cwd": null, "cpus": [0, 1],
"timeout": 60, "out_dir": DIR, "pidfile": null}`` runs argv in its own session (its own process
group), kills that group by its PID at the timeout, and replies with exit code, timed out,
duration, pgid, stdout and stderr (kept in DIR/stdout and DIR/stderr). ``{"op": "call", ...}``
is the same for our own helper commands, stdout and stderr merged.

Long-lived processes (a server under test and its samplers) are started with ``{"op":
"spawn", "argv", "env", "cwd", "cpus", "log"}``: their own session, output to ``log``, reply
``{"pid"}`` at once. ``{"op": "tree", "pid"}`` replies whether it still runs (or its exit code),
every PID below it and each thread's Cpus_allowed_list; ``{"op": "stop", "pid", "grace"}``
signals its group and every descendant by PID, SIGTERM then SIGKILL, and replies with the PIDs
still alive; ``{"op": "watch", "pid"}`` adopts a process started by a command (a collector
daemon). ``{"op": "interrupt", "pidfile"}`` (no reply of its own) stops the run with that
pidfile: read while a run is in flight, it kills the run's group by its PID at once (the run's
reply then comes as usual), and a run with that pidfile that comes later is not started.
Whatever was spawned or watched and not stopped is killed when the agent exits. How processes
start, time out and stop is ``_process.py`` (socketlab.execute.process, shipped beside this
file): the orchestrator's local executor uses the same module.

Per run, without a process each: ``{"op": "fingerprint"}`` replies ``{"fingerprint": {...}}``
(fingerprint.py, read in this process); ``{"op": "fresh_dir", "path", "subdirs"}`` empties
PATH and makes its subfolders; ``{"op": "remove", "path"}`` removes it. ``{"op": "lock", "path",
"info"}`` takes flock(PATH) and holds it while serving: one orchestrator per host; it replies
``{"locked": true}`` or ``{"locked": false, "holder": ...}``.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _process  # noqa: E402
import fingerprint  # noqa: E402


class ControllerGone(Exception):
    """stdin reached EOF or stayed silent past the idle limit."""


class Channel:
    """Line-oriented stdin with heartbeats (empty lines) and an idle limit."""

    def __init__(self, idle_s: float) -> None:
        self.idle_s = idle_s
        self.buffer = b""
        self.last = time.monotonic()
        self.eof = False

    def _fill(self, timeout: float) -> None:
        ready, _, _ = select.select([0], [], [], max(0.0, timeout))
        if ready:
            data = os.read(0, 1 << 16)
            if not data:
                self.eof = True
                raise ControllerGone("EOF")
            self.buffer += data
            self.last = time.monotonic()

    def check(self, timeout: float) -> None:
        """Consume heartbeats for up to ``timeout`` s; raise if the controller is gone."""
        self._fill(timeout)
        if time.monotonic() - self.last > self.idle_s:
            raise ControllerGone("idle")

    def take(self, op: str) -> list:
        """Remove the complete requests of ``op`` from the buffer (read so far) and return them:
        an interrupt is acted on while a run is in flight, ahead of requests queued behind it."""
        *lines, rest = self.buffer.split(b"\n")
        kept, taken = [], []
        for line in lines:
            try:
                request = json.loads(line) if line.strip() else None
            except ValueError:
                request = None
            if isinstance(request, dict) and request.get("op") == op:
                taken.append(request)
            else:
                kept.append(line + b"\n")
        if taken:
            self.buffer = b"".join(kept) + rest
        return taken

    def request(self) -> dict | None:
        while True:
            while b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                if line.strip():
                    return json.loads(line)
            self.check(max(0.1, self.idle_s - (time.monotonic() - self.last)))


class Lock:
    """The host's lock, taken on request and held while the agent serves."""

    def __init__(self) -> None:
        self.held = None

    def take(self, request: dict) -> dict:
        if self.held is None:
            self.held, holder = _process.take_lock(request["path"], request.get("info") or {})
            if self.held is None:
                return {"locked": False, "holder": holder}
        return {"locked": True}

    def release(self) -> None:
        if self.held is not None:
            self.held.close()  # closing the descriptor drops the flock
            self.held = None


def fresh_dir(request: dict) -> dict:
    """PATH emptied (a link at PATH is removed, never followed) and its subfolders made."""
    path = request["path"]
    try:
        remove_path(path)
        for sub in request.get("subdirs") or [""]:
            os.makedirs(os.path.join(path, sub), exist_ok=True)
    except OSError as exc:
        return {"error": f"clearing the run directory {path} failed: {exc}"}
    return {}


def remove(request: dict) -> dict:
    try:
        remove_path(request["path"])
    except OSError as exc:
        return {"error": f"removing {request['path']} failed: {exc}"}
    return {}


def remove_path(path: str) -> None:
    """What `rm -rf PATH` does: a link is removed itself, a folder with what it holds."""
    if os.path.islink(path) or os.path.isfile(path):
        os.unlink(path)
    elif os.path.isdir(path):
        shutil.rmtree(path)


def serve(args: argparse.Namespace) -> int:
    print(json.dumps({"ready": True, "pid": os.getpid()}), flush=True)
    channel = Channel(args.idle)
    spawned = _process.Spawned()
    lock = Lock()
    ops = {
        "spawn": spawned.spawn,
        "tree": spawned.tree,
        "stop": spawned.stop,
        "watch": spawned.watch,
        "lock": lock.take,
        "fresh_dir": fresh_dir,
        "remove": remove,
        "fingerprint": lambda _: {"fingerprint": fingerprint.read_fingerprint()},
        "ping": lambda _: {"pong": True},
    }
    interrupted = set()  #: pidfiles of runs to stop (an interrupt may come before its run)
    try:
        while True:
            request = channel.request()
            if request.get("op") == "interrupt":  # no reply: the run's own reply says it
                interrupted.add(request.get("pidfile"))
                continue
            if request.get("op") == "run" and request.get("pidfile") in interrupted:
                reply = {
                    "exit_code": None,
                    "timed_out": False,
                    "started": time.time(),
                    "duration_s": 0.0,
                    "pgid": None,
                    "stdout": "",
                    "stderr": "interrupted before it started",
                }
            elif request.get("op") in ("run", "call"):
                reply = _process.run(
                    request["argv"],
                    env=request.get("env"),
                    cwd=request.get("cwd"),
                    cpus=request.get("cpus"),
                    timeout=request.get("timeout"),
                    out_dir=request.get("out_dir"),
                    pidfile=request.get("pidfile"),
                    merged=request["op"] == "call",
                    **_interruptible(channel, request, interrupted),
                )
            elif request.get("op") in ops:
                reply = ops[request["op"]](request)
            else:
                reply = {"error": f"unknown op {request.get('op')!r}"}
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()
    except ControllerGone:
        return 0
    finally:
        spawned.stop_all()  # a vanished orchestrator leaves no server running on the host
        lock.release()


def _interruptible(channel: Channel, request: dict, interrupted: set) -> dict:
    """watch/tick/started_hook for _process.run: heartbeats are read while the run goes, and
    an interrupt naming this run's pidfile kills its group by its PID at once."""
    group = []

    def tick(timeout: float) -> None:
        channel.check(timeout)
        interrupted.update(r.get("pidfile") for r in channel.take("interrupt"))
        if group and request["op"] == "run" and request.get("pidfile") in interrupted:
            _process.kill_group(group[0])

    return {"watch": 0, "tick": tick, "started_hook": group.append}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="_runwrap.py")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("serve")
    p.add_argument("--idle", type=float, default=30.0)
    return serve(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
