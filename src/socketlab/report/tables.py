"""Plain measured tables: per experiment, the median, min–max and n of every metric. Pure.

Input is ``Store.metrics_frame(campaign)``; only runs stored "ok" count. One row per
(host, parameters, metric, unit, dimensions); parameters that an experiment doesn't sweep are
left out of its table.
"""

from __future__ import annotations

import json
import math
from typing import Any

from socketlab.store.status import RunStatus

BASE_COLUMNS = {
    "run_key",
    "campaign",
    "experiment",
    "host",
    "repetition",
    "status",
    "metric",
    "value",
    "unit",
    "parser",
}


def _fmt(value: float) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 1e6 or magnitude < 1e-3:
        return f"{value:.3e}"
    if magnitude >= 100:
        return f"{value:,.1f}"
    return f"{value:.4g}"


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))  # a column with gaps turns ints into floats in pandas
    return str(value)


def experiment_tables(frame) -> list[tuple[str, list[str], list[list[str]]]]:
    """[(experiment, headers, rows)] in order of first appearance; medians of ok runs."""
    if frame is None or frame.empty:
        return []
    ok = frame[frame["status"] == RunStatus.OK]
    out = []
    for experiment in dict.fromkeys(ok["experiment"]):
        sub = ok[ok["experiment"] == experiment]
        extra = [c for c in sub.columns if c not in BASE_COLUMNS and sub[c].notna().any()]
        params = [c for c in extra if not c.startswith("dim.")]
        # A dimension that repeats a parameter (a binary echoing --kernel) adds nothing.
        dims = [c for c in extra if c.startswith("dim.") and c.removeprefix("dim.") not in params]
        keys = ["host", *params, "metric", "unit", *dims]
        groups: dict[tuple, list[float]] = {}
        for data in sub.to_dict("records"):
            ident = tuple(_cell(data.get(k)) for k in keys)
            groups.setdefault(ident, []).append(float(data["value"]))
        headers = [k.removeprefix("dim.") for k in keys] + ["median", "min", "max", "n"]
        rows = []
        for ident, values in groups.items():
            values.sort()
            mid = len(values) // 2
            median = values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2
            rows.append([*ident, _fmt(median), _fmt(values[0]), _fmt(values[-1]), str(len(values))])
        out.append((experiment, headers, rows))
    return out


def format_table(headers: list[str], rows: list[list[str]]) -> str:
    """A fixed-width text table; numbers right-aligned."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    numeric = {len(headers) - i for i in range(1, 5)}

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in numeric else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, rows)])


def render_tables(campaign: str, frame, counts: dict[str, int] | None = None) -> str:
    """The whole plain report as text (also valid markdown-ish: tables in code blocks)."""
    parts = [f"campaign {campaign}: medians of runs stored ok (min–max, n)"]
    if counts:
        parts.append("runs: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    tables = experiment_tables(frame)
    if not tables:
        parts.append("no metrics from ok runs yet")
    for experiment, headers, rows in tables:
        parts.append(f"\n## {experiment}\n\n```\n{format_table(headers, rows)}\n```")
    return "\n".join(parts) + "\n"
