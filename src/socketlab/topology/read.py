"""Reading a host's topology where this process runs: the live system or a recorded tree.

The list of files read lives in one place, collectors/host_facts.py (it also runs on remote
hosts), so this module imports that file (socketlab.hostside.host_facts) rather than repeating
it.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from socketlab.errors import HostError
from socketlab.hostside import host_facts
from socketlab.topology.model import Topology, topology_from_snapshot


def host_facts_module() -> ModuleType:
    """collectors/host_facts.py, the single list of files the host model reads."""
    return host_facts


def read_snapshot(root: str | Path = "/") -> dict:
    root = Path(root)
    if not root.is_dir():
        raise HostError(f"{root}: topology root is not a directory")
    return host_facts_module().snapshot(str(root))


def read_topology(root: str | Path = "/") -> Topology:
    """The topology under ``root`` ('/' = this machine; a directory = a recorded tree)."""
    return topology_from_snapshot(read_snapshot(root))
