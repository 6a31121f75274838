"""Two sets of runs side by side: per matching point and metric the medians, their ratio, a
bootstrap confidence interval of the ratio and a verdict (`orchestrate compare`, docs/results.md).

Pure over frames shaped like ``Results.metrics_with_runs()``. A point is the experiment, its
parameters, the metric, its unit and dimensions (and the host, unless the sides are split by
host or each ran on one host); the build is never part of it, so two builds of one point match.
Only runs stored ok count, warm-ups never. Each run gives one value per point (the median of its
values, where it printed several), so the bootstrap resamples repetitions, the thing that varies.

Verdict, from the interval of B/A against the tolerance band [1 - t, 1 + t]:
- ``same``: the whole interval inside the band;
- ``faster`` / ``slower``: the whole interval above or below the band, for a metric with a
  better direction (rates: higher is faster; times: lower is faster; UNIT_DIRECTION);
  ``higher`` / ``lower`` for a metric without one (collectors' observations, counts, bytes);
- ``inconclusive``: the interval crosses a band edge, or a side has fewer than MIN_RUNS runs.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from socketlab.results.schema import DIM, RUNS
from socketlab.store.status import RunStatus
from socketlab.units import UNITS

FASTER, SLOWER, HIGHER, LOWER, SAME, INCONCLUSIVE = (
    "faster",
    "slower",
    "higher",
    "lower",
    "same",
    "inconclusive",
)
VERDICTS = (SLOWER, FASTER, LOWER, HIGHER, INCONCLUSIVE, SAME)
#: a point on one side only (its verdict in the JSON lines)
ONLY_A, ONLY_B = "only in A", "only in B"
#: unit dimension (socketlab.units) -> which way is better: rates up, times down
UNIT_DIRECTION = {
    **dict.fromkeys(
        ("bw", "flops", "1/s", "tok/s", "req/s", "B/cycle", "MiB/s", "Gbit/s"), "higher"
    ),
    "time": "lower",
}
#: the runs a bootstrap needs on each side to say anything
MIN_RUNS = 2
#: run columns that are not part of a point (they vary from run to run, or are the run)
_NOT_POINT = {c.name for c in RUNS} - {"experiment", "host"}


@dataclass(frozen=True)
class Settings:
    tolerance: float = 0.05  #: the band of "same": ratio within 1 -+ tolerance
    confidence: float = 0.95
    resamples: int = 2000
    seed: int = 0  #: the bootstrap's random state, so a comparison repeats exactly


@dataclass
class Comparison:
    a: str  #: what side A is (a campaign, a host, a build)
    b: str
    rows: pd.DataFrame  #: one row per matching point and metric (``columns``)
    only_a: pd.DataFrame  #: points of A that B lacks (point columns only)
    only_b: pd.DataFrame
    point: list[str]  #: the columns that name a point, in order
    settings: Settings = field(default_factory=Settings)
    notes: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        got = self.rows["verdict"].value_counts() if len(self.rows) else {}
        return {v: int(got.get(v, 0)) for v in VERDICTS if got.get(v, 0)}


def direction(unit: str, parser: str) -> str:
    """'higher', 'lower' (is better) or 'none'. A collector's values (IRQ rates, peak memory)
    describe the conditions, not the speed, so they have none whatever their unit."""
    if str(parser).startswith("collector:"):
        return "none"
    dim = UNITS.get(str(unit), (str(unit), 1.0))[0]
    return UNIT_DIRECTION.get(dim, "none")


def point_columns(frame: pd.DataFrame, drop: tuple[str, ...] = ()) -> list[str]:
    """experiment, host, the parameters, metric, unit, the dimensions (minus ``drop``)."""
    params = [
        c
        for c in frame.columns
        if c not in _NOT_POINT
        and c not in ("experiment", "host", "metric", "value", "unit", "parser")
        and not c.startswith(DIM)
    ]
    dims = [c for c in frame.columns if c.startswith(DIM)]
    cols = ["experiment", "host", *params, "metric", "unit", "parser", *dims]
    return [c for c in cols if c not in drop]


def per_run(frame: pd.DataFrame, point: list[str]) -> tuple[dict[str, Any], dict[str, dict]]:
    """(point key -> one value per run, point key -> the point's columns as first stored): a
    run's value is the median of its values; ok runs, no warm-ups. The key is the point's
    values as text, so two stores' column types (categories, Int64, NA) can't split a point."""
    ok = frame[(frame["status"] == RunStatus.OK) & (frame["repetition"] >= 0)]
    key = pd.Series("", index=ok.index, dtype="string")
    for c in point:
        key = key + "\x1f" + ok[c].astype("string").fillna("<NA>")
    keyed = ok.assign(_point=key)
    values = keyed.groupby(["_point", "run_key"], sort=False)["value"].median()
    by_point = {k: g.to_numpy() for k, g in values.groupby(level="_point", sort=False)}
    first = keyed.drop_duplicates("_point").set_index("_point")[point]
    return by_point, {k: first.loc[k].to_dict() for k in by_point}


def compare(
    a: pd.DataFrame,
    b: pd.DataFrame,
    *,
    a_name: str,
    b_name: str,
    drop: tuple[str, ...] = ("host",),
    settings: Settings | None = None,
) -> Comparison:
    """A vs B: frames like ``Results.metrics_with_runs()``; ``drop`` names point columns the
    sides differ in by design (the host of two single-host campaigns, ``--by`` host)."""
    settings = settings or Settings()
    cols = list(dict.fromkeys(point_columns(a, drop) + point_columns(b, drop)))
    (ga, pa), (gb, pb) = per_run(_aligned(a, cols), cols), per_run(_aligned(b, cols), cols)
    rng = np.random.default_rng(settings.seed)
    rows = []
    for key in [k for k in ga if k in gb]:
        point = pa[key]
        rows.append(
            {
                **point,
                **judge(ga[key], gb[key], str(point["unit"]), str(point["parser"]), settings, rng),
            }
        )
    frame = _typed(pd.DataFrame(rows, columns=[*cols, *_RESULT_COLUMNS]), a, b)
    only = [
        _typed(pd.DataFrame([pts[k] for k in src if k not in other], columns=cols), a, b)
        for src, other, pts in ((ga, gb, pa), (gb, ga, pb))
    ]
    return Comparison(a_name, b_name, frame, only[0], only[1], cols, settings)


def _typed(frame: pd.DataFrame, a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Point columns back to the sides' dtypes (a frame built from rows loses Int64 to float);
    categories anew, since the two stores' categories differ."""
    for c in frame.columns:
        src = a[c].dtype if c in a else b[c].dtype if c in b else None
        if src is None or c in _RESULT_COLUMNS:
            continue
        frame[c] = frame[c].astype("category" if isinstance(src, pd.CategoricalDtype) else src)
    return frame


def _aligned(frame: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """The frame with every point column (<NA> where this side has no such parameter)."""
    missing = [c for c in cols if c not in frame]
    return frame.assign(**dict.fromkeys(missing, pd.NA)) if missing else frame


_RESULT_COLUMNS = (
    "n_a",
    "n_b",
    "median_a",
    "median_b",
    "ratio",
    "ci_low",
    "ci_high",
    "better",
    "verdict",
    "why",
)


def judge(
    a: np.ndarray,
    b: np.ndarray,
    unit: str,
    parser: str,
    settings: Settings,
    rng: np.random.Generator,
) -> dict[str, Any]:
    """The result columns of one point: medians, B/A, its interval and the verdict."""
    better = direction(unit, parser)
    med_a, med_b = float(np.median(a)), float(np.median(b))
    out: dict[str, Any] = {
        "n_a": len(a),
        "n_b": len(b),
        "median_a": med_a,
        "median_b": med_b,
        "ratio": med_b / med_a if med_a else math.nan,
        "ci_low": math.nan,
        "ci_high": math.nan,
        "better": better,
    }
    if not med_a:
        return {**out, "verdict": INCONCLUSIVE, "why": "A's median is 0: no ratio"}
    if min(len(a), len(b)) < MIN_RUNS:
        return {
            **out,
            "verdict": INCONCLUSIVE,
            "why": f"{min(len(a), len(b))} run on a side: an interval needs {MIN_RUNS}",
        }
    low, high = ratio_interval(a, b, settings, rng)
    out.update(ci_low=low, ci_high=high)
    t = settings.tolerance
    if 1 - t <= low and high <= 1 + t:
        return {**out, "verdict": SAME, "why": f"interval inside ±{t:.0%}"}
    if low > 1 + t or high < 1 - t:
        up = low > 1 + t
        if better == "none":
            word = HIGHER if up else LOWER
        else:
            word = FASTER if up == (better == "higher") else SLOWER
        return {**out, "verdict": word, "why": f"interval outside ±{t:.0%}"}
    return {**out, "verdict": INCONCLUSIVE, "why": f"interval crosses the ±{t:.0%} band"}


def ratio_interval(
    a: np.ndarray, b: np.ndarray, settings: Settings, rng: np.random.Generator
) -> tuple[float, float]:
    """Percentile bootstrap interval of median(B) / median(A), resampling each side's runs
    (scipy.stats.bootstrap; BCa needs more runs than campaigns have, percentile works on 2)."""

    def ratio(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.median(y, axis=axis) / np.median(x, axis=axis)

    with warnings.catch_warnings():  # identical values on a side: a degenerate but valid answer
        warnings.simplefilter("ignore")
        res = stats.bootstrap(
            (a, b),
            ratio,
            n_resamples=settings.resamples,
            vectorized=True,
            paired=False,
            confidence_level=settings.confidence,
            method="percentile",
            rng=rng,
        )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def split(
    frame: pd.DataFrame, by: str, between: tuple[str, str] | None = None
) -> tuple[tuple[str, pd.DataFrame], tuple[str, pd.DataFrame], list[str]]:
    """One campaign's rows as two sides by host or by build (``build_hash``); the sides in
    the order they first ran unless ``between`` names them. Returns (A, B, notes)."""
    column = {"host": "host", "build": "build_hash"}[by]
    labels = _labels(frame, by)
    have = frame.dropna(subset=[column])
    order = list(dict.fromkeys(have.sort_values("started")[column].astype(str)))
    notes = []
    if len(have) < len(frame):
        left = sorted(frame[frame[column].isna()]["experiment"].astype(str).unique())
        notes.append(f"runs without a build (not compared by build): {', '.join(left)}")
    if between is not None:
        wanted = [_find(order, labels, name, by) for name in between]
    elif len(order) == 2:
        wanted = order
    else:
        from socketlab.errors import SocketlabError

        raise SocketlabError(
            f"--by {by}: the campaign has {len(order)} "
            f"{by}s ({', '.join(labels[x] for x in order) or 'none'}); "
            "expected 2, or name two with --between"
        )
    sides = tuple((labels[w], have[have[column].astype(str) == w]) for w in wanted)
    return sides[0], sides[1], notes


def _labels(frame: pd.DataFrame, by: str) -> dict[str, str]:
    if by == "host":
        return {str(h): str(h) for h in frame["host"].dropna().unique()}
    out = {}
    for _, r in frame.dropna(subset=["build_hash"]).drop_duplicates("build_hash").iterrows():
        flags = "" if pd.isna(r["build_flags"]) else f" ({r['build_flags']})"
        out[str(r["build_hash"])] = f"{r['build_name']}@{str(r['build_hash'])[:8]}{flags}"
    return out


def _find(order: list[str], labels: dict[str, str], name: str, by: str) -> str:
    hits = [x for x in order if x == name or x.startswith(name) or labels[x] == name]
    if len(hits) != 1:
        from socketlab.errors import SocketlabError

        raise SocketlabError(
            f"--between {name}: "
            + ("matches several" if hits else "no such")
            + f" {by}; expected one of: {', '.join(labels[x] for x in order)}"
        )
    return hits[0]
