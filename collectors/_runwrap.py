#!/usr/bin/env python3
"""The orchestrator's agent on a target host: runs commands shell-free. Stdlib only.

Over SSH every exec goes through the login shell (and its rc files: 100+ ms on some hosts).
So the orchestrator starts this agent once per host and sends it requests, one JSON object
per line on stdin; each reply is one JSON line on stdout. No user-written string is ever
parsed by a shell: argv travels as JSON and reaches execve() as is.

    _runwrap.py serve [--lock PATH --info B64] [--idle SECONDS]

- ``--lock``: take flock(PATH) first and hold it while serving: one orchestrator per host.
  The first reply line says ``{"ready": true}`` or ``{"ready": false, "holder": ...}``.
- ``--idle``: the orchestrator sends an empty line every few seconds; after this long without
  one (or at EOF) the agent kills what it is running and exits, so a vanished orchestrator
  never holds the host's lock or cores for long.

Requests: ``{"op": "run", "argv": [...], "env": {}, "cwd": null, "cpus": [0, 1],
"timeout": 60, "out_dir": DIR, "pidfile": null}`` runs argv in its own session (its own process
group), kills that group by its PID at the timeout, and replies with exit code, timed out,
duration, pgid, stdout and stderr (kept in DIR/stdout and DIR/stderr). ``{"op": "call", ...}``
is the same for our own helper commands, stdout and stderr merged.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time

#: Output beyond this is cut from the JSON reply (the full files stay on the host).
MAX_INLINE = 32 * 1024 * 1024


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

    def request(self) -> dict | None:
        while True:
            while b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                if line.strip():
                    return json.loads(line)
            self.check(max(0.1, self.idle_s - (time.monotonic() - self.last)))


def _read(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            return fh.read(MAX_INLINE).decode("utf-8", errors="replace")
    except OSError:
        return ""


def _wait(child: subprocess.Popen, timeout: float | None, channel: Channel) -> tuple[int, bool]:
    """Wait for the child, watching stdin meanwhile; kill its group at the timeout."""
    deadline = None if timeout is None else time.monotonic() + timeout
    pidfd = None
    with contextlib.suppress(AttributeError, OSError):
        pidfd = os.pidfd_open(child.pid)
    try:
        while True:
            code = child.poll()
            if code is not None:
                return code, False
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                os.killpg(child.pid, signal.SIGKILL)  # its own session: PID == group id
                return child.wait(), True
            wait = 1.0 if deadline is None else min(1.0, deadline - now)
            if pidfd is not None:
                # Wake on whichever comes first: the child's exit or a heartbeat.
                ready, _, _ = select.select([pidfd, 0], [], [], wait)
                if 0 in ready or not ready:
                    channel.check(0)
            else:
                channel.check(min(wait, 0.005))
    except ControllerGone:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        raise
    finally:
        if pidfd is not None:
            os.close(pidfd)


def run(request: dict, channel: Channel) -> dict:
    merged = request.get("op") == "call"
    out_dir = request.get("out_dir") or tempfile.mkdtemp(prefix="slab-call-")
    os.makedirs(out_dir, exist_ok=True)
    out_path, err_path = os.path.join(out_dir, "stdout"), os.path.join(out_dir, "stderr")
    env = dict(os.environ)
    env.update(request.get("env") or {})
    cpus = request.get("cpus")

    def pin() -> None:  # runs in the child before exec; the agent has no threads
        if cpus:
            os.sched_setaffinity(0, cpus)

    started = time.time()
    t0 = time.perf_counter()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        try:
            child = subprocess.Popen(
                request["argv"], stdin=subprocess.DEVNULL, stdout=out,
                stderr=out if merged else err, cwd=request.get("cwd") or None, env=env,
                start_new_session=True, preexec_fn=pin,
            )  # fmt: skip
        except OSError as exc:
            return {
                "exit_code": 127, "timed_out": False, "started": started, "duration_s": 0.0,
                "pgid": None, "stdout": "", "stderr": f"cannot start {request['argv'][0]}: {exc}",
            }  # fmt: skip
        if request.get("pidfile"):
            with open(request["pidfile"], "w") as fh:
                fh.write(f"{child.pid}\n")
        code, timed_out = _wait(child, request.get("timeout"), channel)
        # Members of the group that outlive the leader would hold the host's cores.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
    duration = time.perf_counter() - t0
    return {
        "exit_code": code, "timed_out": timed_out, "started": started, "duration_s": duration,
        "pgid": child.pid, "stdout": _read(out_path), "stderr": "" if merged else _read(err_path),
    }  # fmt: skip


def take_lock(path: str, info: dict):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fh = open(path, "a+")  # noqa: SIM115 - held while we serve
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.seek(0)
        holder = fh.read().strip()
        fh.close()
        return None, holder
    fh.seek(0)
    fh.truncate()
    fh.write(json.dumps({**info, "agent_pid": os.getpid(), "since": time.time()}))
    fh.flush()
    return fh, None


def serve(args: argparse.Namespace) -> int:
    held = None
    if args.lock:
        info = json.loads(base64.b64decode(args.info.encode()).decode()) if args.info else {}
        held, holder = take_lock(args.lock, info)
        if held is None:
            print(json.dumps({"ready": False, "holder": holder}), flush=True)
            return 1
    print(json.dumps({"ready": True, "pid": os.getpid()}), flush=True)
    channel = Channel(args.idle)
    try:
        while True:
            request = channel.request()
            if request.get("op") in ("run", "call"):
                reply = run(request, channel)
            elif request.get("op") == "ping":
                reply = {"pong": True}
            else:
                reply = {"error": f"unknown op {request.get('op')!r}"}
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()
    except ControllerGone:
        return 0
    finally:
        if held is not None:
            held.close()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="_runwrap.py")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("serve")
    p.add_argument("--lock")
    p.add_argument("--info")
    p.add_argument("--idle", type=float, default=30.0)
    args = parser.parse_args(argv)
    return serve(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
