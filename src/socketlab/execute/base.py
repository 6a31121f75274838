"""What every executor is (``Executor``), its results and errors, the tools it sends to a host,
and the become helpers: what socketlab.execute.local and .ssh build on."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from socketlab import paths
from socketlab.errors import HostError
from socketlab.hostside import _process as process  # noqa: F401 - the executors' process module
from socketlab.safepath import inside

#: Where each host keeps the orchestrator's tools, builds and per-run scratch, keyed by
#: inventory name because network-namespace test hosts share one filesystem.
DEFAULT_WORKROOT = "/tmp/socketlab"
#: The controller's environment may move that default for every host (a host's inventory
#: variable ``socketlab_workroot`` still wins): two orchestrators on one machine, e.g. parallel
#: test workers, then keep apart build caches and host locks.
WORKROOT_ENV = "SOCKETLAB_WORKROOT"


def default_workroot() -> str:
    """DEFAULT_WORKROOT, or the absolute folder $SOCKETLAB_WORKROOT names."""
    value = os.environ.get(WORKROOT_ENV, "").strip()
    if not value:
        return DEFAULT_WORKROOT
    if not value.startswith("/"):
        raise HostError(f"${WORKROOT_ENV}: {value!r}: expected an absolute folder path")
    return value


class HostUnreachable(HostError):
    """The host can't be reached (connect failed, connection lost, no reply in time)."""


class HostBusy(HostError):
    """Another orchestrator holds the host's lock; ``holder``: what it wrote in the lock file
    (campaign, controller "machine:pid", the agent's pid, since), {} where unreadable."""

    def __init__(self, message: str, holder: str | None = None) -> None:
        super().__init__(message)
        try:
            parsed = json.loads(holder or "")
        except ValueError:
            parsed = None
        self.holder: dict = parsed if isinstance(parsed, dict) else {}


@dataclass
class Result:
    exit_code: int | None  #: None when the command never finished (connection lost)
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    started: float = 0.0  #: unix time
    pgid: int | None = None  #: the process group the command ran in (== its PID)


class Executor:
    """What the runner needs from a host. Subclasses: LocalExecutor, SshExecutor."""

    name: str
    python: str = "python3"
    workdir: str
    run_as: str = ""  #: the user the host's commands run as (provenance: who ran)
    address: str  #: where the controller reaches the host's servers
    controller = False  #: the host is this machine (the load generator's)

    def connect(self) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def close(self) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def run(
        self, argv, env=None, cwd=None, timeout=None, cpus=None, *, out_dir=None, pidfile=None
    ) -> Result:  # pragma: no cover - interface
        raise NotImplementedError

    def call(self, argv: list[str], timeout: float = 120.0) -> tuple[int, str]:
        """Run one of our own helper commands (argv made by us); return (exit code, output)."""
        raise NotImplementedError  # pragma: no cover - interface

    def put(self, local: str | Path, remote: str) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def get(self, remote: str, local: str | Path) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def lock(self, info: dict) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def unlock(self) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def _request(self, request: dict, deadline_s: float) -> dict:
        """One request to the host's agent (collectors/_runwrap.py); its JSON reply."""
        raise NotImplementedError  # pragma: no cover - interface

    # -- shared helpers built on the primitives ---------------------------------------------

    def _agent_op(self, request: dict, timeout: float = 30.0) -> dict:
        reply = self._request(request, timeout + 15.0)
        if "error" in reply:
            raise HostError(reply["error"])
        return reply

    def spawn(self, argv: list[str], *, env=None, cwd=None, cpus=None, log: str) -> int:
        """Start argv on the host in its own session, output to ``log``; returns its PID."""
        request = {
            "op": "spawn",
            "argv": list(argv),
            "env": dict(env or {}),
            "cwd": cwd,
            "cpus": list(cpus) if cpus else None,
            "log": log,
        }
        return int(self._agent_op(request)["pid"])

    def tree(self, pid: int) -> dict:
        """A spawned process: exit_code (None while it runs), pids below it, thread affinity,
        seen (every PID its tree had) and ticks (their start times, in that order)."""
        return self._agent_op({"op": "tree", "pid": pid})

    def stop_spawned(self, pid: int, grace_s: float = 10.0) -> dict:
        """Stop a spawned process's group and descendants by PID: exit_code, left, seen, ticks."""
        return self._agent_op({"op": "stop", "pid": pid, "grace": grace_s}, grace_s + 15.0)

    def interrupt(self, pidfile: str) -> None:  # pragma: no cover - interface
        """For SIGTERM/SIGINT: stop the run (or build) started with ``pidfile``, from any thread.
        In flight, its group is killed by its PID at once; one that has not started yet is
        refused when it comes (``run`` returns exit_code None, "interrupted before it
        started"), so a stop that lands before the pidfile is written still reaches it."""
        raise NotImplementedError

    def watch(self, pid: int) -> None:
        """The agent kills ``pid`` (a collector daemon) if the orchestrator goes away."""
        self._agent_op({"op": "watch", "pid": pid})

    def fingerprint(self) -> dict:
        """The host's fingerprint (collectors/fingerprint.py), read by its agent in its own
        process: no interpreter is started for it."""
        return self._host_op({"op": "fingerprint"}, "fingerprint")["fingerprint"]

    def fresh_dir(self, path: str, *subdirs: str) -> None:
        """``path`` emptied on the host (a link there removed, not followed), with subdirs."""
        self._host_op({"op": "fresh_dir", "path": path, "subdirs": list(subdirs)})

    def remove(self, path: str) -> None:
        """``path`` removed on the host, as `rm -rf` would (a cleanup: failures are ignored,
        a lost host is not)."""
        self._request({"op": "remove", "path": path}, 45.0)

    def _host_op(self, request: dict, what: str = "") -> dict:
        reply = self._request(request, 45.0)
        if "error" in reply:
            raise HostError(f"{self.name}: {what + ': ' if what else ''}{reply['error']}")
        return reply

    @property
    def tools(self) -> str:
        return f"{self.workdir}/tools"

    def tool(self, script: str, *args: str) -> list[str]:
        """argv to run one of our stdlib-only tools on the host. -I -S: no site-packages
        scan (a venv's .pth files cost 50+ ms per start), no user environment."""
        return [self.python, "-I", "-S", f"{self.tools}/{script}", *args]

    def check(self, argv: list[str], timeout: float = 120.0, what: str = "") -> str:
        code, output = self.call(argv, timeout)
        if code != 0:
            tail = output.strip().splitlines()[-5:]
            raise HostError(
                f"{self.name}: {what or argv[0]} failed (exit {code}): " + " | ".join(tail)
            )
        return output

    def send_tree(self, files: dict[str, Path], remote_dir: str, scratch: Path) -> None:
        """Copy files (name in the tree -> local path) into ``remote_dir`` as one tar."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name, path in sorted(files.items()):
                info = tar.gettarinfo(str(path), arcname=name)
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                with open(path, "rb") as fh:
                    tar.addfile(info, fh)
        scratch.mkdir(parents=True, exist_ok=True)
        local_tar = inside(scratch, f"send-{self.name}.tar", what="host name")
        local_tar.write_bytes(buf.getvalue())
        remote_tar = f"{remote_dir}.tar"
        self.check(["mkdir", "-p", remote_dir], what="mkdir")
        self.put(local_tar, remote_tar)
        self.check(["tar", "-xf", remote_tar, "-C", remote_dir], what="tar")
        self.call(["rm", "-f", remote_tar])
        local_tar.unlink(missing_ok=True)

    def fetch_tree(self, remote_dir: str, local_dir: Path) -> list[str]:
        """Copy every file of ``remote_dir`` into ``local_dir``; return the names fetched."""
        code, _ = self.call(["test", "-d", remote_dir])
        if code != 0:
            return []
        remote_tar = f"{remote_dir}.fetch.tar"
        self.check(["tar", "-cf", remote_tar, "-C", remote_dir, "."], what="tar")
        local_dir.mkdir(parents=True, exist_ok=True)
        local_tar = local_dir / ".fetch.tar"
        try:
            self.get(remote_tar, local_tar)
            with tarfile.open(local_tar) as tar:
                members = [m for m in tar.getmembers() if m.isfile()]
                tar.extractall(local_dir, members=members, filter="data")
        finally:
            local_tar.unlink(missing_ok=True)
            self.call(["rm", "-f", remote_tar])
        return sorted(m.name.removeprefix("./") for m in members)

    def install_tools(self, scratch: Path | None = None) -> None:  # pragma: no cover - interface
        """Put what runs on the host (``tool_files``: the agent, the process module,
        collectors, fingerprint, host facts, the serving sampler) in its tools folder, and
        start its agent."""
        raise NotImplementedError


def tool_files() -> dict[str, Path]:
    """name -> file of everything the runner sends to a host: collectors/*.py, the host-side
    modules (socketlab.hostside), which import nothing but the stdlib and each other."""
    return {p.name: p for p in sorted(paths.COLLECTORS.glob("*.py"))}


@dataclass(frozen=True)
class ToolsBundle:
    sha256: str  #: of the tar's content: the tools folder's version on a host
    tar: bytes


def tools_bundle() -> ToolsBundle:
    """The tools as one tar, and its digest (so a host that has them is sent nothing)."""
    files = tool_files()
    return _bundle(
        tuple((name, str(p), p.stat().st_mtime_ns, p.stat().st_size) for name, p in files.items())
    )


@cache
def _bundle(stamp: tuple) -> ToolsBundle:
    """Built once per version of the files (the stamp: names, mtimes and sizes)."""
    buf, digest = io.BytesIO(), hashlib.sha256()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, path, _, _ in stamp:
            data = Path(path).read_bytes()
            digest.update(f"{name}\0{len(data)}\0".encode() + data)
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return ToolsBundle(digest.hexdigest(), buf.getvalue())


def become_variable(hostvars: dict | None) -> str:
    """The host variable that asks for root: socketlab_become where it is set (the older switch
    decides, as in the playbooks), else Ansible's own ansible_become."""
    return "socketlab_become" if "socketlab_become" in (hostvars or {}) else "ansible_become"


def become_requested(hostvars: dict | None) -> bool:
    """That variable true (true/yes/1): run the host's agent as root via sudo."""
    value = (hostvars or {}).get(become_variable(hostvars), False)
    return value is True or str(value).lower() in ("true", "yes", "1")


#: exit status of become_preflight() where `sudo -n` is refused (facts.py looks for it)
BECOME_REFUSED = 97


def become_preflight() -> str:
    """Shell text put before a become host's fact gathering: the one check that sudo works
    without a password, so a host where it doesn't is skipped before anything is uploaded,
    built or run (the agent would otherwise fail at each point)."""
    return f"sudo -n true 2>/dev/null || exit {BECOME_REFUSED};"


def become_refused(where: str, user: str | None, variable: str = "socketlab_become") -> str:
    who = user or "the login user"
    return (
        f"{where}: {variable} is set but `sudo -n` fails for {who} (sudo asks for a "
        f"password, or is missing): give {who} passwordless sudo (a NOPASSWD rule in "
        f"/etc/sudoers.d), log in as root, or set {variable}: false"
    )
