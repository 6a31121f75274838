# Apache-2.0 (see the socketlab repository)
"""Jinja filters for the playbooks, so roles use the same planner and CPU-list code as the CLI.

    {{ snapshot | socketlab.lab.isolation_plan(housekeeping_per_node=2) }}  -> IsolationPlan.facts()
    {{ snapshot | socketlab.lab.topology }}                                 -> Topology.facts()
    {{ snapshot | socketlab.lab.isolation_targets(plan, sys_root=...) }}    -> each role's knobs
    {{ [0, 1, 2, 5] | socketlab.lab.cpulist }}                              -> "0-2,5"
    {{ "0-2,5" | socketlab.lab.parse_cpulist }}                             -> [0, 1, 2, 5]
    {{ [0, 1] | socketlab.lab.cpumask(192) }}                               -> "00000000,...,00000003"
    {{ "00000003,00000001" | socketlab.lab.parse_cpumask }}                 -> [0, 32, 33]

``snapshot`` is the JSON object collectors/host_facts.py prints (a dict or its JSON text).
Planning errors become AnsibleFilterError with the planner's one-line message.
"""  # noqa: E501 (a table)

from __future__ import annotations

import json
from typing import Any

from ansible.errors import AnsibleFilterError

# The planner is socketlab's own code, linked into plugin_utils (see its __init__.py): the
# collection does not need the socketlab package installed.
from ansible_collections.socketlab.lab.plugins.plugin_utils.planner import cpulist as _cpulist
from ansible_collections.socketlab.lab.plugins.plugin_utils.planner.errors import SocketlabError
from ansible_collections.socketlab.lab.plugins.plugin_utils.planner.plan import (
    isolation as _isolation,
)
from ansible_collections.socketlab.lab.plugins.plugin_utils.planner.topology import (
    model as _model,
)


def _snapshot(value: Any) -> dict:
    if isinstance(value, str | bytes):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise AnsibleFilterError(f"socketlab.lab: host facts are not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise AnsibleFilterError(
            "socketlab.lab: expected the host_facts.py snapshot (a dict), got "
            f"{type(value).__name__}"
        )
    return value


def _as_int(value: Any, name: str) -> int:
    try:
        if isinstance(value, bool):
            raise ValueError
        return int(str(value).strip())
    except ValueError:
        raise AnsibleFilterError(
            f"socketlab.lab: {name}: expected a whole number, got {value!r}"
        ) from None


def _as_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on", "y")
    return bool(value)


def _cpus(value: Any) -> list[int]:
    if isinstance(value, str):
        return _cpulist.parse_cpulist(value)
    return [int(c) for c in value]


def topology(snapshot: Any) -> dict:
    try:
        return _model.topology_from_snapshot(_snapshot(snapshot)).facts()
    except SocketlabError as exc:
        raise AnsibleFilterError(str(exc)) from None


def isolation_plan(
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
        host = _model.topology_from_snapshot(_snapshot(snapshot))
        plan = _isolation.plan_isolation(
            host, housekeeping_per_node=h, prefer_irq_cores=_as_bool(prefer_irq_cores)
        )
    except (SocketlabError, AnsibleFilterError) as exc:
        if on_error == "return":
            return {"error": str(exc)}
        raise AnsibleFilterError(str(exc)) from None
    return plan.facts()


def isolation_targets(
    snapshot: Any,
    plan: dict,
    sys_root: str,
    proc_root: str,
    thp_mode: str,
    numa_balancing: Any,
    hugepages_per_node: Any,
    governor: str,
) -> dict:
    """isolation_targets() of the plan's facts: each role's knob list, ``knobs`` and ``summary``."""
    try:
        return _isolation.isolation_targets(
            plan,
            _snapshot(snapshot),
            roots={"sys": sys_root, "proc": proc_root},
            thp_mode=thp_mode,
            governor=governor,
            numa_balancing=_as_int(numa_balancing, "numa_balancing"),
            hugepages_per_node=_as_int(hugepages_per_node, "hugepages_per_node"),
        )
    except SocketlabError as exc:
        raise AnsibleFilterError(str(exc)) from None


def cpulist(cpus: Any) -> str:
    try:
        return _cpulist.format_cpulist(_cpus(cpus))
    except (SocketlabError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"socketlab.lab.cpulist: {exc}") from None


def parse_cpulist(text: Any) -> list[int]:
    try:
        return _cpulist.parse_cpulist(str(text))
    except SocketlabError as exc:
        raise AnsibleFilterError(str(exc)) from None


def cpumask(cpus: Any, ncpus: Any) -> str:
    try:
        return _cpulist.cpumask(_cpus(cpus), _as_int(ncpus, "ncpus"))
    except (SocketlabError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"socketlab.lab.cpumask: {exc}") from None


def parse_cpumask(text: Any) -> list[int]:
    try:
        return _cpulist.parse_cpumask(str(text))
    except SocketlabError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict:
        return {
            "topology": topology,
            "isolation_plan": isolation_plan,
            "isolation_targets": isolation_targets,
            "cpulist": cpulist,
            "parse_cpulist": parse_cpulist,
            "cpumask": cpumask,
            "parse_cpumask": parse_cpumask,
        }
