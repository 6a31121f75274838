"""Published vs measured: join each published cell to the measured median and give a verdict.

Pure: takes the published cells, the store's metric rows (a DataFrame shaped like
``Store.metrics_frame``), the hosts' facts and the planner's skip reasons; returns rows. No I/O.

Verdicts, in the order they are decided for each (cell, host):

- ``not run: <reason>``: nothing in the campaign measures the cell (its table says why), the host
  lacks a CPU flag the measurement needs, the planner skipped the experiment on the host, or no
  stored run has the cell's experiment, metric and join parameters;
- ``not comparable: host is X (n cores), published host is Y (m cores)``: measured on a host that is
  not the published one (different CPU model or core count), so a ratio would mean nothing;
- on such a host, a per-core cell (``Cell.per_core``: L1/L2 ladder, compute, one-way latency)
  is compared per core when the host has the published core (``socketlab.report.coreclass``:
  vendor, family, L1d and L2 sizes, or the model name): ``reproduced per core`` / ``deviates per
  core: <ratio>`` on the per-core figures (published value, or total / workers; measured total /
  the run's workers); ``not comparable: core class differs (AMD EPYC vs Intel Xeon 6975P-C)``
  where it does not; a socket-level cell (L3/DRAM totals, 32/64/96-participant exchanges,
  clocks) on a host with the published core says what it lacks: ``not comparable: needs 96
  cores (host has 2)``;
- ``not comparable: profile quick: 0.2 s per rep vs 2 s published`` and/or ``not comparable:
  conditions differ: workers 93 vs 90``: the published host, but the run did not record the
  published conditions (``CONDITION_SOURCES``: what a run records of each condition). Only
  conditions both sides record are compared; the join keys already equal the run's parameters;
- ``reproduced within tolerance`` or ``deviates: <ratio> (<tolerance>)`` from the interval of the
  median over the repetitions (``socketlab.report.interval``): reproduced when it lies inside
  the tolerance band, deviates when it lies outside and no run was disturbed
  (``socketlab.report.interference``: the probe around each run, or on a guest a run without
  one), ``inconclusive: ...`` otherwise, saying why (too few reps, spread, disturbed or
  unprobed runs) with the numbers. Never "deviates" on a disturbed run;
- a cell the stage planner recomputes from published constants (``Cell.host_independent``)
  reads ``recomputed from published constants: ...``: arithmetic, counted apart;
- a cell whose published figure the evidence disputes (``Cell.disputed``) reads ``published
  figure disputed: <reason>; published X vs measured Y`` on every host, never ``deviates``.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from socketlab.report.coreclass import CoreMatch, core_class, missing_flags, short_model
from socketlab.report.derived import derive
from socketlab.report.interference import RunState, is_guest, run_states
from socketlab.report.interval import (
    INSIDE,
    MIN_REPS,
    OUTSIDE,
    MedianInterval,
    median_interval,
    placement,
)
from socketlab.report.probe_quiet import QuietClass, recorded_references
from socketlab.report.published import Cell, Published
from socketlab.units import convert

#: A chain's order statistics (the stability chains: runs back to back, in repetition order):
#: the first and the last run's value, and the drift, the mean of the last quarter of the runs
#: over the first quarter's (p5_stab_sum.py's "drift = last 1/4 / first 1/4"; at least one run
#: each). The cell's values are taken in repetition order for these.
CHAIN_STATISTICS = ("first", "last", "drift")

#: Run statuses whose metrics count. Anything else (failed, timeout, invalid, ...) is ignored.
GOOD_STATUSES = frozenset({"ok", "complete", "completed", "success", "succeeded", "passed"})

#: metric dimensions that say how big the measured run was; shown next to the median
SCALE_DIMS = ("threads", "workers", "participants", "cpus")

REPRODUCED = "reproduced"
DEVIATES = "deviates"
REPRODUCED_PER_CORE = "reproduced per core"
DEVIATES_PER_CORE = "deviates per core"
#: measured, but the median's interval, the repetitions or the interference probe do not
#: allow "reproduced" or "deviates" (socketlab.report.interval, socketlab.report.interference)
INCONCLUSIVE = "inconclusive"
#: arithmetic on published constants (the stage planner's cells): no host measured them
RECOMPUTED = "recomputed matches"
RECOMPUTED_DIFFERS = "recomputed differs"
DISPUTED = "published figure disputed"
NOT_RUN = "not run"
NOT_COMPARABLE = "not comparable"
#: every verdict kind, in the order the report's summary line counts them
KINDS = (
    REPRODUCED,
    DEVIATES,
    REPRODUCED_PER_CORE,
    DEVIATES_PER_CORE,
    INCONCLUSIVE,
    RECOMPUTED,
    RECOMPUTED_DIFFERS,
    DISPUTED,
    NOT_COMPARABLE,
    NOT_RUN,
)
#: the kinds that judge a measurement of the host (the summary counts them per host)
MEASURED_KINDS = (REPRODUCED, DEVIATES, REPRODUCED_PER_CORE, DEVIATES_PER_CORE, INCONCLUSIVE)


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
        scale = [
            f"{k}={self.dims[k]:g}" if isinstance(self.dims[k], float) else f"{k}={self.dims[k]}"
            for k in SCALE_DIMS
            if k in self.dims
        ]
        return (
            f"{fmt(self.median, digits)} ({fmt(self.minimum, digits)}–"
            f"{fmt(self.maximum, digits)}, n={self.n}"
            + (f"; {', '.join(scale)}" if scale else "")
            + ")"
        )


@dataclass(frozen=True)
class Row:
    """One line of the comparison: a published cell on one host."""

    cell: Cell
    host: str | None
    measured: Measured | None
    ratio: float | None
    kind: str  #: one of KINDS
    verdict: str  #: the full verdict text
    #: the per-core figures of a per-core cell: published (value, or total / workers) and
    #: measured (per core: the value, or total / the run's workers); None where not per core
    per_core_published: float | None = None
    per_core_measured: Measured | None = None
    #: the interval of the median the verdict was drawn from (None where none was)
    interval: MedianInterval | None = None

    @property
    def per_core_text(self) -> str:
        c = self.cell
        published = (
            self.per_core_published if self.per_core_published is not None else c.per_core_reference
        )
        if published is None:
            return "—"
        pub = fmt(published)
        if c.per_core is not None and c.per_core.basis == "derived":
            pub += f" ({fmt(c.reference)} / {fmt(c.per_core_divisor)}, derived)"
        meas = fmt(self.per_core_measured.median) if self.per_core_measured else "—"
        return f"{pub} → {meas}"

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
    return (
        f"host is {short_model(model)} ({cores} cores), published host is "
        f"{short_model(str(published_host['model']))} ({published_host['cores']} cores)"
    )


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
    "gemv": (("dim", "gemv"), ("meta", "gemv")),  # native/layer's kernel, as it ran
}
#: Join keys a run asks for and its binary records as it ran: ``gemv: avx512`` picks the runs,
#: and a host without AVX-512 BF16 runs the portable avx2 kernel (campaign-oct.yaml), which
#: makes the cell "kernel differs", never silently compared.
CHECKED_JOIN_KEYS: dict[str, dict[str, str]] = {"gemv": {"avx": "avx512"}}  #: key -> aliases
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


def condition_differences(
    cell: Cell, counted: list[Mapping[str, Any]], meta: Mapping[str, Mapping[str, Any]]
) -> list[tuple[str, str, str]]:
    """(condition, measured, published) for each published condition the counted values'
    records show differently. ``meta``: run key -> that run's binary meta record."""
    out: list[tuple[str, str, str]] = []
    for key, published in cell.conditions.items():
        if key in cell.join and key not in CHECKED_JOIN_KEYS:
            continue
        # the published file writes the stage's kernels as published ("avx" = AVX-512 BF16)
        published = CHECKED_JOIN_KEYS.get(key, {}).get(published, published)
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
    kernel = [d for d in diffs if d[0] in CHECKED_JOIN_KEYS]
    rest = [d for d in diffs if d not in by_profile and d not in kernel]
    parts = [f"kernel differs: {m} ran, {p} published" for _, m, p in kernel]
    if by_profile:
        items = [
            f"{m} s per rep vs {p} s"
            if k == "duration_s"
            else f"{m} steps vs {p}"
            if k == "steps"
            else f"{m} rep{'' if m == '1' else 's'} vs {p}"
            for k, m, p in by_profile
        ]
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


def _values_for(
    records: list[dict[str, Any]], cell: Cell, host: str
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
        dims = {
            k[4:]: v
            for k, v in r.items()
            if k.startswith("dim.") and v is not None and v == v and k not in ("dim.rep",)
        }
        shared = (
            dims
            if shared is None
            else {k: v for k, v in shared.items() if k in dims and dims[k] == v}
        )
    if cell.statistic in CHAIN_STATISTICS:  # the chain's order: its runs' repetitions
        order = sorted(range(len(out)), key=lambda i: _rep(counted[i]))
        out, counted = [out[i] for i in order], [counted[i] for i in order]
    return out, unit, shared or {}, counted


def _rep(record: Mapping[str, Any]) -> float:
    rep = record.get("repetition")
    return float(rep) if rep is not None and rep == rep else 0.0


def _describe_join(cell: Cell) -> str:
    params = ", ".join(f"{k}={v}" for k, v in cell.join_params().items())
    return (
        f"no {cell.experiment} run"
        + (f" with {params}" if params else "")
        + f" reported {cell.metric}"
    )


def _assess(
    ref: float, rng: tuple[float, float] | None, cell: Cell, median: float
) -> tuple[bool, float | None, str]:
    """(within tolerance, ratio, 'how it deviates') of ``median`` against a published figure."""
    # a ratio to a published 0 (idle device IRQs) is undefined: say the two numbers instead
    ratio = median / ref if ref else None
    tol = cell.tolerance
    if rng is not None:
        lo, hi = rng
        ok = lo <= median <= hi or tol.allows(lo, median) or tol.allows(hi, median)
    else:
        ok = tol.allows(ref, median)
    direction = ""
    if cell.better != "none":
        better = (median > ref) == (cell.better == "higher")
        direction = ", better" if better else ", worse"
    how = (
        f"{ratio:.2f}x of published"
        if ratio is not None
        else f"{fmt(median)} against a published 0"
    )
    return ok, ratio, f"{how} ({tol.text()}{direction})"


def _within(ref: float, rng: tuple[float, float] | None, cell: Cell, x: float) -> bool:
    return _assess(ref, rng, cell, x)[0]


def _needed(cell: Cell) -> int:
    """Repetitions a verdict needs: MIN_REPS, or fewer where the published figure had fewer."""
    try:
        published = int(cell.conditions.get("reps", MIN_REPS))
    except (TypeError, ValueError):
        published = MIN_REPS
    return max(1, min(MIN_REPS, published))


@dataclass(frozen=True)
class Decision:
    outcome: str  #: REPRODUCED, DEVIATES or INCONCLUSIVE
    ratio: float | None
    how: str  #: '0.65x of published (±5%, worse)'
    why: str = ""  #: why inconclusive, or on which runs it was decided
    interval: MedianInterval | None = None


def _ratio_text(ref: float, x: float) -> str:
    return f"{x / ref:.2f}" if ref else fmt(x)


def _decide(
    cell: Cell,
    ref: float,
    rng: tuple[float, float] | None,
    values: list[float],
    keys: list[str],
    states: Mapping[str, RunState],
    guest: bool,
) -> Decision:
    """The verdict of values against a published figure: disturbed runs do not count (the
    rest decide when there are enough of them, else inconclusive), then the repetitions, the
    interval of the median against the tolerance band, and on a guest the probe records."""
    runs = list(dict.fromkeys(keys))
    disturbed = [k for k in runs if states.get(k, RunState()).disturbed]
    if not disturbed:
        return _decide_quiet(cell, ref, rng, values, keys, states, guest)
    quiet = [(v, k) for v, k in zip(values, keys, strict=True) if k not in disturbed]
    first = states[disturbed[0]].why
    if len(quiet) >= _needed(cell):
        d = _decide_quiet(
            cell, ref, rng, [v for v, _ in quiet], [k for _, k in quiet], states, guest
        )
        on = (
            f"on the {len({k for _, k in quiet})} undisturbed of {len(runs)} runs "
            f"({len(disturbed)} disturbed: {first})"
        )
        return Decision(d.outcome, d.ratio, d.how, on + (f"; {d.why}" if d.why else ""), d.interval)
    center = _center(cell, values)
    _, ratio, how = _assess(ref, rng, cell, center)
    return Decision(
        INCONCLUSIVE,
        ratio,
        how,
        f"disturbed: {len(disturbed)} of {len(runs)} runs ({first})",
        median_interval(values),
    )


def _decide_quiet(
    cell: Cell,
    ref: float,
    rng: tuple[float, float] | None,
    values: list[float],
    keys: list[str],
    states: Mapping[str, RunState],
    guest: bool,
) -> Decision:
    center = _center(cell, values)
    _, ratio, how = _assess(ref, rng, cell, center)
    by_median = cell.statistic == "median"
    needed = _needed(cell) if by_median else 1
    iv = median_interval(values) if by_median else None
    n = len(values)
    if n < needed:
        return Decision(
            INCONCLUSIVE,
            ratio,
            how,
            f"too few reps: {n} (a verdict needs {needed}: the median's interval "
            f"from {n} covers it with {iv.level if iv else 0:.0%})",
            iv,
        )
    if iv is None:  # a mean, min or max of the runs (a chain's published means): that value
        where = INSIDE if _within(ref, rng, cell, center) else OUTSIDE
    else:
        where = placement(iv, lambda x: _within(ref, rng, cell, x), ref)
    if where == INSIDE:
        return Decision(REPRODUCED, ratio, how, "", iv)
    if where != OUTSIDE:
        rel = "x of published" if ref else ""
        return Decision(
            INCONCLUSIVE,
            ratio,
            how,
            "spread: the median's interval "
            f"{iv.text(lambda x: _ratio_text(ref, x), rel)} crosses the edge of the "
            f"band ({cell.tolerance.text()})",
            iv,
        )
    runs = list(dict.fromkeys(keys))
    unprobed = [k for k in runs if guest and not states.get(k, RunState()).probed]
    if unprobed:
        return Decision(
            INCONCLUSIVE,
            ratio,
            how,
            f"not probed for interference: {len(unprobed)} of {len(runs)} runs on "
            "this guest carry no probe record, so a neighbour's load on the shared "
            "core cannot be ruled out",
            iv,
        )
    return Decision(DEVIATES, ratio, how, "", iv)


def _drift(vals: list[float]) -> float:
    q = max(1, len(vals) // 4)
    first = statistics.fmean(vals[:q])
    return statistics.fmean(vals[-q:]) / first if first else float("nan")


def _center(cell: Cell, vals: list[float]) -> float:
    """The cell's statistic of its values (in repetition order for a chain's)."""
    return {
        "min": min,
        "max": max,
        "mean": statistics.fmean,
        "first": lambda v: v[0],
        "last": lambda v: v[-1],
        "drift": _drift,
    }.get(cell.statistic, statistics.median)(vals)


def _judge(
    cell: Cell,
    host: str,
    m: Measured,
    values: list[float],
    keys: list[str],
    states: Mapping[str, RunState],
    guest: bool,
    **pc: Any,
) -> Row:
    d = _decide(cell, cell.reference, cell.range, values, keys, states, guest)
    on = f"; {d.why}" if d.why else ""
    if d.outcome == REPRODUCED:
        text = f"reproduced within tolerance ({cell.tolerance.text()}){on}"
    elif d.outcome == DEVIATES:
        text = f"deviates: {d.how}{on}"
    else:
        text = f"inconclusive: {d.how}{on}"
    return Row(cell, host, m, d.ratio, d.outcome, text, interval=d.interval, **pc)


def _recomputed(cell: Cell, host: str, m: Measured, **pc: Any) -> Row:
    """Arithmetic on published constants (the stage planner): no interval, nothing measured."""
    ok, ratio, how = _assess(cell.reference, cell.range, cell, m.median)
    if ok:
        return Row(
            cell,
            host,
            m,
            ratio,
            RECOMPUTED,
            "recomputed from published constants: "
            f"matches within tolerance ({cell.tolerance.text()})",
            **pc,
        )
    return Row(
        cell,
        host,
        m,
        ratio,
        RECOMPUTED_DIFFERS,
        f"recomputed from published constants: {how}",
        **pc,
    )


def compare(
    published: Published,
    metrics: Any,
    hosts: Mapping[str, Mapping[str, Any]],
    skips: Iterable[tuple[str, str, str]] = (),
    runs: Iterable[Mapping[str, Any]] = (),
    explain: Callable[[Cell, str], str | None] | None = None,
    profile: str | None = None,
    quiet: Sequence[QuietClass] = (),
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
    when its shorter runs make a cell not comparable. ``quiet``: recorded quiet probe rates per
    core class (``socketlab.report.probe_quiet.load()``), the probe's reference where higher
    than the campaign's best.
    """
    records = metrics.to_dict("records") if hasattr(metrics, "to_dict") else list(metrics)
    records = derive(records)  # the stage's phase sums the published tables name
    skip_reason = {(h, e): r for h, e, r in skips}
    all_runs = list(runs)
    meta = {str(r["run_key"]): r.get("meta") or {} for r in all_runs if r.get("run_key")}
    # disturbed or not, from the interference probe
    states = run_states(all_runs, recorded_references(hosts, list(quiet)))
    host_names = sorted(hosts) or sorted({str(r["host"]) for r in records if r.get("host")})
    rows: list[Row] = []
    for cell in published.cells:
        if not host_names:
            reason = cell.unmeasured or "no host has run this campaign yet"
            rows.append(Row(cell, None, None, None, NOT_RUN, f"not run: {reason}"))
            continue
        for host in host_names:
            row = _plain_row(
                published,
                cell,
                host,
                hosts.get(host, {}),
                records,
                skip_reason,
                all_runs,
                explain,
                meta,
                profile,
                states,
            )
            rows.append(_disputed(row) if cell.disputed else row)
    return rows


def _failure(cell: Cell, host: str, runs: list[Mapping[str, Any]]) -> str | None:
    """Why stored runs of the cell's experiment and join parameters gave no value: the run
    failed ('failed: <reason>'), or the collector measuring the metric was unsupported."""
    from socketlab.parse.collectors import METRIC_SOURCES

    collector = METRIC_SOURCES.get(cell.metric)
    for run in runs:
        if run.get("host") != host or run.get("experiment") != cell.experiment:
            continue
        params = run.get("params") or {}
        if not all(_equal(params.get(k), v) for k, v in cell.join_params().items() if k in params):
            continue
        if str(run.get("status", "")).lower() not in GOOD_STATUSES:
            reason = str(run.get("reason") or "").strip()
            if run.get("status") == "unavailable" and reason:  # the host's own words say it
                return reason
            return f"{run.get('status')}" + (f": {reason}" if reason else "")
        why = (run.get("collectors") or {}).get(collector) if collector else None
        if why:
            return f"collector {collector} unsupported here: {why}"
    return None


def _plain_row(
    published: Published,
    cell: Cell,
    host: str,
    facts: Mapping[str, Any],
    records: list[dict[str, Any]],
    skip_reason: Mapping[tuple[str, str], str],
    runs: list[Mapping[str, Any]] = (),
    explain: Callable[[Cell, str], str | None] | None = None,
    meta: Mapping[str, Mapping[str, Any]] | None = None,
    profile: str | None = None,
    states: Mapping[str, RunState] | None = None,
) -> Row:
    states = states or {}
    topo = facts.get("topology", facts) if isinstance(facts, Mapping) else {}
    if cell.unmeasured or not cell.experiment:
        return Row(cell, host, None, None, NOT_RUN, f"not run: {cell.unmeasured}")
    flags = set(topo.get("flags", ())) if topo else set()
    missing = [f for f in cell.requires if topo and f not in flags]
    if missing:
        return Row(cell, host, None, None, NOT_RUN, f"not run: host lacks {', '.join(missing)}")
    values, unit, dims, counted = _values_for(records, cell, host)
    if not values:
        reason = (
            skip_reason.get((host, cell.experiment))
            or _failure(cell, host, runs)
            or (explain(cell, host) if explain else None)
            or _describe_join(cell)
        )
        return Row(cell, host, None, None, NOT_RUN, f"not run: {reason}")
    unit = unit or cell.unit
    # a drift is a ratio of the values themselves: whatever their unit, it has none
    converted = (
        list(values) if cell.statistic == "drift" else [convert(v, unit, cell.unit) for v in values]
    )
    if any(v is None for v in converted):
        m = Measured(statistics.median(values), min(values), max(values), len(values), unit)
        return Row(
            cell,
            host,
            m,
            None,
            NOT_COMPARABLE,
            f"not comparable: measured in {unit}, published in {cell.unit}",
        )
    vals = [float(v) for v in converted if v is not None]
    keys = [str(r.get("run_key")) for r in counted]
    m = _measured(cell, vals, dims)
    per_values = _per_core_values(cell, vals, counted, meta or {})
    per_core = _measured(cell, per_values, dims) if per_values else None
    pc = {"per_core_published": cell.per_core_reference, "per_core_measured": per_core}
    guest = bool(topo) and is_guest(topo)
    diff = host_difference(published.host, topo) if topo else "host facts are missing"
    if cell.host_independent:  # arithmetic on published constants: every host computes it
        diff = None
    conditions = condition_differences(cell, counted, meta or {})
    if diff and topo:
        match = core_class(published.host, topo)
        if (
            cell.per_core is not None
            and match.matches
            and not unmet_needs(cell, published.host, topo)
        ):
            return _per_core_row(
                cell,
                host,
                m,
                per_core,
                match,
                conditions,
                profile,
                topo,
                per_values,
                keys,
                states,
                guest,
            )
        if cell.per_core is not None and not match.matches:  # nothing else matters then
            return Row(
                cell,
                host,
                m,
                None,
                NOT_COMPARABLE,
                f"not comparable: core class differs ({match.differs})",
                **pc,
            )
        elif match.matches and unmet_needs(cell, published.host, topo):
            diff = "needs " + ", ".join(unmet_needs(cell, published.host, topo))
    if diff:  # conditions the core count decides are part of the host difference
        conditions = [c for c in conditions if c[0] not in HOST_CONDITIONS]
    reasons = ([diff] if diff else []) + _differences_text(conditions, profile)
    if reasons:  # a ratio against another machine's number, or other conditions, would mislead
        return Row(
            cell, host, m, None, NOT_COMPARABLE, "not comparable: " + "; ".join(reasons), **pc
        )
    if cell.host_independent:
        return _recomputed(cell, host, m, **pc)
    return _judge(cell, host, m, vals, keys, states, guest, **pc)


def _measured(cell: Cell, vals: list[float], dims: dict[str, Any]) -> Measured:
    center = _center(cell, vals)
    if cell.statistic == "drift":  # a ratio of the runs' values: their range says nothing of it
        return Measured(center, center, center, len(vals), cell.unit, dims)
    return Measured(center, min(vals), max(vals), len(vals), cell.unit, dims)


def _per_core_values(
    cell: Cell,
    vals: list[float],
    counted: list[Mapping[str, Any]],
    meta: Mapping[str, Mapping[str, Any]],
) -> list[float] | None:
    """The measured per-core figures, one per counted value: the value of a per-core metric,
    or each run's total over the workers that run recorded (None when a run did not record
    them)."""
    if cell.per_core is None:
        return None
    if cell.per_core.basis == "given":
        return list(vals)
    key = cell.per_core.divide_by or "workers"
    per: list[float] = []
    for v, r in zip(vals, counted, strict=True):
        n = _recorded(key, r, meta.get(str(r.get("run_key")), {}))
        try:
            n = float(n)
        except (TypeError, ValueError):
            return None
        if n <= 0:
            return None
        per.append(v / n)
    return per


def unmet_needs(
    cell: Cell, published_host: Mapping[str, Any], topo: Mapping[str, Any]
) -> list[str]:
    """What of the published socket the cell needs and the host lacks, as text ('32
    participants (host has 2 cores)'). Explicit ``needs`` first; else participants from the
    conditions, NUMA nodes from the scope, and the socket's cores for a cell not per core."""
    cores, nodes = int(topo.get("cores") or 0), int(topo.get("nodes") or 0)
    per_node = cores // nodes if nodes else cores
    pub_nodes = int(published_host.get("numa_nodes") or 1)
    needs = dict(cell.needs)
    cond = cell.conditions
    if "participants" in cond:
        needs.setdefault("participants", int(cond["participants"]))
    scope_nodes = {
        "two-nodes": 2,
        "adjacent-node": 2,
        "all-nodes": pub_nodes,
        "far-node": pub_nodes,
    }.get(str(cond.get("scope")))
    if scope_nodes and scope_nodes > 1:
        needs.setdefault("nodes", scope_nodes)
    if cell.per_core is None and not needs:
        needs["cores"] = int(published_host["cores"])
    have = {"cores": cores, "nodes": nodes, "node_cores": per_node, "participants": cores}
    text = {
        "cores": "{n} cores (host has {h})",
        "nodes": "{n} NUMA nodes (host has {h})",
        "node_cores": "{n} cores in one NUMA node (host has {h})",
        "participants": "{n} participants (host has {h} cores)",
    }
    return [text[k].format(n=n, h=have[k]) for k, n in sorted(needs.items()) if have[k] < n]


def _per_core_row(
    cell: Cell,
    host: str,
    m: Measured,
    per_core: Measured | None,
    match: CoreMatch,
    conditions: list[tuple[str, str, str]],
    profile: str | None,
    topo: Mapping[str, Any],
    per_values: list[float] | None = None,
    keys: list[str] | None = None,
    states: Mapping[str, RunState] | None = None,
    guest: bool = False,
) -> Row:
    """A per-core cell on a host with the published core: judged on the per-core figures."""
    pc_ref = cell.per_core_reference
    pc = {"per_core_published": pc_ref, "per_core_measured": per_core}
    lacks = missing_flags(cell.per_core.flags, topo)
    if lacks:
        return Row(
            cell,
            host,
            m,
            None,
            NOT_COMPARABLE,
            f"not comparable: core lacks {', '.join(lacks)}",
            **pc,
        )
    if per_core is None or pc_ref is None:
        return Row(
            cell,
            host,
            m,
            None,
            NOT_COMPARABLE,
            f"not comparable: the runs did not record their {cell.per_core.divide_by or 'workers'}",
            **pc,
        )
    kept = _per_core_conditions(conditions, cell.per_core.min_duration_s)
    reasons = _differences_text(kept, profile)
    if reasons:
        return Row(
            cell, host, m, None, NOT_COMPARABLE, "not comparable: " + "; ".join(reasons), **pc
        )
    d = _decide(
        cell,
        pc_ref,
        cell.per_core_range,
        per_values or [per_core.median],
        keys or [""],
        states or {},
        guest,
    )
    flags = [*cell.requires, *cell.per_core.flags]
    basis = match.basis + (f", flags {' '.join(flags)}" if flags else "")
    return _per_core_verdict(cell, host, m, d, basis, pc)


def _per_core_conditions(
    conditions: list[tuple[str, str, str]], floor: float | None
) -> list[tuple[str, str, str]]:
    """The condition differences that still count when a cell is judged per core."""
    kept = []
    for c in conditions:
        if c[0] in HOST_CONDITIONS:  # per core, the worker count is what is divided out
            continue
        if (
            c[0] == "duration_s"
            and floor is not None
            and all(_float(x) is not None and _float(x) >= floor for x in c[1].split("/"))
        ):
            continue  # a steady one-core rate: runs this long are the published measurement
        kept.append(c)
    return kept


def _per_core_verdict(
    cell: Cell, host: str, m: Measured, d: Decision, basis: str, pc: dict[str, Any]
) -> Row:
    """The row for a per-core decision: reproduced, deviates or inconclusive per core."""
    on = f"; {d.why}" if d.why else ""
    if d.outcome == REPRODUCED:
        return Row(
            cell,
            host,
            m,
            d.ratio,
            REPRODUCED_PER_CORE,
            "reproduced per core within "
            f"tolerance ({cell.tolerance.text()}; core class: {basis}){on}",
            interval=d.interval,
            **pc,
        )
    if d.outcome == DEVIATES:
        return Row(
            cell,
            host,
            m,
            d.ratio,
            DEVIATES_PER_CORE,
            f"deviates per core: {d.how}{on}; core class: {basis}",
            interval=d.interval,
            **pc,
        )
    return Row(
        cell,
        host,
        m,
        d.ratio,
        INCONCLUSIVE,
        f"inconclusive: per core {d.how}{on}; core class: {basis}",
        interval=d.interval,
        **pc,
    )


def _float(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def _disputed(row: Row) -> Row:
    """A disputed published figure: never 'deviates'; the reason, both numbers, and what the
    comparison would otherwise have said when it could not measure or compare."""
    d = row.cell.disputed
    unit = row.cell.unit
    per_core = row.cell.per_core_reference
    pub = per_core if per_core is not None else row.cell.reference
    meas = row.per_core_measured or row.measured
    what = " per core" if per_core is not None else ""
    parts = [f"published figure disputed: {d.reason}"]
    if meas is not None:
        ratio = meas.median / pub if pub else None
        parts.append(
            f"published {fmt(pub)} vs measured {fmt(meas.median)} {unit}{what}"
            + (f" ({ratio:.2f}x)" if ratio is not None else "")
        )
    else:
        parts.append(f"published {fmt(pub)} {unit}{what}")
    if row.kind in (NOT_RUN, NOT_COMPARABLE):
        parts.append(f"here: {row.verdict}")
    parts.append(f"a correct figure: {d.correct}")
    ratio = meas.median / pub if meas is not None and pub else None
    return Row(
        row.cell,
        row.host,
        row.measured,
        ratio,
        DISPUTED,
        "; ".join(parts),
        row.per_core_published,
        row.per_core_measured,
        row.interval,
    )


def summary(rows: Iterable[Row]) -> dict[str, int]:
    """Counts per verdict kind, for the report's header."""
    out = dict.fromkeys(KINDS, 0)
    for r in rows:
        out[r.kind] = out.get(r.kind, 0) + 1
    return out
