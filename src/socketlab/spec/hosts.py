"""The host side of planning: which inventory hosts a spec targets, and their facts.

This is the only part of planning that touches hosts (it runs collectors/host_facts.py on each,
through socketlab.facts). `orchestrate plan` and `orchestrate run` both use it, so the facts a
plan shows are the facts a run expands with. Expansion itself (socketlab.spec.expand) is pure.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from socketlab.cpulist import parse_cpumask
from socketlab.errors import HostError, PlanError, SocketlabError
from socketlab.spec.model import Spec


def select_hosts(spec: Spec, pattern: str | None = None, inventory: str | Path | None = None):
    """Inventory hosts matching `pattern` (default: the spec's `hosts`).

    HostError when nothing matches, naming the spec field (or --hosts) the pattern came from.
    """
    from socketlab.inventory import load_inventory

    if pattern:
        origin = "--hosts"
    else:
        key = next((k for k in ("hosts.pattern", "hosts.group") if k in spec.lines), "hosts")
        origin = spec.where(key) + ("" if key != "hosts" else " (default localhost)")
    limit = pattern or spec.hosts
    try:
        hosts = load_inventory(inventory, limit=limit)
    except HostError as exc:
        raise HostError(f"{origin}: unknown hosts '{limit}': {exc}") from None
    if not hosts:
        raise HostError(f"{origin}: no inventory host matches '{limit}'")
    return hosts


def host_entry(topology: Any, spec: Spec) -> dict[str, Any]:
    """{"topology", "isolation", "isolation_applied", "isolation_error"} for one host.

    `topology` is a socketlab.topology Topology. The isolation plan uses the spec's
    `isolation:` settings; a host the planner can't split (too few cores) gets no plan and
    the planner's reason, which templates using facts.workers then report.
    """
    from socketlab.plan.isolation import plan_isolation

    facts = topology.facts()
    try:
        isolation = plan_isolation(topology, **spec.isolation).facts()
        error = None
    except PlanError as exc:
        isolation, error = None, str(exc)
    entry = {
        "topology": facts,
        "isolation": isolation,
        "isolation_applied": isolation_applied(facts, isolation),
    }
    if error:
        entry["isolation_error"] = error
    return entry


def isolation_applied(topology_facts: dict[str, Any], isolation: dict[str, Any] | None) -> bool:
    """Whether the host runs the plan now: its unbound-workqueue mask is the plan's
    housekeeping mask. playbooks/isolate.yml sets that mask at run time, and an unisolated
    host has every CPU in it, which no plan (it always leaves workers) can match.
    """
    if not isolation:
        return False
    current = topology_facts.get("workqueue_cpumask")
    wanted = isolation.get("workqueue_mask")
    if not current or not wanted:
        return False
    try:
        return parse_cpumask(current) == parse_cpumask(wanted)
    except ValueError:
        return False


def gather_host_facts(
    spec: Spec, hosts: list[Any], errors: dict[str, SocketlabError] | None = None
) -> dict[str, dict[str, Any]]:
    """inventory name -> host entry for expand_points, gathered in parallel, in input order.

    A host whose facts can't be gathered raises its HostError, or, when `errors` is given,
    is left out and its error recorded there (so one unreachable host doesn't stop a plan).
    """
    from socketlab.facts import gather_facts
    from socketlab.topology import topology_from_snapshot

    def one(host: Any) -> dict[str, Any] | SocketlabError:
        try:
            gathered = gather_facts(host)
        except SocketlabError as exc:
            if errors is None:
                raise
            return exc
        entry = host_entry(topology_from_snapshot(gathered["snapshot"]), spec)
        entry["vars"] = dict(getattr(host, "vars", None) or {})
        entry["python"] = str(getattr(host, "python", "") or "python3")
        entry["address"] = str(getattr(host, "address", "") or host.name)  # for `inventory`
        # playbooks/verify.yml's result for this inventory host (report provenance)
        verify = (gathered["snapshot"].get("isolation_verify") or {}).get(host.name)
        if verify is not None:
            entry["isolation_verify"] = verify
        return entry

    with ThreadPoolExecutor(max_workers=min(8, max(1, len(hosts)))) as pool:
        results = list(pool.map(one, hosts))
    out: dict[str, dict[str, Any]] = {}
    for host, result in zip(hosts, results, strict=True):
        if isinstance(result, SocketlabError):
            errors[host.name] = result  # type: ignore[index]  # errors is set here
        else:
            out[host.name] = result
    return out
