"""Run on a host over SSH: one fabric connection per host, reused for every run.

Every exec over SSH goes through the login shell and its rc files (over 100 ms of CPU per
command on hosts with pyenv or conda hooks). So a host is opened with one exec: collectors/
_boot.py, sent as the command, checks sudo where asked, installs the tools (only when the host's
copy differs), reads the host's facts where asked, and becomes the agent (``collectors/
_runwrap.py``) on that same channel, which then takes one JSON request per run, lock, fingerprint
or folder. No user-written string is ever parsed by the remote shell; the agent runs each
command in its own process group and kills that group by PID at the timeout. The agent also
holds the host's lock, and exits when our heartbeats stop (one thread beats for every host), so
a vanished orchestrator frees the host. The socket has TCP keepalive and a user timeout: a host
that vanishes mid-run is noticed in seconds, not after the kernel's default of minutes. The
connection is made as the user's ssh would make it: ~/.ssh/config, the ssh-agent, ProxyJump
(socketlab.execute.sshconfig).
"""

from __future__ import annotations

import contextlib
import json
import shlex
import threading
import time

import paramiko

from socketlab import paths
from socketlab.cpulist import parse_cpulist
from socketlab.errors import HostError
from socketlab.execute import sshconfig
from socketlab.execute.base import (
    Executor,
    HostBusy,
    HostUnreachable,
    Result,
    become_requested,
    default_workroot,
    tools_bundle,
)
from socketlab.safepath import inside

#: Seconds a run may overrun its own timeout before we stop waiting for the agent's reply.
GRACE_S = 15.0
#: Heartbeat period, and how long the agent waits without one before it gives up on us.
HEARTBEAT_S = 2.0
AGENT_IDLE_S = 10.0
_NET_ERRORS = (OSError, EOFError, paramiko.SSHException)


class _Heartbeats:
    """One thread sends every agent of this process its heartbeat (an empty line): a thread per
    host would add one thread per host to a campaign over many hosts."""

    def __init__(self) -> None:
        self.agents: set[_Agent] = set()
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None

    def add(self, agent: _Agent) -> None:
        with self.lock:
            self.agents.add(agent)
            if self.thread is None:
                self.thread = threading.Thread(
                    target=self._run, name="agent-heartbeats", daemon=True
                )
                self.thread.start()

    def discard(self, agent: _Agent) -> None:
        with self.lock:
            self.agents.discard(agent)

    def _run(self) -> None:
        while True:
            time.sleep(HEARTBEAT_S)
            with self.lock:
                if not self.agents:  # none left: the next agent starts a thread again
                    self.thread = None
                    return
                agents = list(self.agents)
            for agent in agents:
                agent.beat()


_HEARTBEATS = _Heartbeats()


class _Agent:
    """The channel to one running agent (``_runwrap.py``)."""

    def __init__(self, chan, name: str) -> None:
        self.chan = chan
        self.name = name
        self.buffer = b""
        self.send_lock = threading.Lock()

    def beat(self) -> None:
        # never wait for a send in progress (a request or an upload): it shows we are here, and
        # the one heartbeat thread must not stall behind one host
        if not self.send_lock.acquire(blocking=False):
            return
        try:
            self.chan.sendall(b"\n")
        except Exception:  # noqa: BLE001 - a dead channel shows up in the next request
            _HEARTBEATS.discard(self)
        finally:
            self.send_lock.release()

    def send(self, data: dict) -> None:
        self.send_bytes(json.dumps(data).encode() + b"\n")

    def send_bytes(self, data: bytes) -> None:
        with self.send_lock:
            self.chan.sendall(data)

    def readline(self, deadline: float) -> bytes:
        while b"\n" not in self.buffer:
            self.chan.settimeout(max(0.01, deadline - time.monotonic()))
            data = self.chan.recv(1 << 20)
            if not data:
                raise EOFError("agent channel closed")
            self.buffer += data
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line

    def stderr_tail(self) -> str:
        """The last line the command wrote on stderr (why it ended before it said anything)."""
        data = b""
        with contextlib.suppress(Exception):
            self.chan.settimeout(2.0)
            while chunk := self.chan.recv_stderr(1 << 16):
                data += chunk
        lines = [ln for ln in data.decode("utf-8", "replace").splitlines() if ln.strip()]
        return lines[-1].strip() if lines else ""

    def close(self) -> None:
        _HEARTBEATS.discard(self)
        with contextlib.suppress(Exception):
            self.chan.shutdown_write()  # EOF: the agent exits and drops the lock
        with contextlib.suppress(Exception):
            self.chan.close()


class BecomeRefused(HostError):
    """socketlab_become is set and `sudo -n` fails for the login user (nothing was written)."""


#: how long opening a host may take (login, sudo check, tools, facts, the agent's start)
BOOT_S = 60.0


#: what the boot runs in memory to read the facts (nothing is copied for them)
SCRIPT_FACTS = paths.COLLECTORS / "host_facts.py"


def _boot_source() -> str:
    return (paths.COLLECTORS / "_boot.py").read_text()


class SshExecutor(Executor):
    def __init__(self, host, *, workroot: str | None = None, connect_timeout: float = 8.0) -> None:
        self.host = host
        self.name = host.name
        self.python = host.python or "python3"
        self.workdir = inside(workroot or default_workroot(), host.name, what="host name")
        self.address = host.address
        # socketlab_become: the agent (and so every command of the campaign) runs as root through
        # `sudo -n`, for the collectors that read MSR, RAPL and perf counters; explicit per host
        # (the generated cloud inventory sets it for a non-root login), recorded as run_as.
        self.become = become_requested(getattr(host, "vars", None))
        self.run_as = "root" if self.become else (host.user or "")
        self._puts = 0
        self.connect_timeout = connect_timeout
        self._conn = None
        self._dest = ""  #: host:port (and gateway) the connection really goes to
        self._agent: _Agent | None = None
        self._waiting: _Agent | None = None  #: a boot that read the facts, until install_tools
        self._request_lock = threading.Lock()
        self._stops: set[str] = set()  #: interrupt()'s pidfiles: a later agent must know too

    # -- connection --------------------------------------------------------------------------

    @property
    def _where(self) -> str:
        return self._dest or f"{self.host.address}:{self.host.port or 22}"

    def connect(self) -> None:
        self.close()
        try:
            conn = sshconfig.connection(
                self.host.address,
                user=self.host.user,
                port=self.host.port,
                key_file=self.host.key_file,
                common_args=self.host.ssh_common_args,
                connect_timeout=self.connect_timeout,
            )
            # what ~/.ssh/config made of the inventory's address, for every message after this
            self._dest = f"{conn.host}:{conn.port}" + (
                f" via {sshconfig.describe_gateway(conn)}" if conn.gateway else ""
            )
            sshconfig.open_connection(conn, self.connect_timeout)
        except _NET_ERRORS as exc:
            raise HostUnreachable(
                f"{self.name}: cannot connect to {self._where}: {exc or type(exc).__name__}"
            ) from None
        self._conn = conn

    def close(self) -> None:
        self._stop_agent()
        if self._conn is not None:
            with contextlib.suppress(Exception):  # closing a dead connection may raise anything
                self._conn.close()
            self._conn = None

    def _transport(self):
        transport = self._conn.client.get_transport() if self._conn else None
        if transport is None or not transport.is_active():
            raise HostUnreachable(f"{self.name}: connection to {self._where} is lost")
        return transport

    def _lost(self, exc: BaseException, what: str) -> HostUnreachable:
        return HostUnreachable(
            f"{self.name}: {what} {self._where} failed: {exc or type(exc).__name__}"
        )

    def _exec(self, command: str, deadline_s: float) -> tuple[int, bytes]:
        """One command line on its own exec channel (login shell); stdout+stderr merged."""
        end = time.monotonic() + deadline_s
        chan = None
        try:
            chan = self._transport().open_session(timeout=self.connect_timeout)
            chan.set_combine_stderr(True)
            chan.exec_command(command)
            out = bytearray()
            while True:
                chan.settimeout(max(0.01, end - time.monotonic()))
                data = chan.recv(1 << 16)
                if not data:
                    break
                out += data
            if not chan.status_event.wait(max(0.01, end - time.monotonic())):
                raise TimeoutError("no exit status")
            return chan.recv_exit_status(), bytes(out)
        except TimeoutError:
            raise HostUnreachable(
                f"{self.name}: no reply from {self._where} within {deadline_s:g} s"
            ) from None
        except _NET_ERRORS as exc:
            raise self._lost(exc, "command on") from None
        finally:
            if chan is not None:
                with contextlib.suppress(Exception):
                    chan.close()

    # -- the agent ---------------------------------------------------------------------------

    def read_facts(self, state_dir: str | None = None) -> dict:
        """The host's facts (collectors/host_facts.py's snapshot, read as the login user) in
        the session that will install the tools and start the agent (collectors/_boot.py),
        which waits for ``install_tools`` until then; nothing is written on the host before.
        BecomeRefused where socketlab_become is set and `sudo -n` fails."""
        with self._request_lock:
            self._stop_agent()
            source = SCRIPT_FACTS.read_bytes()
            boot = self._boot(["--facts", *(["--state-dir", state_dir] if state_dir else [])])
            try:
                boot.send_bytes(f"{len(source)}\n".encode() + source)
                facts = self._boot_reply(boot, time.monotonic() + BOOT_S)["facts"]
            except BaseException as exc:
                boot.close()
                raise self._boot_error(exc) from None
            self._waiting = boot
            return facts

    def install_tools(self, scratch=None) -> None:
        """Install the tools where the host's copy differs and start the agent, in the session
        ``read_facts`` opened or in a new one: one exec (collectors/_boot.py). ``scratch`` is
        not needed: the tools go as one tar on the channel."""
        with self._request_lock:
            self._start_agent()

    def _start_agent(self) -> None:
        boot, self._waiting = self._waiting, None
        self._stop_agent()
        if boot is not None:
            with contextlib.suppress(*_NET_ERRORS):  # a dead channel shows in the reply
                boot.send_bytes(b"go\n")
        else:
            boot = self._boot([])
        bundle = tools_bundle()
        deadline = time.monotonic() + BOOT_S
        try:
            if self._boot_reply(boot, deadline).get("boot") == "need":
                boot.send_bytes(f"{len(bundle.tar)}\n".encode() + bundle.tar)
            hello = self._boot_reply(boot, deadline)
            if not hello.get("ready"):
                raise HostUnreachable(f"{self.name}: agent did not start: {hello!r}")
        except BaseException as exc:
            boot.close()
            raise self._boot_error(exc) from None
        _HEARTBEATS.add(boot)
        self._agent = boot

    def _boot(self, options: list[str]) -> _Agent:
        """collectors/_boot.py started on a channel of its own (the login shell's one exec)."""
        command = [
            self.python,
            "-I",
            "-S",
            "-c",
            _boot_source(),
            self.tools,
            tools_bundle().sha256,
            "--idle",
            str(AGENT_IDLE_S),
            *options,
        ]
        if self.become:
            command.append("--become")
        try:
            chan = self._transport().open_session(timeout=self.connect_timeout)
            chan.exec_command(shlex.join(command))
        except _NET_ERRORS as exc:
            raise self._lost(exc, "starting the agent on") from None
        return _Agent(chan, self.name)

    def _boot_error(self, exc: BaseException) -> BaseException:
        if isinstance(exc, (TimeoutError, *_NET_ERRORS)):
            return self._lost(exc, "starting the agent on")
        return exc

    def _boot_reply(self, agent: _Agent, deadline: float) -> dict:
        """The boot's or agent's next line; HostError saying why when there is none."""
        try:
            line = agent.readline(deadline)
        except EOFError:
            line = b""
        try:
            reply = json.loads(line) if line else None
        except ValueError:
            reply = None
        if isinstance(reply, dict) and reply.get("boot") == "become-refused":
            raise BecomeRefused(f"{self.name}: sudo -n refused")
        if isinstance(reply, dict) and "error" in reply:
            raise HostError(f"{self.name}: {reply['error']}")
        if not isinstance(reply, dict):
            hint = (
                " (socketlab_become: the login user needs passwordless sudo; "
                "roles/host_packages does not grant it)"
                if self.become
                else ""
            )
            said = agent.stderr_tail() or line[:200].decode("utf-8", "replace") or "no output"
            raise HostUnreachable(f"{self.name}: agent did not start: {said}{hint}")
        return reply

    def _stop_agent(self) -> None:
        for agent in (self._agent, self._waiting):
            if agent is not None:
                agent.close()
        self._agent = self._waiting = None

    def _request(self, request: dict, deadline_s: float) -> dict:
        with self._request_lock:
            if self._agent is None:
                self._start_agent()
            agent = self._agent
            try:
                agent.send(request)
                line = agent.readline(time.monotonic() + deadline_s)
                return json.loads(line)
            except TimeoutError:
                self._stop_agent()
                raise HostUnreachable(
                    f"{self.name}: no reply from {self._where} within {deadline_s:g} s"
                ) from None
            except (ValueError, *_NET_ERRORS) as exc:
                self._stop_agent()
                raise self._lost(exc, "connection to") from None

    # -- the interface -------------------------------------------------------------------------

    def run(
        self, argv, env=None, cwd=None, timeout=None, cpus=None, *, out_dir=None, pidfile=None
    ) -> Result:
        if pidfile is not None and pidfile in self._stops:  # e.g. an agent started after it
            return Result(None, "", "interrupted before it started", 0.0, started=time.time())
        request = {
            "op": "run",
            "argv": list(argv),
            "env": dict(env or {}),
            "cwd": cwd,
            "timeout": timeout,
            "cpus": parse_cpulist(cpus) if cpus else None,
            "pidfile": pidfile,
            "out_dir": out_dir or f"{self.workdir}/scratch",
        }
        reply = self._request(request, (timeout or 24 * 3600) + GRACE_S)
        return Result(
            reply["exit_code"],
            reply["stdout"],
            reply["stderr"],
            reply["duration_s"],
            reply["timed_out"],
            reply["started"],
            reply["pgid"],
        )

    def interrupt(self, pidfile: str) -> None:
        """Sent beside the run in flight (whose reply holds the request lock): the agent kills
        the run's group at once, or refuses the run if it has not come yet."""
        self._stops.add(pidfile)
        agent = self._agent
        if agent is not None:
            with contextlib.suppress(*_NET_ERRORS):  # a lost host has no run left to stop
                agent.send({"op": "interrupt", "pidfile": pidfile})

    def call(self, argv: list[str], timeout: float = 120.0) -> tuple[int, str]:
        if self._agent is None:  # before the tools are installed: plain exec
            code, out = self._exec(shlex.join(argv), timeout)
            return code, out.decode("utf-8", "replace")
        request = {
            "op": "call",
            "argv": list(argv),
            "timeout": timeout,
            "out_dir": f"{self.workdir}/scratch/call",
        }
        reply = self._request(request, timeout + GRACE_S)
        if reply["timed_out"]:
            return 124, reply["stdout"] + f"\n{argv[0]}: no answer in {timeout:g} s"
        return reply["exit_code"], reply["stdout"]

    def put(self, local, remote: str) -> None:
        if self.become and self._agent is not None:
            # folders the root agent made are not the login user's: copy beside, then move
            self._puts += 1
            staged = f"/tmp/.socketlab-put-{self.name}-{self._puts}"
            self._put_plain(local, staged)
            self.check(["mv", "-f", staged, remote], what="moving an upload into place")
            return
        self._put_plain(local, remote)

    def _put_plain(self, local, remote: str) -> None:
        try:
            self._transport()
            self._conn.put(str(local), remote)
        except _NET_ERRORS as exc:
            raise self._lost(exc, f"copy of {local} to") from None

    def get(self, remote: str, local) -> None:
        try:
            self._transport()
            self._conn.get(remote, str(local))
        except _NET_ERRORS as exc:
            raise self._lost(exc, f"copy of {remote} from") from None

    def lock(self, info: dict) -> None:
        """The agent takes flock(<workdir>/host.lock) and holds it for as long as it serves us."""
        path = f"{self.workdir}/host.lock"
        reply = self._request({"op": "lock", "path": path, "info": info}, 30.0)
        if not reply.get("locked"):
            raise HostBusy(
                f"{self.name}: host is busy, locked by another orchestrator "
                f"({reply.get('holder') or 'unknown holder'}; lock file {path})",
                str(reply.get("holder") or ""),
            )

    def unlock(self) -> None:
        with self._request_lock:
            self._stop_agent()
