"""clock_freq collector -> busy_mhz_{mean,p5,min,max} over the run's CPUs, core_temp_max.

Per CPU the busy clock is averaged over the run's intervals; mean / p5 / min / max are then taken
over CPUs (as the seed's "mean worker Bzy_MHz (p5 / min)"). Sources: APERF/MPERF samples, a
turbostat table (``turbostat.txt``), or cpufreq samples.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from socketlab.parse.collectors import CollectorOutput, metric
from socketlab.parse.collectors._stats import spread


def _aperfmperf(records: list[dict[str, Any]]) -> dict[str, float]:
    samples = [r for r in records if r.get("mode") == "aperfmperf" and "aperf_mperf" in r]
    per_cpu: dict[str, list[float]] = {}
    for a, b in zip(samples, samples[1:], strict=False):
        base = float(b.get("base_mhz") or a.get("base_mhz") or 0)
        for cpu, (ap1, mp1) in b["aperf_mperf"].items():
            if cpu not in a["aperf_mperf"]:
                continue
            ap0, mp0 = a["aperf_mperf"][cpu]
            dm = (mp1 - mp0) % (1 << 64)
            if dm == 0:
                continue  # idle all interval: no busy clock to report
            per_cpu.setdefault(cpu, []).append(base * ((ap1 - ap0) % (1 << 64)) / dm)
    return {c: statistics.fmean(v) for c, v in per_cpu.items()}


def parse_turbostat(
    text: str,
) -> tuple[dict[str, list[float]], list[float], dict[str, list[float]]]:
    """(per-CPU Bzy_MHz samples, CoreTmp samples, summary-row columns) of a turbostat table."""
    header: list[str] | None = None
    per_cpu: dict[str, list[float]] = {}
    temps: list[float] = []
    summary: dict[str, list[float]] = {}
    for line in text.splitlines():
        cols = line.split()
        if not cols:
            continue
        if cols[0] in ("CPU", "Core", "Package") or "Bzy_MHz" in cols:
            header = cols
            continue
        if header is None:
            continue
        # per-CPU rows omit the package columns except on a package's first CPU: zip truncates
        row = dict(zip(header, cols, strict=False))
        cpu = row.get("CPU", "-")
        try:
            if cpu == "-":
                for k, v in row.items():
                    if k != "CPU":
                        summary.setdefault(k, []).append(float(v))
                continue
            if "Bzy_MHz" in row:
                per_cpu.setdefault(cpu, []).append(float(row["Bzy_MHz"]))
            if "CoreTmp" in row:
                temps.append(float(row["CoreTmp"]))
        except ValueError:
            continue
    return per_cpu, temps, summary


def parse(records: list[dict[str, Any]], directory: Path) -> CollectorOutput:
    out = CollectorOutput()
    modes = {r.get("mode") for r in records if r.get("mode")}
    per_cpu: dict[str, float] = {}
    if "aperfmperf" in modes:
        per_cpu = _aperfmperf(records)
    elif "turbostat" in modes:
        path = directory / "turbostat.txt"
        text = path.read_text(errors="replace") if path.exists() else ""
        samples, temps, summary = parse_turbostat(text)
        per_cpu = {c: statistics.fmean(v) for c, v in samples.items() if v}
        if temps:
            out.metrics.append(metric("core_temp_max", max(temps), "C", source="turbostat"))
        for col, name, unit in (
            ("PkgWatt", "turbostat_package_power", "W"),
            ("RAMWatt", "turbostat_dram_power", "W"),
        ):
            if summary.get(col):
                out.metrics.append(metric(name, statistics.fmean(summary[col]), unit))
        if not samples:
            out.notes.append("turbostat.txt has no per-CPU Bzy_MHz rows")
    elif "cpufreq" in modes:
        vals: dict[str, list[float]] = {}
        for r in records:
            for cpu, mhz in (r.get("mhz") or {}).items():
                vals.setdefault(cpu, []).append(float(mhz))
        per_cpu = {c: statistics.fmean(v) for c, v in vals.items() if v}
    temps = [
        float(r["temp_c_max"]) for r in records if isinstance(r.get("temp_c_max"), int | float)
    ]
    if temps and "turbostat" not in modes:
        out.metrics.append(metric("core_temp_max", max(temps), "C", source="hwmon"))
    source = next(iter(sorted(modes)), None)
    for name, value, unit in spread("busy_mhz", per_cpu, "MHz"):
        out.metrics.append(metric(name, value, unit, clock_source=source, cpus=len(per_cpu)))
    return out
