"""rapl_power collector -> package_power and dram_power (W) averaged over the run.

Energy counters wrap at ``max_energy_range_uj``; each zone's energy is summed over consecutive
samples with the wrap undone, then divided by the elapsed time. Package zones (``package-N``) are
summed over sockets, as are DRAM zones.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from socketlab.parse.collectors import CollectorOutput, metric


def parse(records: list[dict[str, Any]], directory: Path) -> CollectorOutput:
    out = CollectorOutput()
    samples = [r for r in records if isinstance(r.get("zones"), dict) and "ts" in r]
    if len(samples) < 2:
        if not any("unsupported" in r for r in records):
            out.notes.append("fewer than two RAPL samples: no interval to average over")
        return out
    energy: dict[str, float] = {}
    names: dict[str, str] = {}
    for a, b in zip(samples, samples[1:], strict=False):
        for zone, zb in b["zones"].items():
            za = a["zones"].get(zone)
            if not za:
                continue
            delta = zb["energy_uj"] - za["energy_uj"]
            if delta < 0:  # wrapped
                delta += zb.get("max_energy_range_uj") or 0
            energy[zone] = energy.get(zone, 0.0) + delta
            names[zone] = zb.get("name", zone)
    elapsed = samples[-1]["ts"] - samples[0]["ts"]
    if elapsed <= 0:
        out.notes.append("RAPL samples span no time")
        return out
    pkg = [z for z, n in names.items() if n.startswith("package")]
    dram = [z for z, n in names.items() if n == "dram"]
    if pkg:
        out.metrics.append(
            metric(
                "package_power", sum(energy[z] for z in pkg) / 1e6 / elapsed, "W", zones=len(pkg)
            )
        )
    if dram:
        out.metrics.append(
            metric("dram_power", sum(energy[z] for z in dram) / 1e6 / elapsed, "W", zones=len(dram))
        )
    return out
