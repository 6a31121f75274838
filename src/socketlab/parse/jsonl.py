"""The native JSON-lines contract: meta and metric records, one JSON object per line."""

from __future__ import annotations

import json
import math
from typing import Any

VERSION = "1"
_RESERVED = {"type", "name", "value", "unit"}


def parse_jsonl(stdout: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """Return (metrics, meta records, errors). Lines that are not JSON objects are ignored:
    binaries may print a human banner; only records that claim to be metrics must be valid."""
    metrics: list[dict[str, Any]] = []
    meta: list[dict[str, Any]] = []
    errors: list[str] = []
    for number, line in enumerate(stdout.splitlines(), 1):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            errors.append(f"stdout line {number}: not valid JSON ({exc.msg})")
            continue
        if not isinstance(record, dict):
            continue
        kind = record.get("type")
        if kind == "meta":
            meta.append(record)
        elif kind == "metric":
            name, value, unit = record.get("name"), record.get("value"), record.get("unit")
            if not isinstance(name, str) or not name:
                errors.append(f"stdout line {number}: metric record without a name")
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                errors.append(f"stdout line {number}: metric {name!r} value is not a number")
                continue
            if not math.isfinite(value):
                errors.append(f"stdout line {number}: metric {name!r} value is not finite")
                continue
            if not isinstance(unit, str):
                errors.append(f"stdout line {number}: metric {name!r} has no unit string")
                continue
            dims = {k: v for k, v in record.items() if k not in _RESERVED}
            metrics.append({"name": name, "value": float(value), "unit": unit, "dims": dims})
    return metrics, meta, errors
