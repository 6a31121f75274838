"""Published vs measured: join each published cell to the measured median and give a verdict.

Pure: takes the published cells, the store's metric rows (a DataFrame shaped like
``Store.metrics_frame``), the hosts' facts and the planner's skip reasons; returns rows. No I/O.

Verdicts, in the order they are decided for each (cell, host):

- ``not run: <reason>``: nothing in the campaign measures the cell (its table says why), the host
  lacks a CPU flag the measurement needs, the planner skipped the experiment on the host, or no
  stored run has the cell's experiment, metric and join parameters;
- ``not comparable: host is X (n cores), published host is Y (m cores)``: measured on a host that is
  not the published one (different CPU model or core count), so a ratio would mean nothing;
- ``reproduced within tolerance`` or ``deviates: <ratio> (<tolerance>)``.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from socketlab.report.published import Cell, Published

#: Run statuses whose metrics count. Anything else (failed, timeout, invalid, ...) is ignored.
GOOD_STATUSES = frozenset({"ok", "complete", "completed", "success", "succeeded", "passed"})

#: metric dimensions that say how big the measured run was; shown next to the median
SCALE_DIMS = ("threads", "workers", "participants", "cpus")

REPRODUCED = "reproduced"
DEVIATES = "deviates"
NOT_RUN = "not run"
NOT_COMPARABLE = "not comparable"

#: unit -> (dimension, factor to the dimension's base unit). Same dimension = convertible.
_UNITS: dict[str, tuple[str, float]] = {
    "MB/s": ("bw", 1e6), "GB/s": ("bw", 1e9), "TB/s": ("bw", 1e12),
    "Gflop/s": ("flops", 1e9), "Tflop/s": ("flops", 1e12),
    "GFLOP/s": ("flops", 1e9), "TFLOP/s": ("flops", 1e12),
    "MHz": ("freq", 1e6), "GHz": ("freq", 1e9),
    "ns": ("time", 1e-9), "us": ("time", 1e-6), "µs": ("time", 1e-6), "ms": ("time", 1e-3),
    "s": ("time", 1.0),
    "B": ("bytes", 1.0), "KiB": ("bytes", 1024.0), "MiB": ("bytes", 1024.0**2),
    "GiB": ("bytes", 1024.0**3), "MB": ("bytes", 1e6),
    "fraction": ("frac", 1.0), "percent": ("frac", 0.01),
}


def convert(value: float, unit: str, to: str) -> float | None:
    """``value`` in ``unit`` expressed in ``to``; None when the units are not convertible."""
    if unit == to:
        return value
    a, b = _UNITS.get(unit), _UNITS.get(to)
    if a is None or b is None or a[0] != b[0]:
        return None
    return value * a[1] / b[1]


@dataclass(frozen=True)
class Measured:
    median: float
    minimum: float
    maximum: float
    n: int
    unit: str
    #: metric dimensions every counted value shares (e.g. participants=2 on a 2-core host)
    dims: dict[str, Any] = field(default_factory=dict)

    def text(self, digits: int = 3) -> str:
        scale = [f"{k}={self.dims[k]:g}" if isinstance(self.dims[k], float) else
                 f"{k}={self.dims[k]}" for k in SCALE_DIMS if k in self.dims]
        return f"{fmt(self.median, digits)} ({fmt(self.minimum, digits)}–" \
               f"{fmt(self.maximum, digits)}, n={self.n}" + \
               (f"; {', '.join(scale)}" if scale else "") + ")"


@dataclass(frozen=True)
class Row:
    """One line of the comparison: a published cell on one host."""

    cell: Cell
    host: str | None
    measured: Measured | None
    ratio: float | None
    kind: str  #: reproduced | deviates | not run | not comparable
    verdict: str  #: the full verdict text

    @property
    def published_text(self) -> str:
        c = self.cell
        if c.value is not None:
            return fmt(c.value)
        if c.range is not None:
            return f"{fmt(c.range[0])}–{fmt(c.range[1])}"
        return fmt(c.reference)


def fmt(x: float | None, digits: int = 4) -> str:
    """Numbers as people write them: 15,010 · 171 · 1.81 · 0.005."""
    if x is None:
        return "—"
    if x == 0:
        return "0"
    ax = abs(x)
    if ax >= 1000:
        return f"{x:,.0f}"
    if ax >= 100:
        return f"{x:.1f}".rstrip("0").rstrip(".")
    return f"{x:.{digits}g}"


def short_model(model: str) -> str:
    """'Intel(R) Xeon(R) 6975P-C' -> 'Xeon 6975P-C'; 'AMD EPYC 9R14 96-Core Processor' -> 'AMD EPYC 9R14'."""
    s = re.sub(r"\((R|TM)\)", "", model or "unknown CPU", flags=re.I)
    s = re.sub(r"\b\d+-Core Processor\b|\bProcessor\b|\bCPU\b|@.*$", "", s, flags=re.I)
    s = re.sub(r"^\s*Intel\s+", "", s, flags=re.I)
    return " ".join(s.split()) or "unknown CPU"


def _norm_model(model: str) -> str:
    return short_model(model).lower()


def host_difference(published_host: Mapping[str, Any], topology: Mapping[str, Any]) -> str | None:
    """None when the measured host is the published one; else the difference, for the verdict."""
    model = str(topology.get("cpu_model") or "unknown CPU")
    cores = topology.get("cores")
    same_model = _norm_model(model) == _norm_model(str(published_host["model"]))
    same_cores = cores == published_host["cores"]
    if same_model and same_cores:
        return None
    return (f"host is {short_model(model)} ({cores} cores), published host is "
            f"{short_model(str(published_host['model']))} ({published_host['cores']} cores)")


def _equal(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return False
    if isinstance(a, bool) or isinstance(b, bool):
        return str(a).lower() == str(b).lower()
    try:
        fa, fb = float(a), float(b)
    except (TypeError, ValueError):
        return str(a) == str(b)
    return abs(fa - fb) <= 1e-9 * max(1.0, abs(fa), abs(fb))


def _param(record: Mapping[str, Any], key: str) -> Any:
    """A run parameter, or else a metric dimension of that name (``dim.<key>``)."""
    for k in (key, f"dim.{key}"):
        v = record.get(k)
        if v is not None and v == v:  # v == v: not NaN (a frame's empty cell)
            return v
    return None


def _values_for(records: list[dict[str, Any]], cell: Cell, host: str
                ) -> tuple[list[float], str, dict[str, Any]]:
    """Values of the cell's metric from good runs on ``host`` whose parameters match the join,
    their unit, and the metric dimensions they all share."""
    out: list[float] = []
    unit = ""
    shared: dict[str, Any] | None = None
    for r in records:
        if r.get("host") != host or r.get("experiment") != cell.experiment:
            continue
        if r.get("metric") != cell.metric:
            continue
        if str(r.get("status", "ok")).lower() not in GOOD_STATUSES:
            continue
        rep = r.get("repetition", 0)
        if rep is not None and rep == rep and int(rep) < 0:  # warm-up (rep == rep: not NaN)
            continue
        stat = r.get("dim.stat")
        if stat is not None and stat == stat and stat not in ("", "rep"):
            continue  # a summary of the reps (best, median), printed after the per-rep records
        if not all(_equal(_param(r, k), v) for k, v in cell.join_params().items()):
            continue
        value = r.get("value")
        if value is None or value != value:
            continue
        divisor = float(cell.conditions[cell.divide_by]) if cell.divide_by else 1.0
        out.append(float(value) / divisor)
        unit = str(r.get("unit") or unit)
        dims = {k[4:]: v for k, v in r.items()
                if k.startswith("dim.") and v is not None and v == v and k not in ("dim.rep",)}
        shared = dims if shared is None else {k: v for k, v in shared.items()
                                              if k in dims and dims[k] == v}
    return out, unit, shared or {}


def _describe_join(cell: Cell) -> str:
    params = ", ".join(f"{k}={v}" for k, v in cell.join_params().items())
    return f"no {cell.experiment} run" + (f" with {params}" if params else "") + \
        f" reported {cell.metric}"


def _judge(cell: Cell, m: Measured) -> tuple[str, str, float | None]:
    ref = cell.reference
    # a ratio to a published 0 (idle device IRQs) is undefined: say the two numbers instead
    ratio = m.median / ref if ref else None
    tol = cell.tolerance
    if cell.range is not None:
        lo, hi = cell.range
        ok = lo <= m.median <= hi or tol.allows(lo, m.median) or tol.allows(hi, m.median)
    else:
        ok = tol.allows(ref, m.median)
    if ok:
        return REPRODUCED, f"reproduced within tolerance ({tol.text()})", ratio
    direction = ""
    if cell.better != "none":
        better = (m.median > ref) == (cell.better == "higher")
        direction = ", better" if better else ", worse"
    how = f"{ratio:.2f}x of published" if ratio is not None else \
        f"{fmt(m.median)} against a published 0"
    return DEVIATES, f"deviates: {how} ({tol.text()}{direction})", ratio


def compare(
    published: Published,
    metrics: Any,
    hosts: Mapping[str, Mapping[str, Any]],
    skips: Iterable[tuple[str, str, str]] = (),
    runs: Iterable[Mapping[str, Any]] = (),
    explain: Callable[[Cell, str], str | None] | None = None,
) -> list[Row]:
    """Every published cell against every host that has facts.

    ``metrics``: a DataFrame (or list of dicts) with columns experiment, host, repetition, status,
    metric, value, unit and one column per run parameter. ``hosts``: inventory name -> facts as
    ``gather_facts`` returns them ({"topology": Topology.facts(), ...}) or the topology facts
    directly. ``skips``: (host, experiment, reason) from the plan. ``runs``: stored runs
    (experiment, host, params, status, reason, and ``collectors``: collector -> its
    "unsupported here" reason) so a cell whose runs failed or whose collector could not measure
    says why. ``explain(cell, host)``: why the campaign has no such point (e.g. left out by a
    profile), asked last.
    """
    records = metrics.to_dict("records") if hasattr(metrics, "to_dict") else list(metrics)
    skip_reason = {(h, e): r for h, e, r in skips}
    all_runs = list(runs)
    host_names = sorted(hosts) or sorted({str(r["host"]) for r in records if r.get("host")})
    rows: list[Row] = []
    for cell in published.cells:
        if not host_names:
            reason = cell.unmeasured or "no host has run this campaign yet"
            rows.append(Row(cell, None, None, None, NOT_RUN, f"not run: {reason}"))
            continue
        for host in host_names:
            rows.append(_row(published, cell, host, hosts.get(host, {}), records, skip_reason,
                             all_runs, explain))
    return rows


def _failure(cell: Cell, host: str, runs: list[Mapping[str, Any]]) -> str | None:
    """Why stored runs of the cell's experiment and join parameters gave no value: the run
    failed ('failed: <reason>'), or the collector measuring the metric was unsupported."""
    from socketlab.collect import METRIC_SOURCES

    collector = METRIC_SOURCES.get(cell.metric)
    for run in runs:
        if run.get("host") != host or run.get("experiment") != cell.experiment:
            continue
        params = run.get("params") or {}
        if not all(_equal(params.get(k), v) for k, v in cell.join_params().items()
                   if k in params):
            continue
        if str(run.get("status", "")).lower() not in GOOD_STATUSES:
            reason = str(run.get("reason") or "").strip()
            return f"{run.get('status')}" + (f": {reason}" if reason else "")
        why = (run.get("collectors") or {}).get(collector) if collector else None
        if why:
            return f"collector {collector} unsupported here: {why}"
    return None


def _row(published: Published, cell: Cell, host: str, facts: Mapping[str, Any],
         records: list[dict[str, Any]], skip_reason: Mapping[tuple[str, str], str],
         runs: list[Mapping[str, Any]] = (),
         explain: Callable[[Cell, str], str | None] | None = None) -> Row:
    topo = facts.get("topology", facts) if isinstance(facts, Mapping) else {}
    if cell.unmeasured or not cell.experiment:
        return Row(cell, host, None, None, NOT_RUN, f"not run: {cell.unmeasured}")
    flags = set(topo.get("flags", ())) if topo else set()
    missing = [f for f in cell.requires if topo and f not in flags]
    if missing:
        return Row(cell, host, None, None, NOT_RUN, f"not run: host lacks {', '.join(missing)}")
    values, unit, dims = _values_for(records, cell, host)
    if not values:
        reason = (skip_reason.get((host, cell.experiment)) or _failure(cell, host, runs)
                  or (explain(cell, host) if explain else None) or _describe_join(cell))
        return Row(cell, host, None, None, NOT_RUN, f"not run: {reason}")
    unit = unit or cell.unit
    converted = [convert(v, unit, cell.unit) for v in values]
    if any(v is None for v in converted):
        m = Measured(statistics.median(values), min(values), max(values), len(values), unit)
        return Row(cell, host, m, None, NOT_COMPARABLE,
                   f"not comparable: measured in {unit}, published in {cell.unit}")
    vals = [float(v) for v in converted if v is not None]
    center = {"min": min, "max": max}.get(cell.statistic, statistics.median)(vals)
    m = Measured(center, min(vals), max(vals), len(vals), cell.unit, dims)
    diff = host_difference(published.host, topo) if topo else "host facts are missing"
    if diff:  # a ratio against another machine's number would only mislead
        return Row(cell, host, m, None, NOT_COMPARABLE, f"not comparable: {diff}")
    kind, verdict, ratio = _judge(cell, m)
    return Row(cell, host, m, ratio, kind, verdict)


def summary(rows: Iterable[Row]) -> dict[str, int]:
    """Counts per verdict kind, for the report's header."""
    out = {REPRODUCED: 0, DEVIATES: 0, NOT_COMPARABLE: 0, NOT_RUN: 0}
    for r in rows:
        out[r.kind] = out.get(r.kind, 0) + 1
    return out
