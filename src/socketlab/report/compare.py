"""Published vs measured: join each published cell to the measured median and give a verdict.

Pure: takes the published cells, the store's metric rows (a DataFrame shaped like
``Store.metrics_frame``), the hosts' facts and the planner's skip reasons; returns rows. No I/O.

Verdicts, in the order they are decided for each (cell, host):

- ``not run: <reason>``: nothing in the campaign measures the cell (its table says why), the host
  lacks a CPU flag the measurement needs, the planner skipped the experiment on the host, or no
  stored run has the cell's experiment, metric and join parameters;
- ``not comparable: host is X (n cores), published host is Y (m cores)``: measured on a host that is
  not the published one (different CPU model or core count), so a ratio would mean nothing;
- ``not comparable: profile quick: 0.2 s per rep vs 2 s published`` and/or ``not comparable:
  conditions differ: workers 93 vs 90``: the published host, but the run did not record the
  published conditions (``CONDITION_SOURCES``: what a run records of each condition). Only
  conditions both sides record are compared; the join keys already equal the run's parameters;
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


#: Published condition -> where a run records it, first found wins: ("dim", name) a dimension of
#: the counted metric values, ("meta", name) the binary's meta record (the run's meta.json), with
#: an optional factor to the published unit. ``reps`` is the number of counted values.
CONDITION_SOURCES: dict[str, tuple[tuple[Any, ...], ...]] = {
    "workers": (("dim", "workers"), ("dim", "threads"), ("meta", "workers"), ("meta", "threads")),
    "participants": (("dim", "participants"),),
    "duration_s": (("meta", "seconds"),),
    "steps": (("meta", "iters"), ("meta", "steps")),
    "vector_bytes": (("dim", "bytes"),),
    "tile_kib": (("dim", "tile_kib"),),
    "kv_mib": (("meta", "kv_bytes", 1 / 2**20),),
    "mib_per_core": (("dim", "bytes_per_core", 1 / 2**20),),
    "pages": (("dim", "page"), ("meta", "page_mode")),
    "kernel": (("dim", "kernel"), ("meta", "kernel")),
    "load": (("meta", "kernel"),),  # what ran beside the noise sampler
    "batch": (("dim", "batch"), ("meta", "batch")),
    "context": (("dim", "tokens"), ("meta", "tokens")),
}
#: Conditions a profile shortens or thins out (named as the profile's doing when one was used).
PROFILE_CONDITIONS = ("duration_s", "steps", "reps")
#: Conditions that follow from the core count: on another host the host difference says it.
HOST_CONDITIONS = ("workers", "participants")
#: Meta records print 6 significant digits (%g): closer than this is the same number.
_REL = 1e-4


def _same(measured: Any, published: Any) -> bool:
    if isinstance(measured, bool) or isinstance(published, bool):
        return str(measured).lower() == str(published).lower()
    try:
        a, b = float(measured), float(published)
    except (TypeError, ValueError):
        return str(measured) == str(published)
    return abs(a - b) <= _REL * max(abs(a), abs(b)) or abs(a - b) < 1e-12


def _show(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    return f"{value:,}" if isinstance(value, int) else fmt(value)


def _recorded(key: str, record: Mapping[str, Any], meta: Mapping[str, Any]) -> Any:
    for source in CONDITION_SOURCES.get(key, ()):
        kind, name, *factor = source
        value = record.get(f"dim.{name}") if kind == "dim" else meta.get(name)
        if value is None or value != value:  # missing, or a frame's empty cell (NaN)
            continue
        if factor:
            try:
                return float(value) * factor[0]
            except (TypeError, ValueError):
                continue
        return value.item() if hasattr(value, "item") else value  # numpy scalars from a frame
    return None


def condition_differences(cell: Cell, counted: list[Mapping[str, Any]],
                          meta: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, str, str]]:
    """(condition, measured, published) for each published condition the counted values'
    records show differently. ``meta``: run key -> that run's binary meta record."""
    out: list[tuple[str, str, str]] = []
    for key, published in cell.conditions.items():
        if key in cell.join:
            continue
        if key == "reps":  # more repetitions than published is the same measurement, repeated
            if len(counted) < int(published):
                out.append((key, str(len(counted)), _show(published)))
            continue
        seen: list[Any] = []
        for r in counted:
            value = _recorded(key, r, meta.get(str(r.get("run_key")), {}))
            if value is not None and not any(_same(value, v) for v in seen):
                seen.append(value)
        if seen and not all(_same(v, published) for v in seen):
            out.append((key, "/".join(_show(v) for v in seen), _show(published)))
    return out


def _differences_text(diffs: list[tuple[str, str, str]], profile: str | None) -> list[str]:
    """'profile quick: 0.2 s per rep vs 2 s, 2 reps vs 3 published' and 'conditions differ:
    workers 93 vs 90'. Shorter runs under a profile are named as the profile's doing."""
    by_profile = [d for d in diffs if profile and d[0] in PROFILE_CONDITIONS]
    rest = [d for d in diffs if d not in by_profile]
    parts = []
    if by_profile:
        items = [f"{m} s per rep vs {p} s" if k == "duration_s" else
                 f"{m} steps vs {p}" if k == "steps" else
                 f"{m} rep{'' if m == '1' else 's'} vs {p}" for k, m, p in by_profile]
        parts.append(f"profile {profile}: " + ", ".join(items) + " published")
    if rest:
        parts.append("conditions differ: " + ", ".join(f"{k} {m} vs {p}" for k, m, p in rest))
    return parts


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
                ) -> tuple[list[float], str, dict[str, Any], list[dict[str, Any]]]:
    """Values of the cell's metric from good runs on ``host`` whose parameters match the join,
    their unit, the metric dimensions they all share, and the records they came from."""
    out: list[float] = []
    counted: list[dict[str, Any]] = []
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
        counted.append(r)
        unit = str(r.get("unit") or unit)
        dims = {k[4:]: v for k, v in r.items()
                if k.startswith("dim.") and v is not None and v == v and k not in ("dim.rep",)}
        shared = dims if shared is None else {k: v for k, v in shared.items()
                                              if k in dims and dims[k] == v}
    return out, unit, shared or {}, counted


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
    profile: str | None = None,
) -> list[Row]:
    """Every published cell against every host that has facts.

    ``metrics``: a DataFrame (or list of dicts) with columns experiment, host, repetition, status,
    metric, value, unit and one column per run parameter. ``hosts``: inventory name -> facts as
    ``gather_facts`` returns them ({"topology": Topology.facts(), ...}) or the topology facts
    directly. ``skips``: (host, experiment, reason) from the plan. ``runs``: stored runs
    (experiment, host, params, status, reason, and ``collectors``: collector -> its
    "unsupported here" reason) so a cell whose runs failed or whose collector could not measure
    says why; with ``run_key`` and ``meta`` (the binary's meta record) they also tell the
    conditions a run recorded. ``explain(cell, host)``: why the campaign has no such point (e.g.
    left out by a profile), asked last. ``profile``: the profile the campaign ran with, named
    when its shorter runs make a cell not comparable.
    """
    records = metrics.to_dict("records") if hasattr(metrics, "to_dict") else list(metrics)
    skip_reason = {(h, e): r for h, e, r in skips}
    all_runs = list(runs)
    meta = {str(r["run_key"]): r.get("meta") or {} for r in all_runs if r.get("run_key")}
    host_names = sorted(hosts) or sorted({str(r["host"]) for r in records if r.get("host")})
    rows: list[Row] = []
    for cell in published.cells:
        if not host_names:
            reason = cell.unmeasured or "no host has run this campaign yet"
            rows.append(Row(cell, None, None, None, NOT_RUN, f"not run: {reason}"))
            continue
        for host in host_names:
            rows.append(_row(published, cell, host, hosts.get(host, {}), records, skip_reason,
                             all_runs, explain, meta, profile))
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
         explain: Callable[[Cell, str], str | None] | None = None,
         meta: Mapping[str, Mapping[str, Any]] | None = None, profile: str | None = None) -> Row:
    topo = facts.get("topology", facts) if isinstance(facts, Mapping) else {}
    if cell.unmeasured or not cell.experiment:
        return Row(cell, host, None, None, NOT_RUN, f"not run: {cell.unmeasured}")
    flags = set(topo.get("flags", ())) if topo else set()
    missing = [f for f in cell.requires if topo and f not in flags]
    if missing:
        return Row(cell, host, None, None, NOT_RUN, f"not run: host lacks {', '.join(missing)}")
    values, unit, dims, counted = _values_for(records, cell, host)
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
    conditions = condition_differences(cell, counted, meta or {})
    if diff:  # conditions the core count decides are part of the host difference
        conditions = [c for c in conditions if c[0] not in HOST_CONDITIONS]
    reasons = ([diff] if diff else []) + _differences_text(conditions, profile)
    if reasons:  # a ratio against another machine's number, or other conditions, would mislead
        return Row(cell, host, m, None, NOT_COMPARABLE, "not comparable: " + "; ".join(reasons))
    kind, verdict, ratio = _judge(cell, m)
    return Row(cell, host, m, ratio, kind, verdict)


def summary(rows: Iterable[Row]) -> dict[str, int]:
    """Counts per verdict kind, for the report's header."""
    out = {REPRODUCED: 0, DEVIATES: 0, NOT_COMPARABLE: 0, NOT_RUN: 0}
    for r in rows:
        out[r.kind] = out.get(r.kind, 0) + 1
    return out
