"""Host topology: sockets, NUMA nodes, LLC domains, physical cores and SMT siblings, plus the
kernel knobs isolation touches, read from sysfs/procfs (live or a recorded tree)."""

from socketlab.topology.model import (
    SNAPSHOT_FORMAT,
    Cache,
    Core,
    Cpu,
    Irq,
    Topology,
    topology_from_snapshot,
)
from socketlab.topology.read import host_facts_module, read_snapshot, read_topology

__all__ = [
    "SNAPSHOT_FORMAT",
    "Cache",
    "Core",
    "Cpu",
    "Irq",
    "Topology",
    "host_facts_module",
    "read_snapshot",
    "read_topology",
    "topology_from_snapshot",
]
