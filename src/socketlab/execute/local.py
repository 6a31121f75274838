"""Run on this machine, no SSH: the executor for ``connection: local`` inventory hosts."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from socketlab.execute import DEFAULT_WORKROOT, Executor, HostBusy, Result

# If the orchestrator dies (SIGKILL), its commands must not run on unattended: setpriv gives
# the child a parent-death signal without a preexec_fn (unsafe with our host threads).
_SETPRIV = shutil.which("setpriv")


class LocalExecutor(Executor):
    def __init__(self, name: str = "localhost", *, workroot: str = DEFAULT_WORKROOT,
                 python: str | None = None) -> None:  # fmt: skip
        self.name = name
        self.python = python or "python3"
        self.workdir = f"{workroot}/{name}"
        import pwd

        self.run_as = pwd.getpwuid(os.geteuid()).pw_name  # recorded with each run
        self._lock_fh = None

    def connect(self) -> None:
        Path(self.workdir).mkdir(parents=True, exist_ok=True)

    def close(self) -> None:
        self.unlock()

    def run(self, argv, env=None, cwd=None, timeout=None, cpus=None, *, out_dir=None,
            pidfile=None) -> Result:  # fmt: skip
        prefix: list[str] = []
        if _SETPRIV:
            prefix += [_SETPRIV, "--pdeathsig", "KILL", "--"]
        if cpus:
            prefix += ["taskset", "-c", cpus]
        environ = dict(os.environ)
        environ.update(env or {})
        started = time.time()
        t0 = time.perf_counter()
        try:
            proc = subprocess.Popen(
                [*prefix, *argv], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, cwd=cwd or None, env=environ, start_new_session=True,
            )  # fmt: skip
        except OSError as exc:
            return Result(127, "", f"cannot start {argv[0]}: {exc}", 0.0, started=started)
        if pidfile:
            Path(pidfile).write_text(f"{proc.pid}\n")
        timed_out = False
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            # start_new_session made the child a group leader: kill the group by its PID.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            try:
                out, err = proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:  # a process outside the group holds the pipes
                proc.kill()
                out, err = b"", b""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # leftovers of the group hold cores
        duration = time.perf_counter() - t0
        # taskset/setpriv exec into the command: a failed exec shows as their exit code.
        return Result(
            proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"),
            duration, timed_out, started, proc.pid,
        )  # fmt: skip

    def call(self, argv: list[str], timeout: float = 120.0) -> tuple[int, str]:
        try:
            proc = subprocess.run(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, timeout=timeout,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return 124, f"{argv[0]}: no answer in {timeout:g} s"
        except OSError as exc:
            return 127, f"cannot start {argv[0]}: {exc}"
        return proc.returncode, proc.stdout.decode("utf-8", "replace")

    def put(self, local, remote: str) -> None:
        Path(remote).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(local, remote)

    def get(self, remote: str, local) -> None:
        Path(local).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(remote, local)

    def lock(self, info: dict) -> None:
        path = Path(self.workdir) / "host.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(path, "a+")  # noqa: SIM115 - held until unlock()
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip()
            fh.close()
            raise HostBusy(f"{self.name}: host is busy, locked by another orchestrator "
                           f"({holder or 'unknown holder'}; lock file {path})") from None  # fmt: skip
        fh.seek(0)
        fh.truncate()
        fh.write(json.dumps({**info, "pid": os.getpid(), "since": time.time()}))
        fh.flush()
        self._lock_fh = fh

    def unlock(self) -> None:
        if self._lock_fh is not None:
            self._lock_fh.close()  # closing the descriptor drops the flock
            self._lock_fh = None
