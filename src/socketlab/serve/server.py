"""Server lifecycle: start pinned in its own process group, wait for readiness, always stop.

The server runs on its host through the executor's agent (``collectors/_runwrap.py``; over a
pipe for this machine, over SSH for others): started in its own session pinned to the
placement's CPUs (inherited by every thread and child), its tree and thread affinity read from
the host's /proc, stopped through its group and every descendant by PID (a child that called
setsid leaves the group), SIGTERM then SIGKILL; an agent that loses the orchestrator kills what
it started. Failures are ``ServerFailure`` with a one-line reason: never ready, exited before
ready, died mid-run with its exit code. Readiness is polled from here.
"""

from __future__ import annotations

import contextlib
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from socketlab.errors import HostError


class ServerFailure(Exception):
    """The server under test failed; the message is the reason that gets recorded."""


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


@dataclass
class Server:
    ex: Any  #: socketlab.execute.Executor
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
    pids_seen: dict[int, int] = field(default_factory=dict)  #: pid -> start ticks (host's)
    exit_code: int | None = None
    peak_rss_kib: int = 0  #: the most the tree's peak resident sets summed to when looked at

    def start(self) -> None:
        try:
            self.root = self.ex.spawn(self.argv, env=self.env, cpus=self.cpus, log=self.remote_log)
        except HostError as exc:  # bad path, or pinning refused
            raise ServerFailure(
                f"server command could not start: {exc} (argv[0] "
                f"{self.argv[0]!r} on {self.ex.name}, cpus {self.cpus})"
            ) from None

    @property
    def pid(self) -> int:
        assert self.root is not None
        return self.root

    def _state(self) -> dict:
        state = self.ex.tree(self.pid)
        self.pids_seen.update(zip(state["seen"], state["ticks"], strict=True))
        self.peak_rss_kib = max(self.peak_rss_kib, state["peak_rss_kib"])
        if state["exit_code"] is not None:
            self.exit_code = state["exit_code"]
        return state

    def _ended(self, when: str) -> ServerFailure:
        code, text = self.ex.call(["tail", "-n", "3", self.remote_log], timeout=10)
        log = _log_line(text) if code == 0 else ""
        return ServerFailure(f"server {when} with {_exit_text(self.exit_code)}{log}")

    def wait_ready(self) -> float:
        """Poll the readiness URL until HTTP 200; returns seconds to ready."""
        t0 = time.monotonic()
        last = "no answer"
        with httpx.Client(timeout=2.0, trust_env=False) as client:
            while True:
                if self._state()["exit_code"] is not None:
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
                    raise ServerFailure(
                        f"server never ready: {self.ready_url} gave {last} for "
                        f"{self.ready_timeout_s:g} s"
                    )
                time.sleep(0.2)

    def check_alive(self) -> None:
        """Remember the tree's PIDs; a server that has ended is a failure with its exit code."""
        if self._state()["exit_code"] is not None:
            raise self._ended("died mid-run")

    def track(self) -> list[int]:
        """Remember every PID of the tree, so stop() can prove none is left."""
        return self._state()["pids"] if self.root is not None else []

    def affinity(self) -> dict[str, str]:
        """Cpus_allowed_list of every thread of the tree: the placement as it really was."""
        return self._state()["affinity"]

    def stop(self) -> list[int]:
        """Stop the tree by PID on the host; returns PIDs still alive there (should be none)."""
        if self.root is None:
            return []
        reply = self.ex.stop_spawned(self.root, self.stop_grace_s)
        self.pids_seen.update(zip(reply["seen"], reply["ticks"], strict=True))
        if self.exit_code is None:
            self.exit_code = reply["exit_code"]
        if self.log_path is not None:
            with contextlib.suppress(Exception):  # the log is a convenience, the stop is not
                self.ex.get(self.remote_log, self.log_path)
        return reply["left"]
