"""Named-group regexes for tools that print text (sysbench, fio, stress-ng).

Options map a metric name to ``{"pattern": ..., "unit": ..., "group": "value",
"stream": "stdout"|"stderr"}``. Every match gives one metric; the ``group`` holds the number
and any other named group becomes a dimension (e.g. ``(?P<pct>\\d+)th percentile``).
"""

from __future__ import annotations

import math
import re
from typing import Any

VERSION = "1"


def parse_regex(
    options: dict[str, Any], stdout: str, stderr: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    metrics: list[dict[str, Any]] = []
    errors: list[str] = []
    for name, rule in options.items():
        if isinstance(rule, str):
            rule = {"pattern": rule}
        pattern = rule.get("pattern", "")
        group = rule.get("group", "value")
        text = stderr if rule.get("stream", "stdout") == "stderr" else stdout
        try:
            compiled = re.compile(pattern, re.MULTILINE)
        except re.error as exc:
            errors.append(f"metric {name!r}: bad regex ({exc})")
            continue
        if group not in compiled.groupindex:
            errors.append(f"metric {name!r}: pattern has no named group {group!r}")
            continue
        for match in compiled.finditer(text):
            raw = match.group(group)
            try:
                value = float(raw.replace(",", "")) if raw is not None else math.nan
            except ValueError:
                errors.append(f"metric {name!r}: {raw!r} is not a number")
                continue
            if not math.isfinite(value):
                continue
            dims = {k: v for k, v in match.groupdict().items() if k != group and v is not None}
            metrics.append(
                {"name": name, "value": value, "unit": rule.get("unit", ""), "dims": dims}
            )
    return metrics, [], errors
