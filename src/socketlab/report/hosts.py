"""What `orchestrate hosts` shows of each inventory host: its topology, the isolation plan the
planner makes for it, and whether isolate.yml's plan runs on it now.

"isolated now" is what playbooks/isolate.yml left: verify.yml's record for the host (restore.yml
removes it, and verify.yml keeps none without the state file) and the workqueue mask the plan
sets, read now.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from socketlab.errors import PlanError, SocketlabError
from socketlab.facts import gather_all
from socketlab.inventory import InventoryHost, load_inventory
from socketlab.placement.isolation import plan_isolation
from socketlab.report.isolation import verify_text
from socketlab.spec.hosts import isolation_applied
from socketlab.topology import topology_from_snapshot


def host_entries(
    inventory: str | Path | None,
    limit: str | None,
    *,
    timeout: float,
    housekeeping: int,
    prefer_irq: bool,
) -> list[dict[str, Any]]:
    """Every selected inventory host's entry (``describe``), facts gathered in parallel; a
    host that does not answer is an entry with its error."""
    if housekeeping < 1:
        raise PlanError(f"--housekeeping: expected a whole number >= 1, got {housekeeping}")
    hosts = load_inventory(inventory, limit)
    gathered = gather_all(hosts, timeout=timeout)
    return [describe(h, gathered[h.name], housekeeping, prefer_irq) for h in hosts]


def isolation_now(name: str, facts: dict, plan: dict | None) -> dict[str, Any]:
    """{"isolated", "verified", "text"}: whether isolate.yml's plan runs on the host now.

    Isolated: verify.yml's record of this inventory host names a plan whose workqueue mask the
    host has now; without a record, a host on the mask of ``plan`` (this command's) is isolated
    but not verified. Pure: the gathered facts in, the row out."""
    record = (facts["snapshot"].get("isolation_verify") or {}).get(name)
    if isinstance(record, dict) and record:
        checked = record.get("plan") if isinstance(record.get("plan"), dict) else None
        applied = isolation_applied(facts["topology"], checked)
        entry = {"isolation_verify": record, "isolation_applied": applied, "isolation": checked}
        verified = record.get("passed") is True and applied
        if applied:
            text = (
                f"isolated: isolate.yml's plan (housekeeping {checked['housekeeping_list']}, "
                f"workers {checked['workers_list']}); {verify_text(entry)}"
            )
        else:
            text = f"not isolated (the workqueue mask is not the plan's); {verify_text(entry)}"
        return {"isolated": applied, "verified": verified, "text": text}
    if isolation_applied(facts["topology"], plan):
        return {
            "isolated": True,
            "verified": False,
            "text": "isolated: the workqueue mask is the plan's; not verified (run "
            "playbooks/verify.yml)",
        }
    return {"isolated": False, "verified": False, "text": "not isolated"}


def describe(
    host: InventoryHost, facts: dict | SocketlabError, housekeeping: int, prefer_irq: bool
) -> dict[str, Any]:
    """One host's entry of the report: facts, plan, or the reason for either missing."""
    entry: dict[str, Any] = {
        "name": host.name,
        "connection": host.connection,
        "address": host.address,
        "port": host.port,
        "groups": list(host.groups),
        "error": None,
        "topology": None,
        "isolation": None,
        "plan_error": None,
        "isolated_now": None,
    }
    if isinstance(facts, SocketlabError):
        entry["error"] = str(facts)
        return entry
    entry["topology"] = facts["topology"]
    try:
        topology = topology_from_snapshot(facts["snapshot"])
        entry["isolation"] = plan_isolation(topology, housekeeping, prefer_irq).facts()
    except PlanError as exc:
        entry["plan_error"] = str(exc)
    entry["isolated_now"] = isolation_now(host.name, facts, entry["isolation"])
    return entry
