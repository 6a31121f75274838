"""Gathering host facts: run collectors/host_facts.py on a host (locally, or piped over ssh so
nothing is copied) and build its topology."""

from __future__ import annotations

import json
import shlex
import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from socketlab import paths
from socketlab.errors import HostError, SocketlabError
from socketlab.inventory import InventoryHost
from socketlab.topology import topology_from_snapshot

SCRIPT = paths.COLLECTORS / "host_facts.py"


def ssh_argv(host: InventoryHost, *command: str, connect_timeout: int = 10) -> list[str]:
    """The ssh command line for an inventory host, with its key, port and extra options."""
    argv = [
        "ssh",
        "-p",
        str(host.port),
        "-o",
        "BatchMode=yes",
        "-o",
        f"ConnectTimeout={connect_timeout}",
    ]
    if host.key_file:
        argv += ["-i", str(host.key_file)]
    if host.user:
        argv += ["-l", str(host.user)]
    argv += shlex.split(host.ssh_common_args)
    return [*argv, host.address, *command]


def collect_snapshot(host: InventoryHost, timeout: float = 60) -> dict:
    """The raw host_facts.py snapshot of one host."""
    script = SCRIPT.read_text()
    if host.is_local:
        argv = [host.python, "-"]
        where = f"{host.name} (local, {host.python})"
    else:
        argv = ssh_argv(host, shlex.quote(host.python), "-")
        where = (
            f"{host.name} (ssh {host.user + '@' if host.user else ''}{host.address}:{host.port})"
        )
    try:
        proc = subprocess.run(argv, input=script, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError as exc:
        raise HostError(f"{where}: cannot run {exc.filename}") from None
    except subprocess.TimeoutExpired:
        raise HostError(f"{where}: host_facts.py gave no answer within {timeout:.0f} s") from None
    if proc.returncode != 0:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        why = lines[-1].strip() if lines else f"exit status {proc.returncode}"
        raise HostError(f"{where}: gathering facts failed: {why}")
    try:
        return json.loads(proc.stdout)
    except ValueError:
        raise HostError(f"{where}: host_facts.py printed no JSON object") from None


def gather_facts(host: InventoryHost, timeout: float = 60) -> dict[str, Any]:
    """{"topology": Topology.facts(), "snapshot": <host_facts.py output>} for one host."""
    snapshot = collect_snapshot(host, timeout)
    return {"topology": topology_from_snapshot(snapshot).facts(), "snapshot": snapshot}


def gather_all(
    hosts: list[InventoryHost], timeout: float = 60, workers: int = 8
) -> dict[str, dict[str, Any] | SocketlabError]:
    """Facts of many hosts in parallel; a host that fails maps to its error, not an exception."""

    def one(host: InventoryHost) -> dict[str, Any] | SocketlabError:
        try:
            return gather_facts(host, timeout)
        except SocketlabError as exc:
            return exc

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(hosts)))) as pool:
        return dict(zip((h.name for h in hosts), pool.map(one, hosts), strict=True))
