"""perf_stat collector -> cycles, instructions, ipc; DRAM bytes and bandwidth at the IMCs.

Reads ``perf stat -x, -I <ms>`` CSV (``perf_core.csv``, ``perf_imc.csv``): one line per event per
interval, ``time,value,unit,event,run_time,pct,...``. Values are summed over intervals (and over
IMC boxes when perf prints them unmerged). CAS counts become bytes: x 64 for raw counts, or by the
unit perf scaled them to (the kernel aliases carry 64 B expressed in MiB). On Granite Rapids the
read bytes are the sum of the SCH0 and SCH1 events.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from socketlab.parse.collectors import CollectorOutput, metric
from socketlab.units import cas_bytes


def read_csv(text: str) -> tuple[dict[str, float], dict[str, str], float, list[str]]:
    """(event -> summed value, event -> unit, last interval time, events that did not count)."""
    totals: dict[str, float] = {}
    units: dict[str, str] = {}
    last = 0.0
    missing: list[str] = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        f = line.split(",")
        if len(f) < 4:
            continue
        try:
            t = float(f[0])
        except ValueError:
            continue
        value, unit, event = f[1].strip(), f[2].strip(), f[3].strip()
        if value.startswith("<"):  # <not counted> / <not supported>: once per event
            note = f"{event} {value}"
            if note not in missing:
                missing.append(note)
            continue
        try:
            v = float(value)
        except ValueError:
            continue
        totals[event] = totals.get(event, 0.0) + v
        units[event] = unit
        last = max(last, t)
    return totals, units, last, missing


def _kind(event: str) -> tuple[str, str] | None:
    """('read'|'write', scheduler) of a CAS event name, else None."""
    e = event.lower()
    if "cas_count_read" in e or "cas_count.rd" in e:
        return "read", "sch1" if "sch1" in e else "sch0"
    if "cas_count_write" in e or "cas_count.wr" in e:
        return "write", "sch1" if "sch1" in e else "sch0"
    return None


def parse(records: list[dict[str, Any]], directory: Path) -> CollectorOutput:
    out = CollectorOutput()
    for r in records:
        if r.get("part") and r.get("unsupported"):
            out.notes.append(f"{r['part']}: {r['unsupported']}")
    core = directory / "perf_core.csv"
    if core.exists():
        totals, _, _, missing = read_csv(core.read_text(errors="replace"))
        out.notes += [f"core: {m}" for m in missing]
        if "cycles" in totals:
            out.metrics.append(metric("cycles", totals["cycles"], "count"))
        if "instructions" in totals:
            out.metrics.append(metric("instructions", totals["instructions"], "count"))
        if totals.get("cycles") and "instructions" in totals:
            out.metrics.append(metric("ipc", totals["instructions"] / totals["cycles"], "ratio"))
    imc = directory / "perf_imc.csv"
    if imc.exists():
        totals, units, elapsed, missing = read_csv(imc.read_text(errors="replace"))
        out.notes += [f"imc: {m}" for m in missing]
        bytes_by = {"read": 0.0, "write": 0.0}
        schedulers: dict[str, set[str]] = {"read": set(), "write": set()}
        for event, value in totals.items():
            kind = _kind(event)
            if kind is None:
                continue
            bytes_by[kind[0]] += cas_bytes(value, units.get(event, ""))
            schedulers[kind[0]].add(kind[1])
        if schedulers["read"]:
            sch = "+".join(sorted(schedulers["read"]))
            out.metrics.append(metric("dram_read_bytes", bytes_by["read"], "B", schedulers=sch))
            out.metrics.append(metric("dram_write_bytes", bytes_by["write"], "B", schedulers=sch))
            if elapsed > 0:
                out.metrics.append(
                    metric(
                        "dram_read_bandwidth",
                        bytes_by["read"] / elapsed / 1e9,
                        "GB/s",
                        schedulers=sch,
                    )
                )
            if bytes_by["read"] > 0:
                out.metrics.append(
                    metric("dram_write_fraction", bytes_by["write"] / bytes_by["read"], "fraction")
                )
    return out
