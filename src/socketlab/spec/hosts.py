"""The host side of planning: which inventory hosts a spec targets, and their facts.

This is the only part of planning that touches hosts (it runs collectors/host_facts.py on each,
through socketlab.facts; or reads recorded snapshots for `plan --assume-host`). The session
(socketlab.session) that `plan` and `run` share uses it, so the facts a plan shows are the
facts a run expands with. Expansion itself (socketlab.spec.expand) is pure.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from socketlab.cpulist import parse_cpumask
from socketlab.errors import HostError, PlanError, SocketlabError, SpecError
from socketlab.spec.model import Spec
from socketlab.topology import topology_from_snapshot


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
    from socketlab.placement.isolation import plan_isolation

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
    spec: Spec,
    hosts: list[Any],
    errors: dict[str, SocketlabError] | None = None,
    *,
    executors: dict[str, Any] | None = None,
) -> dict[str, dict[str, Any]]:
    """inventory name -> host entry for expand_points, gathered in parallel, in input order.

    A host whose facts can't be gathered raises its HostError, or, when `errors` is given,
    is left out and its error recorded there (so one unreachable host doesn't stop a plan).
    With `executors` (a dict) the hosts are opened for a run (socketlab.facts.open_all: one
    session per host) and each reached host's executor is put there, for the runner.
    """
    from socketlab.facts import Opened, gather_all, open_all

    gathered: dict[str, Any] = gather_all(hosts) if executors is None else open_all(hosts)
    out: dict[str, dict[str, Any]] = {}
    for host in hosts:
        facts = gathered[host.name]
        if isinstance(facts, Opened):
            executors[host.name] = facts.executor
            facts = facts.facts
        if isinstance(facts, SocketlabError):
            if errors is None:
                raise facts
            errors[host.name] = facts
            continue
        entry = host_entry(topology_from_snapshot(facts["snapshot"]), spec)
        entry["vars"] = dict(getattr(host, "vars", None) or {})
        entry["python"] = str(getattr(host, "python", "") or "python3")
        entry["address"] = str(getattr(host, "address", "") or host.name)  # for `inventory`
        # playbooks/verify.yml's result for this inventory host (report provenance)
        verify = (facts["snapshot"].get("isolation_verify") or {}).get(host.name)
        if verify is not None:
            entry["isolation_verify"] = verify
        out[host.name] = entry
    return out


def assumed_host_facts(spec: Spec, given: list[str]) -> dict[str, dict[str, Any]]:
    """inventory name -> host entry from recorded host_facts.py snapshots (no host contacted)."""
    out: dict[str, dict[str, Any]] = {}
    for item in given:
        name, sep, file = item.partition("=")
        if not sep:
            name, file = Path(item).stem, item
        try:
            snapshot = json.loads(Path(file).read_text())
        except OSError as exc:
            raise SpecError(f"--assume-host {file}: {exc.strerror}") from None
        except ValueError as exc:
            raise SpecError(f"--assume-host {file}: not JSON ({exc})") from None
        if isinstance(snapshot, dict) and "snapshot" in snapshot:
            snapshot = snapshot["snapshot"]  # a gathered-facts record wraps the snapshot
        try:
            topology = topology_from_snapshot(snapshot)
        except SocketlabError as exc:
            raise SpecError(f"--assume-host {file}: {exc}") from None
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise SpecError(
                f"--assume-host {file}: not a collectors/host_facts.py snapshot "
                f"(missing or bad {exc})"
            ) from None
        entry = host_entry(topology, spec)
        entry.update(vars={}, python="python3", address=name)
        out[name] = entry
    return out
