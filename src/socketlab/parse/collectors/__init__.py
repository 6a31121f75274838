"""Controller side of the collectors: turn what a collector left in its folder into metrics.

Collectors (collectors/*.py) run on target hosts with the stdlib only and record raw samples
(JSON lines, and for tool-backed ones the tool's own output such as ``perf stat -x,`` CSV or a
turbostat table). ``collector_metrics(name, directory)`` parses them here, on the controller,
with the parser in ``socketlab.parse.collectors.<name>``; a collector without one falls back to
the native JSON-lines contract (metric records in ``<name>.jsonl``). One parser per collector,
``parse(records, directory) -> CollectorOutput``: pure functions of the recorded files, tested on
fixtures under tests/fixtures/collectors/.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: collectors with a parser module in socketlab.parse.collectors
PARSERS = ("clock_freq", "rapl_power", "perf_stat", "proc_noise")
#: metric name -> the collector that measures it (so a report can say which one was unsupported)
METRIC_SOURCES = {
    **{f"busy_mhz_{s}": "clock_freq" for s in ("mean", "p5", "min", "max")},
    "core_temp_max": "clock_freq",
    "turbostat_package_power": "clock_freq",
    "turbostat_dram_power": "clock_freq",
    "package_power": "rapl_power",
    "dram_power": "rapl_power",
    **{
        m: "perf_stat"
        for m in (
            "cycles",
            "instructions",
            "ipc",
            "dram_read_bytes",
            "dram_write_bytes",
            "dram_read_bandwidth",
            "dram_write_fraction",
        )
    },
    "irq_rate": "proc_noise",
    "irq_rate_max": "proc_noise",
}
VERSION = "1"


@dataclass
class CollectorOutput:
    """What one collector measured in one run."""

    metrics: list[dict[str, Any]] = field(default_factory=list)  #: name, value, unit, dims
    unsupported: str | None = None  #: the collector's "unsupported here" reason, if any
    notes: list[str] = field(default_factory=list)  #: parts that did not count, one line each


def read_records(path: Path) -> list[dict[str, Any]]:
    """JSON objects of a .jsonl file; other lines are skipped."""
    out: list[dict[str, Any]] = []
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict):
                out.append(rec)
    return out


def metric(name: str, value: float, unit: str, **dims: Any) -> dict[str, Any]:
    return {"name": name, "value": float(value), "unit": unit, "dims": dims}


def collector_metrics(name: str, directory: str | Path) -> CollectorOutput:
    """Parse collector ``name``'s files in ``directory`` (a run's collectors folder)."""
    directory = Path(directory)
    records = read_records(directory / f"{name}.jsonl")
    unsupported = next((str(r["unsupported"]) for r in records if "unsupported" in r), None)
    if name in PARSERS:
        module = importlib.import_module(f"socketlab.parse.collectors.{name}")
        out = module.parse(records, directory)
        out.unsupported = out.unsupported or unsupported
        return out
    from socketlab.parse.jsonl import parse_jsonl

    found, _, _ = parse_jsonl("\n".join(json.dumps(r) for r in records))
    return CollectorOutput(metrics=found, unsupported=unsupported)
