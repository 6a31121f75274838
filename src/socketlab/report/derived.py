"""Metrics the published stage tables name that native/layer reports in parts.

The stage prints, per run, ``step_p50`` and per phase (``dim.phase``: qkv, attention, combine, o,
gateup, down, ple_gate, ple_proj) ``phase_compute`` and ``phase_gemv`` (max over workers, µs
per step) and ``phase_barrier`` (mean over workers). The published tables give sums and
differences of those: a layer's GEMV time, its barrier time, its attention, and P3's "sync +
broadcast = step p50 - the no-all-gather compute". ``derive`` adds one record per run for each
such figure, computed from that run's own records, so the comparison joins them like any
metric. A run that already has a metric of that name (a fixture, another binary) keeps it.

Pure: records in (dicts shaped like ``Store.metrics_frame`` rows), records out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

#: derived metric -> (what it is, how: phase sums by metric -> value or None)
Phases = Mapping[str, Mapping[str, float]]  #: metric -> phase -> value


def _sum(metric: str, phases: tuple[str, ...] = ()) -> Callable[[Phases, Mapping], float | None]:
    def f(by: Phases, _: Mapping[str, float]) -> float | None:
        values = by.get(metric) or {}
        picked = [v for p, v in values.items() if not phases or p in phases]
        return sum(picked) if picked and (not phases or len(picked) == len(phases)) else None

    return f


def _mean(metric: str) -> Callable[[Phases, Mapping], float | None]:
    def f(by: Phases, _: Mapping[str, float]) -> float | None:
        values = list((by.get(metric) or {}).values())
        return sum(values) / len(values) if values else None

    return f


def _sync(by: Phases, plain: Mapping[str, float]) -> float | None:
    compute = _sum("phase_compute")(by, plain)
    step = plain.get("step_p50")
    return step - compute if compute is not None and step is not None else None


DERIVED: dict[str, tuple[str, Callable[[Phases, Mapping[str, float]], float | None]]] = {
    "compute_total": (
        "sum over the 8 phases of the slowest worker's compute",
        _sum("phase_compute"),
    ),
    "gemv_total": ("sum over the phases of the slowest worker's GEMV time", _sum("phase_gemv")),
    "barrier_total": ("sum over the phases of the mean barrier wait", _sum("phase_barrier")),
    "barrier_each": ("mean barrier wait of one phase", _mean("phase_barrier")),
    "attention_us": (
        "split-K attention and its combine (slowest worker)",
        _sum("phase_compute", ("attention", "combine")),
    ),
    "gateup_us": ("gate, up and act (slowest worker)", _sum("phase_compute", ("gateup",))),
    "down_us": ("down projection (slowest worker)", _sum("phase_compute", ("down",))),
    "sync_bcast": ("step p50 - compute_total: what synchronisation and broadcast add", _sync),
}

#: metrics derivation reads; a run without any of them gets nothing derived
SOURCES = frozenset({"phase_compute", "phase_gemv", "phase_barrier", "step_p50"})


def derive(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """``records`` plus one record per (run, derived metric) the run's records allow."""
    records = list(records)
    runs: dict[Any, list[dict[str, Any]]] = {}
    for r in records:
        if r.get("metric") in SOURCES and r.get("run_key") is not None:
            runs.setdefault(r["run_key"], []).append(r)
    have = {(r.get("run_key"), r.get("metric")) for r in records}
    out = list(records)
    for key, rows in runs.items():
        by: dict[str, dict[str, float]] = {}
        plain: dict[str, float] = {}
        for r in rows:
            value = r.get("value")
            if value is None or value != value:
                continue
            phase = r.get("dim.phase")
            if phase is not None and phase == phase:
                by.setdefault(str(r["metric"]), {})[str(phase)] = float(value)
            else:
                plain[str(r["metric"])] = float(value)
        if not by:
            continue
        base = next((r for r in rows if r.get("metric") == "step_p50"), rows[0])
        for name, (_, how) in DERIVED.items():
            if (key, name) in have:
                continue
            value = how(by, plain)
            if value is None:
                continue
            rec = {k: v for k, v in base.items() if k not in ("dim.phase", "dim.mean")}
            rec.update(
                metric=name, value=value, unit="us", parser=f"{base.get('parser', '')}+derived"
            )
            out.append(rec)
    return out
