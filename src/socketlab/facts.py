"""Gathering host facts, the one place it is done: run collectors/host_facts.py on each host
and build its topology. Two ways, the same snapshot: ``gather_all`` pipes the script to each
host (locally, or over SSH on the connection the executor makes: socketlab.execute.sshconfig),
so nothing is copied (`plan`, `hosts`, `cpuset`, `run --dry-run`); ``open_all`` opens each host
for a run in one session (connection, tools, facts, agent: socketlab.execute.ssh) and keeps it
open for the runner. Both fan out over a bounded pool of threads. The host's
``socketlab_state_dir`` (inventory var, as the playbooks use it) is passed as --state-dir, so
verify.yml's records are found where the playbooks wrote them."""

from __future__ import annotations

import json
import shlex
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import paramiko

from socketlab import paths
from socketlab.errors import HostError, SocketlabError
from socketlab.execute import (
    BECOME_REFUSED,
    Executor,
    become_preflight,
    become_refused,
    become_requested,
    become_variable,
    make_executor,
    sshconfig,
)
from socketlab.execute.ssh import BecomeRefused
from socketlab.inventory import InventoryHost
from socketlab.topology import topology_from_snapshot

SCRIPT = paths.COLLECTORS / "host_facts.py"
#: hosts gathered or opened at once: a bounded pool, so a campaign over a thousand hosts is
#: set up by this many threads (each host's wait is mostly its login and its python's start)
SETUP_WORKERS = 16


def where(host: InventoryHost) -> str:
    """How messages name a host: its inventory name and how it is reached."""
    if host.is_local:
        return f"{host.name} (local, {host.python})"
    return (
        f"{host.name} (ssh {host.user + '@' if host.user else ''}{host.address}"
        f"{':' + str(host.port) if host.port else ''})"
    )


def state_dir_of(host: InventoryHost) -> str | None:
    """The host's socketlab_state_dir, a literal path (HostError for a template)."""
    state_dir = (getattr(host, "vars", None) or {}).get("socketlab_state_dir")
    if "{{" in str(state_dir or ""):
        raise HostError(
            f"{where(host)}: socketlab_state_dir={state_dir!r} is a template; "
            "expected a literal path in the inventory (orchestrate does not render "
            "templates)"
        )
    return str(state_dir) if state_dir else None


def collect_snapshot(host: InventoryHost, timeout: float = 60) -> dict:
    """The raw host_facts.py snapshot of one host."""
    script = SCRIPT.read_text()
    state_dir = state_dir_of(host)
    options = ["--state-dir", state_dir] if state_dir else []
    if host.is_local:
        argv = [host.python, "-", *options]
    else:  # the remote shell parses the command: quote every word
        words = [shlex.quote(w) for w in (host.python, "-", *options)]
        if become_requested(getattr(host, "vars", None)):
            words.insert(0, become_preflight())  # sudo must work before anything is sent
        argv = None
    where_ = where(host)
    try:
        if argv is not None:
            proc = subprocess.run(
                argv, input=script, capture_output=True, text=True, timeout=timeout
            )
        else:  # the connection orchestrate's executor makes: ~/.ssh/config, agent, ProxyJump
            proc = subprocess.CompletedProcess(
                words,
                *sshconfig.run_once(
                    host.address,
                    " ".join(words),
                    script.encode(),
                    user=host.user,
                    port=host.port,
                    key_file=host.key_file,
                    common_args=host.ssh_common_args,
                    timeout=timeout,
                ),
            )
    except FileNotFoundError as exc:
        raise HostError(f"{where_}: cannot run {exc.filename}") from None
    except (subprocess.TimeoutExpired, TimeoutError):
        raise HostError(f"{where_}: host_facts.py gave no answer within {timeout:.0f} s") from None
    except (OSError, EOFError, paramiko.SSHException) as exc:
        raise HostError(
            f"{where_}: gathering facts failed: cannot connect: {exc or type(exc).__name__}"
        ) from None
    if proc.returncode == BECOME_REFUSED and become_requested(getattr(host, "vars", None)):
        raise HostError(become_refused(where_, host.user, become_variable(host.vars)))
    if proc.returncode != 0:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        why = lines[-1].strip() if lines else f"exit status {proc.returncode}"
        raise HostError(f"{where_}: gathering facts failed: {why}")
    try:
        return json.loads(proc.stdout)
    except ValueError:
        raise HostError(f"{where_}: host_facts.py printed no JSON object") from None


@dataclass(frozen=True)
class Opened:
    """A host opened for a run: its executor (over SSH, its session waits for the runner to
    install the tools and start the agent: socketlab.execute.ssh) and its facts, as
    ``gather_all`` gives them. Nothing is written on the host yet."""

    executor: Executor
    facts: dict[str, Any]  #: {"topology": Topology.facts(), "snapshot": host_facts.py's}


def open_host(host: InventoryHost, timeout: float = 60) -> Opened:
    """Open one host for a run. Over SSH that is the session the run goes on in: one login,
    one channel (collectors/_boot.py: sudo checked, the facts read as the login user, then,
    when the runner asks, the tools and the agent); a local host's facts are read as
    ``gather_all`` reads them."""
    state_dir = state_dir_of(host)
    if host.is_local:
        return Opened(make_executor(host), _facts(collect_snapshot(host, timeout)))
    executor = make_executor(host)
    try:
        executor.connect()
        return Opened(executor, _facts(executor.read_facts(state_dir)))
    except BecomeRefused:
        executor.close()
        raise HostError(
            become_refused(where(host), host.user, become_variable(host.vars))
        ) from None
    except HostError as exc:
        executor.close()
        why = str(exc).removeprefix(f"{host.name}: ")
        raise HostError(f"{where(host)}: gathering facts failed: {why}") from None
    except BaseException:
        executor.close()
        raise


def open_all(
    hosts: list[InventoryHost], timeout: float = 60, workers: int = SETUP_WORKERS
) -> dict[str, Opened | SocketlabError]:
    """name -> the host opened for a run (``open_host``), or its error, of many hosts over a
    bounded pool of threads. Stopped part way (SIGTERM), it closes the hosts opened so far."""
    pool = ThreadPoolExecutor(
        max_workers=max(1, min(workers, len(hosts))), thread_name_prefix="open-host"
    )

    def one(host: InventoryHost) -> Opened | SocketlabError:
        try:
            return open_host(host, timeout)
        except SocketlabError as exc:
            return exc

    futures = [pool.submit(one, host) for host in hosts]
    try:
        out = {h.name: f.result() for h, f in zip(hosts, futures, strict=True)}
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        for f in futures:
            done = f.done() and not f.cancelled() and f.exception() is None
            if done and isinstance(f.result(), Opened):
                f.result().executor.close()
        raise
    pool.shutdown()
    return out


def _facts(snapshot: dict) -> dict[str, Any]:
    return {"topology": topology_from_snapshot(snapshot).facts(), "snapshot": snapshot}


def gather_all(
    hosts: list[InventoryHost], timeout: float = 60, workers: int = SETUP_WORKERS
) -> dict[str, dict[str, Any] | SocketlabError]:
    """name -> {"topology": Topology.facts(), "snapshot": <host_facts.py output>} of many hosts
    in parallel; a host that fails maps to its error, not an exception. The only fan-out over
    hosts for facts: `hosts`, `cpuset`, `plan` and `run` all use it."""

    def one(host: InventoryHost) -> dict[str, Any] | SocketlabError:
        try:
            return _facts(collect_snapshot(host, timeout))
        except SocketlabError as exc:
            return exc

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(hosts)))) as pool:
        return dict(zip((h.name for h in hosts), pool.map(one, hosts), strict=True))
