"""A campaign's store as typed pandas frames (columns: socketlab.results.schema). Read-only.

``runs``: one row per run key; ``metrics``: one row per stored metric value, in the order the
store holds them, joined to runs on demand (``with_runs``); ``requests``: one row per serving
request, with the per-request latencies the serving metrics are computed from.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from socketlab.cpulist import parse_cpulist
from socketlab.errors import SocketlabError
from socketlab.hostside.fingerprint import drift
from socketlab.results import schema
from socketlab.results.schema import DIM, PARAM, RESERVED
from socketlab.store import REQUEST_COLUMNS


def param_column(name: str) -> str:
    """The column a run parameter goes in: its name, or ``param.<name>`` where a fixed column
    has that name (a parameter called ``host`` or ``value``)."""
    return PARAM + name if name in RESERVED or name.startswith((DIM, PARAM)) else name


def runs_frame(records: list[Any]) -> pd.DataFrame:
    """socketlab.store.RunRecord list -> the runs frame."""
    rows = [_run_row(r) for r in records]
    frame = pd.DataFrame(rows, columns=[c.name for c in schema.RUNS])
    frame = schema.typed(frame, schema.RUNS)
    names = list(dict.fromkeys(k for r in records for k in (r.params or {})))
    for name in names:
        frame[param_column(name)] = schema.infer([(r.params or {}).get(name) for r in records])
    return frame


def _run_row(r: Any) -> dict[str, Any]:
    build = r.build if isinstance(r.build, dict) else {}
    before = r.fingerprint_before if isinstance(r.fingerprint_before, dict) else {}
    after = r.fingerprint_after if isinstance(r.fingerprint_after, dict) else None
    return {
        "run_key": r.run_key,
        "campaign": r.campaign,
        "experiment": r.experiment,
        "host": r.host,
        "repetition": r.repetition,
        "status": r.status,
        "reason": r.reason,
        "exit_code": r.exit_code,
        "started": r.started,
        "finished": r.finished,
        "duration_s": r.duration_s,
        "cpus": r.cpus or None,
        "n_cpus": _n_cpus(r.cpus),
        "build_name": build.get("name"),
        "build_hash": build.get("build_hash"),
        "build_flags": build.get("cflags", build.get("flags")),
        "compiler": build.get("compiler"),
        **{f"host_{k}": before.get(k) for k in ("kernel", "smt", "thp", "governor", "isolated")},
        "drift": "; ".join(drift(before, after)) if before and after else "",
        "spec_sha256": r.spec_sha256,
        "attempts": r.attempts,
        "raw_dir": r.raw_dir,
    }


def _n_cpus(cpus: str | None) -> int | None:
    if not cpus:
        return None
    try:
        return len(parse_cpulist(cpus))
    except (SocketlabError, ValueError):  # a list the runner stored as given, not a kernel list
        return None


def metrics_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Store.metric_rows (run_key, name, value, unit, dims JSON, parser) -> the metrics frame:
    every stored value once, dimensions as ``dim.<name>`` columns."""
    frame = pd.DataFrame(
        {
            "run_key": [r["run_key"] for r in rows],
            "metric": [r["name"] for r in rows],
            "value": [r["value"] for r in rows],
            "unit": [r["unit"] for r in rows],
            "parser": [r["parser"] for r in rows],
        }
    )
    frame = schema.typed(frame, schema.METRICS)
    # JSON parsed once per distinct dims text, not per row (a layer campaign has thousands)
    dims = {text: json.loads(text) for text in dict.fromkeys(r["dims"] for r in rows)}
    for name in dict.fromkeys(n for d in dims.values() for n in d):
        frame[DIM + name] = schema.infer([dims[r["dims"]].get(name) for r in rows])
    return frame


def requests_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Store.request_rows -> the requests frame, latencies by socketlab.serve.metrics (the one
    definition the serving report uses)."""
    from socketlab.serve.metrics import MS, per_request
    from socketlab.serve.records import RequestRecord

    out = []
    for row in rows:
        rec = RequestRecord.from_json(json.loads(row["record"]))
        lat = per_request(rec)
        out.append(
            {
                **{k: row[k] for k in REQUEST_COLUMNS if k not in ("events", "record")},
                "n_events": len(rec.events),
                **{
                    f"{k}_ms": None if lat[k] is None else lat[k] / MS
                    for k in ("ttft", "tpot", "e2el")
                },
            }
        )
    frame = pd.DataFrame(out, columns=[c.name for c in schema.REQUESTS])
    return schema.typed(frame, schema.REQUESTS)


def with_runs(metrics: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """Each metric row with its run's columns (run columns first), metric order kept."""
    run_cols = [c for c in runs.columns if c != "run_key"]
    joined = metrics.merge(runs, on="run_key", how="left", validate="many_to_one", sort=False)
    metric_cols = [c for c in metrics.columns if c != "run_key"]
    return joined[["run_key", *run_cols, *metric_cols]]
