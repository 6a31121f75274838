"""Jinja filters for the playbooks, so roles use the same planner and CPU-list code as the CLI.

    {{ snapshot | socketlab_isolation_plan(housekeeping_per_node=2) }}  -> IsolationPlan.facts()
    {{ snapshot | socketlab_topology }}                                 -> Topology.facts()
    {{ snapshot | socketlab_isolation_targets(plan, sys_root=..., ...) }} -> each role's knobs
    {{ [0, 1, 2, 5] | socketlab_cpulist }}                              -> "0-2,5"
    {{ "0-2,5" | socketlab_parse_cpulist }}                             -> [0, 1, 2, 5]
    {{ [0, 1] | socketlab_cpumask(192) }}                               -> "00000000,...,00000003"
    {{ "00000003,00000001" | socketlab_parse_cpumask }}                 -> [0, 32, 33]

``snapshot`` is the JSON object collectors/host_facts.py prints (a dict or its JSON text).
Planning errors become AnsibleFilterError with the planner's one-line message.
"""

from __future__ import annotations

import json
from typing import Any

from socketlab.cpulist import cpumask, format_cpulist, parse_cpulist, parse_cpumask
from socketlab.errors import SocketlabError
from socketlab.plan.isolation import isolation_targets, plan_isolation
from socketlab.topology.model import topology_from_snapshot

try:  # the module is importable without Ansible (tests, the CLI)
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - Ansible is a dependency; keep the module importable

    class AnsibleFilterError(Exception):  # type: ignore[no-redef]
        pass


def _snapshot(value: Any) -> dict:
    if isinstance(value, str | bytes):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise AnsibleFilterError(f"socketlab: host facts are not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise AnsibleFilterError(
            f"socketlab: expected the host_facts.py snapshot (a dict), got {type(value).__name__}"
        )
    return value


def _as_int(value: Any, name: str) -> int:
    try:
        if isinstance(value, bool):
            raise ValueError
        return int(str(value).strip())
    except ValueError:
        raise AnsibleFilterError(
            f"socketlab: {name}: expected a whole number, got {value!r}"
        ) from None


def _as_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on", "y")
    return bool(value)


def _cpus(value: Any) -> list[int]:
    if isinstance(value, str):
        return parse_cpulist(value)
    return [int(c) for c in value]


def socketlab_topology(snapshot: Any) -> dict:
    try:
        return topology_from_snapshot(_snapshot(snapshot)).facts()
    except SocketlabError as exc:
        raise AnsibleFilterError(str(exc)) from None


def socketlab_isolation_plan(
    snapshot: Any,
    housekeeping_per_node: Any = 2,
    prefer_irq_cores: Any = False,
    on_error: str = "raise",
) -> dict:
    """The plan's facts. With ``on_error="return"`` an impossible plan gives ``{"error": msg}``
    instead of raising, so a role can fail with the planner's line alone (a raising filter makes
    Ansible print its templating preamble first)."""
    try:
        h = _as_int(housekeeping_per_node, "housekeeping_per_node")
        topology = topology_from_snapshot(_snapshot(snapshot))
        plan = plan_isolation(
            topology, housekeeping_per_node=h, prefer_irq_cores=_as_bool(prefer_irq_cores)
        )
    except (SocketlabError, AnsibleFilterError) as exc:
        if on_error == "return":
            return {"error": str(exc)}
        raise AnsibleFilterError(str(exc)) from None
    return plan.facts()


def socketlab_isolation_targets(snapshot: Any, plan: dict, sys_root: str, proc_root: str,
                                thp_mode: str, numa_balancing: Any, hugepages_per_node: Any,
                                governor: str) -> dict:
    """isolation_targets() of the plan's facts: each role's knob list, ``knobs`` and ``summary``."""
    try:
        return isolation_targets(
            plan, _snapshot(snapshot), roots={"sys": sys_root, "proc": proc_root},
            thp_mode=thp_mode, governor=governor,
            numa_balancing=_as_int(numa_balancing, "numa_balancing"),
            hugepages_per_node=_as_int(hugepages_per_node, "hugepages_per_node"))
    except SocketlabError as exc:
        raise AnsibleFilterError(str(exc)) from None


def socketlab_cpulist(cpus: Any) -> str:
    try:
        return format_cpulist(_cpus(cpus))
    except (SocketlabError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"socketlab_cpulist: {exc}") from None


def socketlab_parse_cpulist(text: Any) -> list[int]:
    try:
        return parse_cpulist(str(text))
    except SocketlabError as exc:
        raise AnsibleFilterError(str(exc)) from None


def socketlab_cpumask(cpus: Any, ncpus: Any) -> str:
    try:
        return cpumask(_cpus(cpus), _as_int(ncpus, "ncpus"))
    except (SocketlabError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"socketlab_cpumask: {exc}") from None


def socketlab_parse_cpumask(text: Any) -> list[int]:
    try:
        return parse_cpumask(str(text))
    except SocketlabError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict:
        return {
            "socketlab_topology": socketlab_topology,
            "socketlab_isolation_plan": socketlab_isolation_plan,
            "socketlab_isolation_targets": socketlab_isolation_targets,
            "socketlab_cpulist": socketlab_cpulist,
            "socketlab_parse_cpulist": socketlab_parse_cpulist,
            "socketlab_cpumask": socketlab_cpumask,
            "socketlab_parse_cpumask": socketlab_parse_cpumask,
        }
