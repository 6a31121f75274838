"""CPU placement (pure): functions of host facts that decide CPU sets; nothing here touches a
host. ``isolation``: housekeeping and worker cores per NUMA node (docs/isolation.md);
``cpuset``: CPU sets for several jobs on one host (docs/cpuset.md)."""

from socketlab.placement.isolation import IsolationPlan, plan_isolation

__all__ = ["IsolationPlan", "plan_isolation"]
