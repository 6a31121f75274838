"""Processes, one way for this machine and for hosts: stdlib only, Python 3.9.

The orchestrator imports this file as ``socketlab.execute.process``; ``install_tools`` ships it
to each host with the collectors for the agent (``_runwrap.py``), so both sides start, time
out, track and stop processes with the same code. Every process starts in its own session
(its PID is its group id) under ``setpriv --pdeathsig KILL`` and ``taskset`` (no
``preexec_fn``: unsafe with the orchestrator's threads), so it dies with the thread that
started it; the agent (here and on hosts) is handed every group and spawned tree, and kills
them when its controller goes away (``Spawned.stop_all``), children included.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time

#: Output beyond this is cut from a reply (the full files stay on the host).
MAX_INLINE = 32 * 1024 * 1024
_SETPRIV = shutil.which("setpriv")


def argv_for(argv: list, cpus=None) -> list:
    """argv under the parent-death signal and pinned to ``cpus`` (list or CPU-list text)."""
    prefix = [_SETPRIV, "--pdeathsig", "KILL", "--"] if _SETPRIV else []
    if cpus:
        text = cpus if isinstance(cpus, str) else ",".join(str(c) for c in cpus)
        prefix += ["taskset", "-c", text]
    return prefix + list(argv)


def start(argv: list, *, env=None, cwd=None, cpus=None, stdout=None, stderr=None):
    """Popen of argv in its own session; OSError when argv[0] or cwd can't be used (setpriv
    and taskset exec into the command, so its own exec error would only be an exit code)."""
    environ = dict(os.environ)
    environ.update(env or {})
    if cwd and not os.path.isdir(cwd):
        raise OSError(errno.ENOENT, os.strerror(errno.ENOENT), cwd)
    exe = argv[0] if "/" in argv[0] else shutil.which(argv[0], path=environ.get("PATH"))
    path = os.path.join(cwd or "", exe) if exe else None
    if path is None or not os.access(path, os.X_OK):
        code = errno.EACCES if path and os.path.exists(path) else errno.ENOENT
        raise OSError(code, os.strerror(code), argv[0])
    return subprocess.Popen(
        argv_for(argv, cpus),
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        cwd=cwd or None,
        env=environ,
        start_new_session=True,
    )


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def wait(child, timeout=None, watch=None, tick=None):
    """(exit code, timed out): wait for ``child``, killing its group by its PID at the timeout.

    ``watch`` (an fd) and ``tick(seconds)``: the agent's channel, checked while waiting; an
    exception from ``tick`` kills the group and propagates.
    """
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
                kill_group(child.pid)
                return child.wait(), True
            slice_s = 1.0 if deadline is None else min(1.0, deadline - now)
            fds = [fd for fd in (pidfd, watch) if fd is not None]
            if pidfd is not None:  # wake on the child's exit or on the watched fd
                ready = select.select(fds, [], [], slice_s)[0]
                if tick is not None and (watch in ready or not ready):
                    tick(0)
            elif tick is not None:
                tick(min(slice_s, 0.005))
            else:
                time.sleep(min(slice_s, 0.005))
    except BaseException:
        kill_group(child.pid)
        child.wait()
        raise
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _read(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            return fh.read(MAX_INLINE).decode("utf-8", errors="replace")
    except OSError:
        return ""


def run(
    argv,
    *,
    env=None,
    cwd=None,
    cpus=None,
    timeout=None,
    out_dir=None,
    pidfile=None,
    merged=False,
    watch=None,
    tick=None,
    started_hook=None,
) -> dict:
    """Run argv to its end (own group, killed at the timeout, leftovers killed after); output in
    ``out_dir``/stdout and stderr (a temporary folder without it). Returns the result fields.
    ``started_hook(pid)``: told the PID (= group id) once it runs."""
    with contextlib.ExitStack() as stack:
        if not out_dir:
            out_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="slab-run-"))
        os.makedirs(out_dir, exist_ok=True)
        out_path, err_path = os.path.join(out_dir, "stdout"), os.path.join(out_dir, "stderr")
        started, t0 = time.time(), time.perf_counter()
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            try:
                child = start(
                    argv, env=env, cwd=cwd, cpus=cpus, stdout=out, stderr=out if merged else err
                )
            except (OSError, subprocess.SubprocessError) as exc:
                return {
                    "exit_code": 127,
                    "timed_out": False,
                    "started": started,
                    "duration_s": 0.0,
                    "pgid": None,
                    "stdout": "",
                    "stderr": f"cannot start {argv[0]}: {exc}",
                }
            if pidfile:
                with open(pidfile, "w") as fh:
                    fh.write(f"{child.pid}\n")
            if started_hook is not None:
                started_hook(child.pid)
            code, timed_out = wait(child, timeout, watch, tick)
            kill_group(child.pid)  # members that outlive the leader would hold the cores
        return {
            "exit_code": code,
            "timed_out": timed_out,
            "started": started,
            "duration_s": time.perf_counter() - t0,
            "pgid": child.pid,
            "stdout": _read(out_path),
            "stderr": "" if merged else _read(err_path),
        }


# -- the process tree, from /proc ------------------------------------------------------------


def proc_stat(pid: int):
    """(state, ppid, pgid, start time in ticks) of a process, or None when it is gone."""
    raw = _read(f"/proc/{pid}/stat")
    if not raw:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    return fields[0], int(fields[1]), int(fields[2]), int(fields[19])


def pid_alive(pid: int, started=None) -> bool:
    """Alive and not a zombie; with ``started``, also the same process (not a reused PID)."""
    st = proc_stat(pid)
    return st is not None and st[0] not in "ZX" and (started is None or st[3] == started)


def descendants(root: int) -> list:
    """Live processes below ``root`` by parent links, plus the members of its group."""
    children, group = {}, []
    for name in os.listdir("/proc"):
        if name.isdigit() and (st := proc_stat(int(name))) is not None and st[0] not in "ZX":
            children.setdefault(st[1], []).append(int(name))
            if st[2] == root:
                group.append(int(name))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return sorted((set(out) | set(group)) - {root})


def affinity(pids) -> dict:
    """ "pid/tid" -> Cpus_allowed_list of every thread of ``pids``."""
    out = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            for line in _read(f"/proc/{pid}/task/{tid}/status").splitlines():
                if line.startswith("Cpus_allowed_list:"):
                    out[f"{pid}/{tid}"] = line.split(":", 1)[1].strip()
    return out


def _held(pid: int, started: int) -> bool:
    """The process is alive, or its group still has members."""
    try:
        os.killpg(pid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return pid_alive(pid, started)


def peak_rss_kib(pids) -> int:
    """Sum of each process's peak resident set (VmHWM): the tree's peak memory, at most."""
    total = 0
    for pid in pids:
        for line in _read(f"/proc/{pid}/status").splitlines():
            if line.startswith("VmHWM:"):
                total += int(line.split()[1])
    return total


class Spawned:
    """Long-lived processes (a server, its sampler) started to poll, signal and reap by PID;
    ``watch`` adopts a process started elsewhere (a collector daemon, a local run's group) for
    ``stop_all``."""

    def __init__(self) -> None:
        self.children = {}  #: root PID -> Popen
        self.seen = {}  #: root -> {pid: start ticks}
        self.watched = {}  #: pid -> start ticks

    def spawn(self, request: dict) -> dict:
        log = request.get("log") or os.devnull
        os.makedirs(os.path.dirname(log) or ".", exist_ok=True)
        with open(log, "ab") as out:
            try:
                child = start(
                    request["argv"],
                    env=request.get("env"),
                    cwd=request.get("cwd"),
                    cpus=request.get("cpus"),
                    stdout=out,
                    stderr=out,
                )
            except (OSError, subprocess.SubprocessError) as exc:
                return {"error": str(exc)}
        self.children[child.pid] = child
        self.seen[child.pid] = {}
        self._remember(child.pid, [child.pid])
        return {"pid": child.pid}

    def watch(self, request: dict) -> dict:
        pid = int(request["pid"])
        self.watched = {p: t for p, t in self.watched.items() if _held(p, t)}
        st = proc_stat(pid)
        if st is not None:
            self.watched[pid] = st[3]
        return {"watched": sorted(self.watched)}

    def _remember(self, root: int, pids) -> None:
        for pid in pids:
            if pid not in self.seen[root] and (st := proc_stat(pid)) is not None:
                self.seen[root][pid] = st[3]

    def _alive(self, root: int) -> list:
        return sorted(p for p, t in self.seen.get(root, {}).items() if pid_alive(p, t))

    def _seen(self, root: int) -> dict:
        """Every PID its tree had, and their start ticks in the same order."""
        pids = sorted(self.seen[root])
        return {"seen": pids, "ticks": [self.seen[root][p] for p in pids]}

    def _child(self, request: dict):
        root = int(request["pid"])
        child = self.children.get(root)
        return root, child, None if child else {"error": f"PID {root} was not spawned here"}

    def tree(self, request: dict) -> dict:
        """Whether it still runs (its exit code once not), the PIDs below it, thread affinity."""
        root, child, error = self._child(request)
        if error:
            return error
        below = descendants(root)
        self._remember(root, below)
        return {
            "exit_code": child.poll(),
            "pids": below,
            "affinity": affinity([root, *below]),
            "peak_rss_kib": peak_rss_kib([root, *below]),
            **self._seen(root),
        }

    def stop(self, request: dict) -> dict:
        """Signal its group and every descendant by PID, SIGTERM then SIGKILL after ``grace``;
        reply with the PIDs still alive (should be none)."""
        root, child, error = self._child(request)
        if error:
            return error
        self._remember(root, descendants(root))
        grace = float(request.get("grace", 10.0))
        for sig, wait_s in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            targets = self._alive(root)
            if not targets and child.poll() is not None or wait_s <= 0:
                continue
            kill_group(root, sig)
            for pid in targets:  # descendants that left the group
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline and (child.poll() is None or self._alive(root)):
                time.sleep(0.05)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=5)
        del self.children[root]
        return {"exit_code": child.returncode, "left": self._alive(root), **self._seen(root)}

    def stop_all(self, grace: float = 0.0) -> None:
        """Everything spawned or watched: the controller is gone, so at once by default."""
        for root in list(self.children):
            self.stop({"pid": root, "grace": grace})
        for pid, started in self.watched.items():
            targets = [pid, *descendants(pid)] if pid_alive(pid, started) else []
            kill_group(pid)  # a group id is not reused while the group has members
            for target in targets:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(target, signal.SIGKILL)
        self.watched = {}


def take_lock(path: str, info: dict):
    """(held file, None) with flock(path) taken and ``info`` written in it, or (None, holder)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fh = open(path, "a+")  # noqa: SIM115 - held until closed
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.seek(0)
        holder = fh.read().strip()
        fh.close()
        return None, holder
    fh.seek(0)
    fh.truncate()
    fh.write(json.dumps({**info, "pid": os.getpid(), "since": time.time()}))
    fh.flush()
    return fh, None
