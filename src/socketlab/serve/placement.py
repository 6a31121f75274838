"""Placement: which CPUs a server gets, and which CPUs are left for the load generator. Pure.

- ``workers``: the isolation plan's worker CPUs only (one logical CPU per worker core).
- ``workers+siblings``: the workers plus their SMT siblings, where a runtime's host threads
  go (plow-campaign.md §5.1: 13.83 ms TPOT without the siblings, 10.47 ms with them).
- ``all``: every online CPU.

The lists come from the isolation plan's facts (``socketlab.placement.isolation``), which the
orchestrator computes from the topology whether or not the plan is applied, so a spec means
the same CPUs on a host that is not isolated yet (``placement_source`` records which).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from socketlab.cpulist import format_cpulist, parse_cpulist
from socketlab.errors import PlanError

PLACEMENTS = ("workers", "workers+siblings", "all")


@dataclass(frozen=True)
class Placement:
    name: str
    server: list[int]  #: CPUs the server runs on
    client: list[int]  #: CPUs for the load generator
    client_shared: bool  #: no CPU was free of the server: the client shares them (recorded)
    source: str  #: where the lists came from ("isolation plan", "topology", "explicit")

    def facts(self) -> dict[str, Any]:
        return {
            "placement": self.name,
            "server_cpus": format_cpulist(self.server),
            "client_cpus": format_cpulist(self.client),
            "client_shared": self.client_shared,
            "placement_source": self.source,
        }


def _ints(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, str):
        return parse_cpulist(value)
    return sorted(int(v) for v in value)


def resolve(
    name: str,
    facts: dict[str, Any],
    *,
    explicit: str | None = None,
    client: str | None = None,
    host: str = "host",
) -> Placement:
    """CPU lists for placement ``name`` from template facts (topology + isolation plan lists).

    ``explicit`` (a CPU list) overrides the named placement's server CPUs; ``client`` the
    load generator's. Raises PlanError when the facts cannot give the lists.
    """
    online = _ints(facts.get("cpu_online"))
    if not online:
        raise PlanError(f"host {host}: no cpu_online in the facts; cannot place a server")
    source = "isolation plan" if facts.get("isolation_applied") else "isolation plan (not applied)"
    if explicit is not None:
        server, source = _ints(explicit), "explicit"
    elif name == "all":
        server, source = online, "topology"
    elif name in ("workers", "workers+siblings"):
        workers, siblings = _ints(facts.get("workers")), _ints(facts.get("siblings"))
        if not workers:
            raise PlanError(
                f"host {host}: placement {name!r} needs the isolation plan's worker "
                f"CPUs, and the facts have none{_why(facts)}; use placement 'all' "
                "or give cpus"
            )
        server = workers if name == "workers" else sorted(set(workers) | set(siblings))
    else:
        raise PlanError(
            f"host {host}: unknown placement {name!r}; expected one of {', '.join(PLACEMENTS)}"
        )
    missing = sorted(set(server) - set(online))
    if not server or missing:
        raise PlanError(
            f"host {host}: placement {name!r} gives CPUs "
            f"{format_cpulist(server) or '(none)'}, not all online "
            f"({format_cpulist(online)})"
        )
    if client is not None:
        cl, shared = _ints(client), False
    else:
        # prefer housekeeping CPUs: what the plan leaves to the OS is what the server does not use
        free = [c for c in online if c not in set(server)]
        house = [c for c in _ints(facts.get("housekeeping")) if c in set(free)]
        cl = house or free
        shared = not cl
        if shared:
            cl = online
    return Placement(name, server, cl, shared, source)


def _why(facts: dict[str, Any]) -> str:
    note = facts.get("isolation_error")
    return f" ({note})" if note else ""
