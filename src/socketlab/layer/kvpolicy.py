"""The P4 KV policies' one rule that depends on the host: how much rotated KV is "cold".

Path B reads one KV copy (left wherever the previous step put it); path A rotates enough copies
that the whole layer's rotated KV is at least ``COLD_L3_FACTOR`` x the host's L3, so every step
reads it from DRAM; path C is A with the selected in-loop prefetch (T0, 8 rows ahead).
native/layer takes the target as ``--kv-cold-mib`` and computes the copies itself from the
layer's KV bytes per step (it knows them; the spec does not).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: p4_run.sh's L2R_COLD_MIB: 1,536 MiB on the published 480 MiB L3 (plow-campaign.md, P4)
COLD_L3_FACTOR = 3.2


def cold_mib(facts: Mapping[str, Any]) -> int:
    """The cold target in MiB for a host's topology facts: COLD_L3_FACTOR x all of its L3 (size
    x instances: KV rotated through every L3 slice the host has). Raises ValueError when the
    facts name no L3."""
    caches = facts.get("caches") or {}
    l3 = (caches.get("L3") or {}) if isinstance(caches, Mapping) else {}
    size = int(l3.get("size_bytes") or 0) * int(l3.get("instances") or 1)
    if not size:
        raise ValueError(
            "the host's facts report no L3 size (caches.L3.size_bytes), which "
            "the cold-KV target (3.2 x L3) needs"
        )
    return max(1, round(COLD_L3_FACTOR * size / 2**20))
