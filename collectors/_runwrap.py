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

Long-lived processes (a server under test and its samplers) are started with ``{"op":
"spawn", "argv", "env", "cwd", "cpus", "log"}``: their own session, output to ``log``, reply
``{"pid"}`` at once. ``{"op": "tree", "pid"}`` replies whether it still runs (or its exit code),
every PID below it and each thread's Cpus_allowed_list; ``{"op": "stop", "pid", "grace"}``
signals its group and every descendant by PID, SIGTERM then SIGKILL, and replies with the PIDs
still alive. Whatever was spawned and not stopped is killed when the agent exits.
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


def _stat(pid: int) -> tuple[str, int, int, int] | None:
    """(state, ppid, pgid, start ticks) of a process, or None when it is gone."""
    try:
        raw = _read(f"/proc/{pid}/stat")
    except OSError:
        return None
    if not raw:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    return fields[0], int(fields[1]), int(fields[2]), int(fields[19])


def _below(root: int) -> list[int]:
    """Live processes below ``root`` by parent links, plus the members of its group."""
    children: dict[int, list[int]] = {}
    group = []
    for name in os.listdir("/proc"):
        if name.isdigit() and (st := _stat(int(name))) is not None and st[0] not in "ZX":
            children.setdefault(st[1], []).append(int(name))
            if st[2] == root:
                group.append(int(name))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return sorted((set(out) | set(group)) - {root})


class Spawned:
    """Processes started by "spawn": kept to poll, signal and reap them by PID."""

    def __init__(self) -> None:
        self.children: dict[int, subprocess.Popen] = {}
        self.seen: dict[int, dict[int, int]] = {}  #: root -> {pid: start ticks}

    def spawn(self, request: dict) -> dict:
        env = dict(os.environ)
        env.update(request.get("env") or {})
        cpus = request.get("cpus")

        def pin() -> None:
            if cpus:
                os.sched_setaffinity(0, cpus)

        log = request.get("log") or os.devnull
        os.makedirs(os.path.dirname(log) or ".", exist_ok=True)
        with open(log, "ab") as out:
            try:
                child = subprocess.Popen(
                    request["argv"], stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                    cwd=request.get("cwd") or None, env=env, start_new_session=True,
                    preexec_fn=pin,
                )  # fmt: skip
            except (OSError, subprocess.SubprocessError) as exc:
                return {"error": f"cannot start {request['argv'][0]}: {exc}"}
        self.children[child.pid] = child
        self.seen[child.pid] = {}
        self._remember(child.pid, [child.pid])
        return {"pid": child.pid}

    def _remember(self, root: int, pids: list[int]) -> None:
        for pid in pids:
            if pid not in self.seen[root] and (st := _stat(pid)) is not None:
                self.seen[root][pid] = st[3]

    def _alive(self, root: int) -> list[int]:
        out = []
        for pid, started in self.seen.get(root, {}).items():
            st = _stat(pid)
            if st is not None and st[0] not in "ZX" and st[3] == started:
                out.append(pid)
        return sorted(out)

    def tree(self, request: dict) -> dict:
        root = int(request["pid"])
        child = self.children.get(root)
        if child is None:
            return {"error": f"PID {root} was not spawned by this agent"}
        below = _below(root)
        self._remember(root, below)
        affinity = {}
        for pid in [root, *below]:
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tids:
                for line in _read(f"/proc/{pid}/task/{tid}/status").splitlines():
                    if line.startswith("Cpus_allowed_list:"):
                        affinity[f"{pid}/{tid}"] = line.split(":", 1)[1].strip()
        return {"exit_code": child.poll(), "pids": below, "affinity": affinity,
                "seen": sorted(self.seen[root])}  # fmt: skip

    def stop(self, request: dict) -> dict:
        root = int(request["pid"])
        child = self.children.get(root)
        if child is None:
            return {"error": f"PID {root} was not spawned by this agent"}
        self._remember(root, _below(root))
        steps = ((signal.SIGTERM, float(request.get("grace", 10.0))), (signal.SIGKILL, 5.0))
        for sig, wait_s in steps:
            targets = self._alive(root)
            if not targets and child.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                os.killpg(root, sig)  # its own session: group id = its PID
            for pid in targets:  # descendants that left the group
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                if child.poll() is not None and not self._alive(root):
                    break
                time.sleep(0.05)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=5)
        del self.children[root]
        return {"exit_code": child.returncode, "left": self._alive(root),
                "seen": sorted(self.seen.pop(root))}  # fmt: skip

    def stop_all(self) -> None:
        for root in list(self.children):
            self.stop({"pid": root, "grace": 2.0})


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
    spawned = Spawned()
    ops = {"spawn": spawned.spawn, "tree": spawned.tree, "stop": spawned.stop}
    try:
        while True:
            request = channel.request()
            if request.get("op") in ("run", "call"):
                reply = run(request, channel)
            elif request.get("op") in ops:
                reply = ops[request["op"]](request)
            elif request.get("op") == "ping":
                reply = {"pong": True}
            else:
                reply = {"error": f"unknown op {request.get('op')!r}"}
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()
    except ControllerGone:
        return 0
    finally:
        spawned.stop_all()  # a vanished orchestrator leaves no server running on the host
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
