"""Run on this machine, no SSH: the executor for ``connection: local`` inventory hosts.

Commands run through the process module, collectors/_process.py (own group, parent-death signal,
killed by
PID at the timeout), as the SSH hosts' agent runs them. Long-lived processes (a server under
test, its sampler) and collector daemons are held by the same agent as on SSH hosts, here over
a pipe: when the orchestrator dies, even by SIGKILL, the pipe closes and the agent kills them.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import select
import shutil
import subprocess
import threading
import time
from pathlib import Path

from socketlab.errors import HostError
from socketlab.execute.base import (
    Executor,
    HostBusy,
    HostUnreachable,
    Result,
    default_workroot,
    process,
    tool_files,
)
from socketlab.safepath import inside


class LocalExecutor(Executor):
    controller = True
    address = "127.0.0.1"

    def __init__(
        self,
        name: str = "localhost",
        *,
        workroot: str | None = None,
        python: str | None = None,
    ) -> None:
        self.name = name
        self.python = python or "python3"
        self.workdir = inside(workroot or default_workroot(), name, what="host name")
        self.run_as = pwd.getpwuid(os.geteuid()).pw_name  # recorded with each run
        self._lock_fh = None
        self._agent: subprocess.Popen | None = None
        self._installed = False
        self._request_lock = threading.Lock()
        #: interrupt(): pidfiles of runs to stop, and the PID of each run in flight by pidfile
        self._stop_lock = threading.Lock()
        self._stops: set[str] = set()
        self._running: dict[str, int] = {}

    def connect(self) -> None:
        Path(self.workdir).mkdir(parents=True, exist_ok=True)

    def close(self) -> None:
        self.unlock()
        with self._request_lock:
            if self._agent is not None:  # EOF: it stops what it still holds, then exits
                self._agent.stdin.close()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._agent.wait(timeout=30)
                self._agent.stdout.close()
                self._agent = None

    def run(
        self, argv, env=None, cwd=None, timeout=None, cpus=None, *, out_dir=None, pidfile=None
    ) -> Result:
        if pidfile is None:
            return Result(
                **process.run(
                    argv,
                    env=env,
                    cwd=cwd,
                    cpus=cpus,
                    timeout=timeout,
                    out_dir=out_dir,
                    started_hook=self._held,
                )
            )
        with self._stop_lock:
            if pidfile in self._stops:  # the stop came first: never start it
                return Result(None, "", "interrupted before it started", 0.0, started=time.time())

        def started(pid: int) -> None:  # right after the pidfile is written
            self._held(pid)
            with self._stop_lock:
                self._running[pidfile] = pid
                stop = pidfile in self._stops
            if stop:  # the stop came while it was starting: interrupt() found no PID yet
                process.kill_group(pid)

        try:
            return Result(
                **process.run(
                    argv,
                    env=env,
                    cwd=cwd,
                    cpus=cpus,
                    timeout=timeout,
                    out_dir=out_dir,
                    pidfile=pidfile,
                    started_hook=started,
                )
            )
        finally:
            with self._stop_lock:
                self._running.pop(pidfile, None)

    def interrupt(self, pidfile: str) -> None:
        """The run's group by the PID we started it with (kept here, not read back from the
        pidfile: a stale one from an earlier attempt names a PID that may be reused)."""
        with self._stop_lock:
            self._stops.add(pidfile)
            pid = self._running.get(pidfile)
            if pid is not None:
                process.kill_group(pid)

    def call(self, argv: list[str], timeout: float = 120.0) -> tuple[int, str]:
        reply = process.run(argv, timeout=timeout, merged=True, started_hook=self._held)
        if reply["timed_out"]:
            return 124, f"{argv[0]}: no answer in {timeout:g} s"
        return reply["exit_code"], reply["stdout"] or reply["stderr"]

    def install_tools(self, scratch: Path | None = None) -> None:
        """Copy the tools into place, each file written beside its place and renamed over it
        (an agent of another session may be running them); ``scratch`` is not needed here."""
        tools = Path(self.tools)
        tools.mkdir(parents=True, exist_ok=True)
        for name, path in tool_files().items():
            staged = tools / f".{name}.new-{os.getpid()}"
            shutil.copyfile(path, staged)
            os.replace(staged, tools / name)
        self._installed = True  # the agent starts from this session's copy, never an older one
        self._request({"op": "ping"}, 30.0)  # now: each command's group is handed over at once

    def _held(self, pid: int) -> None:
        """The agent kills this group if we die (the parent-death signal reaches the leader
        only); before the tools are installed there is no agent and the leader's signal is all."""
        if self._installed:
            with contextlib.suppress(HostError):
                self.watch(pid)

    def _request(self, request: dict, deadline_s: float) -> dict:
        """One request to this host's agent (started on first use, from the installed tools)."""
        with self._request_lock:
            if self._agent is None:
                if not self._installed:
                    raise HostError(f"{self.name}: no agent before install_tools")
                # its own session: a terminal's Ctrl-C must not end it before it has cleaned up
                self._agent = subprocess.Popen(
                    self.tool("_runwrap.py", "serve", "--idle", str(365 * 86400.0)),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    start_new_session=True,
                )
                self._buffer = b""
                self._readline(time.monotonic() + 30)  # {"ready": true}
            self._agent.stdin.write(json.dumps(request).encode() + b"\n")
            self._agent.stdin.flush()
            return json.loads(self._readline(time.monotonic() + deadline_s))

    def _readline(self, deadline: float) -> bytes:
        fd = self._agent.stdout.fileno()
        while b"\n" not in self._buffer:
            if not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
                raise HostUnreachable(f"{self.name}: the local agent gave no reply in time")
            data = os.read(fd, 1 << 16)
            if not data:
                raise HostUnreachable(f"{self.name}: the local agent exited")
            self._buffer += data
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def put(self, local, remote: str) -> None:
        Path(remote).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(local, remote)

    def get(self, remote: str, local) -> None:
        Path(local).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(remote, local)

    def lock(self, info: dict) -> None:
        path = Path(self.workdir) / "host.lock"
        fh, holder = process.take_lock(str(path), info)
        if fh is None:
            raise HostBusy(
                f"{self.name}: host is busy, locked by another orchestrator "
                f"({holder or 'unknown holder'}; lock file {path})",
                holder,
            )
        self._lock_fh = fh

    def unlock(self) -> None:
        if self._lock_fh is not None:
            self._lock_fh.close()  # closing the descriptor drops the flock
            self._lock_fh = None
