"""The report's cells as a frame: built from the rows of ``socketlab.report.gather.build_report``
itself, so the API, `report --json` and the report can't disagree. And which cells a CI gate
(`report --fail-on`) fails on.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from socketlab.report.compare import DEVIATES, DEVIATES_PER_CORE, INCONCLUSIVE, NOT_RUN
from socketlab.results import schema

#: `--fail-on` words -> the report's verdict kinds
FAIL_ON = {
    "deviates": (DEVIATES, DEVIATES_PER_CORE),
    "inconclusive": (INCONCLUSIVE,),
    "not-run": (NOT_RUN,),
}


def verdict_frame(report: Any, campaign: str) -> pd.DataFrame:
    """One row per published cell and host of a socketlab.report.render.Report (None: the
    campaign has no published values, so no rows)."""
    rows: list[dict[str, Any]] = []
    if report is not None:
        files = {id(c): pub.path.name for pub in report.published for c in pub.cells}
        rows = [_row(r, campaign, files.get(id(r.cell))) for r in report.rows]
    frame = pd.DataFrame(rows, columns=[c.name for c in schema.VERDICTS])
    return schema.typed(frame, schema.VERDICTS)


def _row(r: Any, campaign: str, published_file: str | None) -> dict[str, Any]:
    c, m, iv = r.cell, r.measured, r.interval
    pcm = r.per_core_measured
    return {
        "campaign": campaign,
        "published_file": published_file,
        "table": c.table,
        "row": c.row,
        "column": c.column,
        "cell": c.id,
        "label": c.label,
        "experiment": c.experiment,
        "metric": c.metric,
        "host": r.host,
        "unit": c.unit,
        "better": c.better,
        "published": c.reference,
        "published_low": c.range[0] if c.range else None,
        "published_high": c.range[1] if c.range else None,
        "measured": m.median if m else None,
        "measured_min": m.minimum if m else None,
        "measured_max": m.maximum if m else None,
        "n": m.n if m else None,
        "interval_low": iv.low if iv else None,
        "interval_high": iv.high if iv else None,
        "interval_level": iv.level if iv else None,
        "per_core_published": r.per_core_published
        if r.per_core_published is not None
        else c.per_core_reference,
        "per_core_measured": pcm.median if pcm else None,
        "ratio": r.ratio,
        "kind": r.kind,
        "verdict": r.verdict,
        "source": c.source,
    }


def failing(frame: pd.DataFrame, words: list[str]) -> pd.DataFrame:
    """The cells whose kind one of ``words`` (FAIL_ON keys) names."""
    kinds = {k for w in words for k in FAIL_ON[w]}
    return frame[frame["kind"].astype(str).isin(kinds)]


def cell_line(row: Any) -> str:
    """'ladder/l2-1.0-thp-amx/bw_total on gnr-kvm: deviates per core: 0.61x ...'."""
    host = "" if pd.isna(row["host"]) else f" on {row['host']}"
    return f"{row['cell']}{host}: {row['verdict']}"
