"""Reading a host's topology where this process runs: the live system or a recorded tree.

The list of files read lives in one place, collectors/host_facts.py (it also runs on remote
hosts), so this module loads that script rather than repeating it.
"""

from __future__ import annotations

import importlib.util
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

from socketlab import paths
from socketlab.errors import HostError
from socketlab.topology.model import Topology, topology_from_snapshot


@cache
def collector_module(name: str) -> ModuleType:
    """collectors/<name>.py as a module (stdlib scripts, not part of the package): host_facts,
    and tailor, the host side `orchestrate tailor` takes its options from."""
    path = paths.COLLECTORS / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"socketlab_{name}", path)
    if spec is None or spec.loader is None or not path.exists():
        raise HostError(f"{path}: collector missing; expected collectors/{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


def host_facts_module() -> ModuleType:
    return collector_module("host_facts")


def read_snapshot(root: str | Path = "/") -> dict:
    root = Path(root)
    if not root.is_dir():
        raise HostError(f"{root}: topology root is not a directory")
    return host_facts_module().snapshot(str(root))


def read_topology(root: str | Path = "/") -> Topology:
    """The topology under ``root`` ('/' = this machine; a directory = a recorded tree)."""
    return topology_from_snapshot(read_snapshot(root))
