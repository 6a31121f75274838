"""Server lifecycle: start pinned in its own process group, wait for readiness, always stop.

The server command runs under ``sched_setaffinity`` to the placement's CPUs (inherited by every
thread and child), in a new session so the whole group can be signalled by its id. ``stop()``
signals the group and every descendant found under /proc (a child that called setsid leaves the
group), escalates from SIGTERM to SIGKILL, and reports any PID still alive - the caller records
that as a failure. Failures are ``ServerFailure`` with a one-line reason: never ready, exited
before ready, died mid-run with its exit code.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import httpx


class ServerFailure(Exception):
    """The server under test failed; the message is the reason that gets recorded."""


def _proc_stat(pid: int) -> tuple[str, int, int, int] | None:
    """(state, ppid, pgid, start time in ticks) of a process, or None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2:].split()
    return fields[0], int(fields[1]), int(fields[2]), int(fields[19])


def pid_alive(pid: int, started: int | None = None) -> bool:
    """Alive and not a zombie (a zombie holds no CPU or memory, only its exit status); with
    ``started``, also the same process (a reused PID has another start time)."""
    st = _proc_stat(pid)
    return (st is not None and st[0] not in ("Z", "X")
            and (started is None or st[3] == started))


def descendants(root: int) -> list[int]:
    """All live processes below ``root`` (by parent links), plus its process-group members."""
    children: dict[int, list[int]] = {}
    group: list[int] = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        st = _proc_stat(int(name))
        if st is None:
            continue
        children.setdefault(st[1], []).append(int(name))
        if st[2] == root:
            group.append(int(name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        for c in children.get(pid, []):
            out.append(c)
            todo.append(c)
    return sorted(set(out) | set(group) - {root})


def pinned(cpus: list[int] | None):
    """A ``preexec_fn`` that pins the child (and so all it starts) to ``cpus`` between fork and
    exec; ``None`` or empty leaves its affinity alone."""
    cpus = list(cpus) if cpus else None

    def pin() -> None:
        if cpus:
            os.sched_setaffinity(0, cpus)
    return pin


def _exit_text(rc: int) -> str:
    if rc < 0:
        try:
            return f"killed by signal {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit code {rc}"


def _log_line(text: str) -> str:
    """The last non-blank line of a server log, as it goes into a failure reason."""
    lines = [x for x in text.splitlines() if x.strip()]
    return f" (log: {lines[-1][:160]})" if lines else ""


class _Lifecycle:
    """What a local and a remote server share: readiness polling, the failure reasons, the
    context manager. A subclass says how to look at its tree (``_refresh``: remember its PIDs,
    record and return the exit code once it has ended) and how to read its log."""

    ready_url: str
    ready_timeout_s: float
    ready_s: float | None
    exit_code: int | None

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> list[int]:
        raise NotImplementedError

    def _refresh(self) -> int | None:
        raise NotImplementedError

    def _log_tail(self) -> str:
        raise NotImplementedError

    def _ended(self, when: str) -> ServerFailure:
        return ServerFailure(f"server {when} with {_exit_text(self.exit_code)}{self._log_tail()}")

    def wait_ready(self) -> float:
        """Poll the readiness URL until HTTP 200; returns seconds to ready."""
        t0 = time.monotonic()
        last = "no answer"
        with httpx.Client(timeout=2.0, trust_env=False) as client:
            while True:
                if self._refresh() is not None:
                    raise self._ended("exited before ready")
                try:
                    r = client.get(self.ready_url)
                    if r.status_code == 200:
                        self.ready_s = time.monotonic() - t0
                        return self.ready_s
                    last = f"HTTP {r.status_code}"
                except httpx.HTTPError as exc:
                    last = type(exc).__name__
                if time.monotonic() - t0 > self.ready_timeout_s:
                    raise ServerFailure(f"server never ready: {self.ready_url} gave {last} for "
                                        f"{self.ready_timeout_s:g} s")
                time.sleep(0.2)

    def check_alive(self) -> None:
        """Remember the tree's PIDs; a server that has ended is a failure with its exit code."""
        if self._refresh() is not None:
            raise self._ended("died mid-run")

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


@dataclass
class ServerProcess(_Lifecycle):
    argv: list[str]
    ready_url: str
    cpus: list[int] | None = None
    env: dict[str, str] = field(default_factory=dict)
    log_path: Path | None = None
    ready_timeout_s: float = 120.0
    stop_grace_s: float = 10.0
    proc: subprocess.Popen | None = None
    ready_s: float | None = None
    pids_seen: dict[int, int] = field(default_factory=dict)  #: pid -> start time (ticks)
    exit_code: int | None = None

    def start(self) -> None:
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        try:
            self.proc = subprocess.Popen(
                self.argv, env={**os.environ, **self.env}, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=pinned(self.cpus),
            )
        except (OSError, subprocess.SubprocessError) as exc:  # bad path, or pinning refused
            raise ServerFailure(f"server command could not start: {exc} "
                                f"(argv[0] {self.argv[0]!r}, cpus {self.cpus})") from None
        finally:
            if log is not subprocess.DEVNULL:
                log.close()
        self._remember([self.proc.pid])

    def _remember(self, pids: list[int]) -> None:
        for p in pids:
            if p not in self.pids_seen and (st := _proc_stat(p)) is not None:
                self.pids_seen[p] = st[3]

    def _alive(self) -> list[int]:
        return sorted(p for p, started in self.pids_seen.items() if pid_alive(p, started))

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def _log_tail(self) -> str:
        if not self.log_path or not self.log_path.exists():
            return ""
        return _log_line(self.log_path.read_text(errors="replace"))

    def _refresh(self) -> int | None:
        self.track()
        rc = self.proc.poll() if self.proc else None
        if rc is not None:
            self.exit_code = rc
        return rc

    def track(self) -> list[int]:
        """Remember every PID of the tree, so stop() can prove none is left."""
        if self.proc is None:
            return []
        tree = descendants(self.proc.pid)
        self._remember(tree)
        return tree

    def affinity(self) -> dict[str, str]:
        """Cpus_allowed_list of every thread of the tree: the placement as it really was."""
        out = {}
        for pid in [self.pid, *self.track()]:
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tids:
                try:
                    status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
                except OSError:
                    continue
                for line in status.splitlines():
                    if line.startswith("Cpus_allowed_list:"):
                        out[f"{pid}/{tid}"] = line.split(":", 1)[1].strip()
        return out

    def stop(self) -> list[int]:
        """Stop the whole tree by PID; returns PIDs still alive afterwards (should be none)."""
        if self.proc is None:
            return []
        self.track()
        pgid = self.proc.pid  # new session: group id = leader's pid
        for sig, wait_s in ((signal.SIGTERM, self.stop_grace_s), (signal.SIGKILL, 5.0)):
            targets = self._alive()
            if not targets and self.proc.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, sig)
            for p in targets:  # descendants that left the group
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, sig)
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                if self.proc.poll() is not None and not self._alive():
                    break
                time.sleep(0.05)
        try:
            rc = self.proc.wait(timeout=5)
            if self.exit_code is None:
                self.exit_code = rc
        except subprocess.TimeoutExpired:
            pass
        return self._alive()


@dataclass
class RemoteServer(_Lifecycle):
    """The same lifecycle on an SSH host, through its executor's agent (``_runwrap.py``).

    The agent starts the server in its own session pinned to ``cpus``, reports its tree and
    thread affinity from the host's /proc, and stops the group and every descendant by PID; an
    agent that loses the orchestrator kills what it started. Readiness is polled from here.
    """

    ex: Any  #: socketlab.execute.ssh.SshExecutor
    argv: list[str]
    ready_url: str
    remote_log: str  #: the server's output on the host, fetched to ``log_path`` by stop()
    cpus: list[int] | None = None
    env: dict[str, str] = field(default_factory=dict)
    log_path: Path | None = None
    ready_timeout_s: float = 120.0
    stop_grace_s: float = 10.0
    root: int | None = None
    ready_s: float | None = None
    pids_seen: dict[int, int] = field(default_factory=dict)  #: pid -> 0 (start ticks: host's)
    exit_code: int | None = None

    def start(self) -> None:
        from socketlab.errors import HostError

        try:
            self.root = self.ex.spawn(self.argv, env=self.env, cpus=self.cpus, log=self.remote_log)
        except HostError as exc:
            raise ServerFailure(f"server command could not start on {self.ex.name}: {exc} "
                                f"(cpus {self.cpus})") from None
        self._remember([self.root])

    @property
    def pid(self) -> int:
        assert self.root is not None
        return self.root

    def _remember(self, pids: list[int]) -> None:
        for p in pids:
            self.pids_seen.setdefault(p, 0)

    def _state(self) -> dict:
        state = self.ex.tree(self.pid)
        self._remember(state["seen"])
        if state["exit_code"] is not None:
            self.exit_code = state["exit_code"]
        return state

    def _log_tail(self) -> str:
        code, text = self.ex.call(["tail", "-n", "3", self.remote_log], timeout=10)
        return _log_line(text) if code == 0 else ""

    def _refresh(self) -> int | None:
        return self._state()["exit_code"]

    def track(self) -> list[int]:
        return self._state()["pids"] if self.root is not None else []

    def affinity(self) -> dict[str, str]:
        return self._state()["affinity"]

    def stop(self) -> list[int]:
        """Stop the tree by PID on the host; returns PIDs still alive there (should be none)."""
        if self.root is None:
            return []
        reply = self.ex.stop_spawned(self.root, self.stop_grace_s)
        self._remember(reply["seen"])
        if self.exit_code is None:
            self.exit_code = reply["exit_code"]
        if self.log_path is not None:
            with contextlib.suppress(Exception):  # the log is a convenience, the stop is not
                self.ex.get(self.remote_log, self.log_path)
        return reply["left"]
