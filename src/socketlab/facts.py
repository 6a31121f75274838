"""Gathering host facts, the one place it is done: run collectors/host_facts.py on each host
(locally, or piped over SSH so nothing is copied, on the connection the executor makes:
socketlab.execute.sshconfig) and build its topology. The host's
``socketlab_state_dir`` (inventory var, as the playbooks use it) is passed as --state-dir, so
verify.yml's records are found where the playbooks wrote them."""

from __future__ import annotations

import json
import shlex
import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import paramiko

from socketlab import paths
from socketlab.errors import HostError, SocketlabError
from socketlab.execute import (
    BECOME_REFUSED,
    become_preflight,
    become_refused,
    become_requested,
    become_variable,
    sshconfig,
)
from socketlab.inventory import InventoryHost
from socketlab.topology import topology_from_snapshot

SCRIPT = paths.COLLECTORS / "host_facts.py"


def collect_snapshot(host: InventoryHost, timeout: float = 60) -> dict:
    """The raw host_facts.py snapshot of one host."""
    script = SCRIPT.read_text()
    state_dir = (getattr(host, "vars", None) or {}).get("socketlab_state_dir")
    options = ["--state-dir", str(state_dir)] if state_dir else []
    if host.is_local:
        argv = [host.python, "-", *options]
        where = f"{host.name} (local, {host.python})"
    else:  # the remote shell parses the command: quote every word
        words = [shlex.quote(w) for w in (host.python, "-", *options)]
        if become_requested(getattr(host, "vars", None)):
            words.insert(0, become_preflight())  # sudo must work before anything is sent
        argv = None
        where = (f"{host.name} (ssh {host.user + '@' if host.user else ''}{host.address}"
                 f"{':' + str(host.port) if host.port else ''})")  # fmt: skip
    if "{{" in str(state_dir or ""):
        raise HostError(f"{where}: socketlab_state_dir={state_dir!r} is a template; expected a "
                        "literal path in the inventory (orchestrate does not render templates)")
    try:
        if argv is not None:
            proc = subprocess.run(argv, input=script, capture_output=True, text=True,
                                  timeout=timeout)  # fmt: skip
        else:  # the connection orchestrate's executor makes: ~/.ssh/config, agent, ProxyJump
            proc = subprocess.CompletedProcess(words, *sshconfig.run_once(
                host.address, " ".join(words), script.encode(), user=host.user, port=host.port,
                key_file=host.key_file, common_args=host.ssh_common_args, timeout=timeout))
    except FileNotFoundError as exc:
        raise HostError(f"{where}: cannot run {exc.filename}") from None
    except (subprocess.TimeoutExpired, TimeoutError):
        raise HostError(f"{where}: host_facts.py gave no answer within {timeout:.0f} s") from None
    except (OSError, EOFError, paramiko.SSHException) as exc:
        raise HostError(f"{where}: gathering facts failed: cannot connect: "
                        f"{exc or type(exc).__name__}") from None  # fmt: skip
    if proc.returncode == BECOME_REFUSED and become_requested(getattr(host, "vars", None)):
        raise HostError(become_refused(where, host.user, become_variable(host.vars)))
    if proc.returncode != 0:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        why = lines[-1].strip() if lines else f"exit status {proc.returncode}"
        raise HostError(f"{where}: gathering facts failed: {why}")
    try:
        return json.loads(proc.stdout)
    except ValueError:
        raise HostError(f"{where}: host_facts.py printed no JSON object") from None


def gather_all(
    hosts: list[InventoryHost], timeout: float = 60, workers: int = 8
) -> dict[str, dict[str, Any] | SocketlabError]:
    """name -> {"topology": Topology.facts(), "snapshot": <host_facts.py output>} of many hosts
    in parallel; a host that fails maps to its error, not an exception. The only fan-out over
    hosts for facts: `hosts`, `cpuset`, `plan` and `run` all use it."""

    def one(host: InventoryHost) -> dict[str, Any] | SocketlabError:
        try:
            snapshot = collect_snapshot(host, timeout)
            return {"topology": topology_from_snapshot(snapshot).facts(), "snapshot": snapshot}
        except SocketlabError as exc:
            return exc

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(hosts)))) as pool:
        return dict(zip((h.name for h in hosts), pool.map(one, hosts), strict=True))
