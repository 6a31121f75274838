"""A guidellm benchmarks JSON (``guidellm run --output kind=json``, report schema version 2,
guidellm 0.8) as serving runs, one per benchmark (load level).

Definitions mapped honestly (guidellm src/guidellm/schemas/base/request_stats.py):
- guidellm TTFT (first token iteration - request start) = our/vLLM TTFT: ``*_ttft_ms``;
- guidellm "ITL" ((last - first token) / (N - 1), its distribution weighted by N - 1 per
  request) = vLLM's TPOT, token-weighted: ``*_tpot_token_weighted_ms``;
- guidellm "TPOT" ((last token - request start) / N) includes TTFT: ``*_tpot_incl_ttft_ms``,
  never stored as TPOT;
- guidellm request latency (request end - start) ends at the end of the stream, not the last
  token: ``*_request_latency_ms``; output tokens/s (mean) = output tokens / its measurement
  window: ``output_tok_s``.
Those are guidellm's own numbers (parser ``guidellm/1``). From the per-request timings the
report keeps (request start, first and last token, token count) the records are rebuilt and
our metrics recomputed (parser ``serving/1``): guidellm keeps no time of the tokens between the
first and the last, so vLLM's pooled ITL is not recomputed (stored as a limitation).

The recomputation keeps what guidellm kept (guidellm src/guidellm/benchmark/schemas/metrics.py,
GenerativeMetrics.compile, and accumulator.py, get_within_range): the file lists every request,
warm-up and cool-down included, and guidellm measures only those overlapping its measurement
window (the benchmark's start_time..end_time): a request whose end is at or after the start and
whose start is at or before the end; TTFT over those whose first token is in that span, ITL
over those whose tokens after the first are. Requests outside are stored with phase "warmup" or
"cooldown". Percentiles use guidellm's rule (``guidellm_percentile``), so the recomputed
TTFT/TPOT percentiles equal guidellm's own. A file whose request lists are guidellm's sample
(``sample_size``) can't give guidellm's numbers back: that is stored as a limitation.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from socketlab.errors import SpecError
from socketlab.parse import Metric
from socketlab.serve import metrics as metrics_mod
from socketlab.serve.records import RequestRecord
from socketlab.serve.runkind import PARSER

GUIDELLM_PARSER = "guidellm/1"
NS = 1_000_000_000
#: guidellm metric -> (our name, scale to our unit)
MAPPED = {
    "time_to_first_token_ms": ("ttft", 1.0),
    "inter_token_latency_ms": ("tpot_token_weighted", 1.0),
    "time_per_output_token_ms": ("tpot_incl_ttft", 1.0),
    "request_latency": ("request_latency", 1000.0),
}
LIMITATION = (
    "guidellm keeps only the first and last token time of a request: vLLM's pooled "
    "ITL (itl) and the per-token ITL are not recomputed"
)


def _load(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_bytes())
    except ValueError as exc:
        raise SpecError(f"{path}: not JSON ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        raise SpecError(
            f"{path}: field benchmarks: missing; expected a guidellm benchmarks "
            "JSON (guidellm run --output kind=json)"
        )
    if not doc["benchmarks"]:
        raise SpecError(f"{path}: field benchmarks: empty; expected at least one benchmark")
    return doc


def load_label(bench: dict[str, Any], where: str) -> str:
    strategy = (bench.get("config") or {}).get("strategy") or {}
    kind = strategy.get("type_")
    if kind == "synchronous":
        return "c1"
    if kind == "concurrent" and isinstance(strategy.get("streams"), int):
        return f"c{strategy['streams']}"
    if kind in ("constant", "poisson", "async") and isinstance(strategy.get("rate"), int | float):
        return f"r{strategy['rate']:g}"
    if kind == "throughput":
        return "rinf"
    raise SpecError(
        f"{where}.config.strategy: expected a guidellm strategy (synchronous, "
        f"concurrent with streams, constant/poisson with rate), got {kind!r}"
    )


def guidellm_percentile(a: np.ndarray, p: float) -> float:
    """guidellm's percentile (schemas/base/statistics.py: DistributionSummary.from_values, then
    Percentiles.from_pdf): duplicates merged, shares cumulated in floating point, the first
    value whose cumulative share reaches p / 100. No interpolation; the float sums decide a
    share that lands on p exactly as guidellm's do (12 values: the median is the 6th or 7th)."""
    values, counts = np.unique(np.asarray(a, dtype=float), return_counts=True)
    cdf = np.cumsum(counts / counts.sum())
    return float(values[min(int(np.searchsorted(cdf, p / 100, side="left")), len(values) - 1)])


def _times(req: dict[str, Any]) -> tuple[float | None, float | None, float | None]:
    """(start, end, first token) of a request as guidellm's GenerativeRequestStats reads them:
    request_start else resolve_start, request_end else resolve_end."""
    t = (req.get("info") or {}).get("timings") or {}

    def first_of(*keys: str) -> float | None:
        return next((t[k] for k in keys if isinstance(t.get(k), int | float)), None)

    return (
        first_of("request_start", "resolve_start"),
        first_of("request_end", "resolve_end"),
        first_of("first_token_iteration"),
    )


def _overlaps(start: float | None, end: float | None, w0: float, w1: float) -> bool:
    """guidellm's get_within_range (closed=False): an event it can't place in time (no end)
    is left out; one without a start is taken as instantaneous at its end."""
    if end is None:
        return False
    return end >= w0 and (start if start is not None else end) <= w1


def _record(
    i: int, req: dict[str, Any], status: str, origin: float, where: str, phase: str = "measured"
) -> RequestRecord:
    t = (req.get("info") or {}).get("timings")
    if not isinstance(t, dict) or not isinstance(t.get("request_start"), int | float):
        raise SpecError(f"{where}.info.timings.request_start: expected a time in s")

    def ns(x: float) -> int:
        return round((x - origin) * NS)

    n_out = req.get("output_tokens")
    rec = RequestRecord(
        index=i,
        phase=phase,
        prompt_id=str(req.get("request_id", i)),
        n_in=req.get("prompt_tokens"),
        t_sched=ns(t["request_start"]),
        t_send=ns(t["request_start"]),
        n_out=n_out,
        n_out_source="usage"
        if (req.get("output_metrics") or {}).get("text_tokens") is not None
        else "events",
    )
    first, last = t.get("first_token_iteration"), t.get("last_token_iteration")
    if status != "successful" or first is None or not n_out:
        err = (req.get("info") or {}).get("error") or f"guidellm status {status}"
        rec.status, rec.error = "error", str(err)[:200]
        return rec
    rec.events.append([ns(first), 1])
    if n_out > 1 and last is not None and last > first:
        rec.events.append([ns(last), n_out - 1])
    if isinstance(t.get("request_end"), int | float):
        rec.t_done = ns(t["request_end"])
    rec.status = "ok"
    return rec


def _theirs(metrics: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, (ours, scale) in MAPPED.items():
        dist = (metrics.get(name) or {}).get("successful") or {}
        for stat, key in (("mean", "mean"), ("median", "median"), ("std_dev", "std")):
            if isinstance(dist.get(stat), int | float):
                out[f"{key}_{ours}_ms"] = dist[stat] * scale
        for p in ("p90", "p95", "p99"):
            v = (dist.get("percentiles") or {}).get(p)
            if isinstance(v, int | float):
                out[f"{p}_{ours}_ms"] = v * scale
    tps = (metrics.get("output_tokens_per_second") or {}).get("successful") or {}
    if isinstance(tps.get("mean"), int | float):
        out["output_tok_s"] = float(tps["mean"])
    conc = (metrics.get("request_concurrency") or {}).get("successful") or {}
    if isinstance(conc.get("mean"), int | float):
        out["mean_concurrency"] = float(conc["mean"])
    totals = metrics.get("request_totals") or {}
    for k in ("successful", "errored", "incomplete"):
        if isinstance(totals.get(k), int):
            out[f"requests_{k}"] = float(totals[k])
    return out


def import_guidellm(path: Path) -> dict[str, Any]:
    """Read a file: {"levels": [{"label", "records", "summary", "metrics", "guidellm",
    "limitations"}], "sha256", "version"}."""
    doc = _load(path)
    levels = []
    for b, bench in enumerate(doc["benchmarks"]):
        where = f"{path}: benchmarks[{b}]"
        label = load_label(bench, where)
        reqs = bench.get("requests")
        if not isinstance(reqs, dict) or not isinstance(reqs.get("successful"), list):
            raise SpecError(
                f"{where}.requests.successful: missing; expected the per-request "
                "stats guidellm writes"
            )
        rows = [(r, s) for s in ("successful", "incomplete", "errored") for r in reqs.get(s) or []]
        starts = [
            ((r.get("info") or {}).get("timings") or {}).get("request_start") for r, _ in rows
        ]
        origin = min((s for s in starts if isinstance(s, int | float)), default=0.0)
        rows.sort(
            key=lambda x: (
                ((x[0].get("info") or {}).get("timings") or {}).get("request_start") or 0.0
            )
        )
        w0, w1 = bench.get("start_time"), bench.get("end_time")
        windowed = isinstance(w0, int | float) and isinstance(w1, int | float)
        times = [_times(r) for r, _ in rows]
        # which requests guidellm measured (module doc): all of them, the TTFT ones, the ITL ones
        kept = [not windowed or _overlaps(st, end, w0, w1) for st, end, _ in times]
        ttft_kept = [not windowed or _overlaps(st, first, w0, w1) for st, _, first in times]
        itl_kept = [not windowed or _overlaps(first, end, w0, w1) for _, end, first in times]
        records = [
            _record(
                i,
                r,
                s,
                origin,
                f"{where}.requests.{s}[{i}]",
                "measured" if keep else _outside(times[i], w0),
            )
            for i, ((r, s), keep) in enumerate(zip(rows, kept, strict=True))
        ]
        m = bench.get("metrics") or {}
        window = (round((w0 - origin) * NS), round((w1 - origin) * NS)) if windowed else None
        summary = metrics_mod.compute(records, window=window, percentile=guidellm_percentile)
        for name, which in (("ttft", ttft_kept), ("tpot", itl_kept)):
            values = [
                v
                for rec, keep in zip(records, which, strict=True)
                if keep and rec.ok and (v := metrics_mod.per_request(rec)[name]) is not None
            ]
            summary.update(metrics_mod.stats(values, name, guidellm_percentile))
        for k in [k for k in summary if "_itl_ms" in k or k.startswith("n_itl")]:
            summary.pop(k)  # not recomputable from first/last token times (LIMITATION)
        theirs = _theirs(m)
        limits = [LIMITATION]
        sampled = _sampled(bench, rows, kept)
        if sampled:
            limits.append(sampled)
        note = (
            _kept_note(bench, records, sum(ttft_kept), sum(itl_kept), exact=not sampled)
            if windowed
            else ""
        )
        dims = {"load": label}
        if label.startswith("c") and label[1:].isdigit():
            dims["concurrency"] = int(label[1:])
        metrics = [Metric(k, v, u, dims, PARSER) for k, v, u in metrics_mod.scalar_metrics(summary)]
        metrics += [
            Metric(k, v, u, {**dims, "source": "guidellm"}, GUIDELLM_PARSER)
            for k, v, u in metrics_mod.scalar_metrics(theirs)
        ]
        levels.append(
            {
                "label": label,
                "records": records,
                "summary": summary,
                "metrics": metrics,
                "guidellm": theirs,
                "limitations": limits,
                "kept": note,
            }
        )
    return {
        "levels": levels,
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "version": (doc.get("metadata") or {}).get("guidellm_version"),
    }


def _outside(times: tuple[float | None, float | None, float | None], w0: float) -> str:
    """A request guidellm left out: before its window opened (warm-up) or after (cool-down)."""
    start, end, _ = times
    return "warmup" if (end if end is not None else start or 0.0) < w0 else "cooldown"


def _kept_note(
    bench: dict[str, Any], records: list[RequestRecord], n_ttft: int, n_itl: int, exact: bool
) -> str:
    """What the recomputation kept and why, in the words of guidellm's settings."""
    config = bench.get("config") or {}
    phases = Counter(r.phase for r in records)
    return (
        f"guidellm's measurement window (warm-up {_phase(config.get('warmup'))}, cool-down "
        f"{_phase(config.get('cooldown'))}) kept {phases['measured']} of the file's "
        f"{len(records)} requests ({phases['warmup']} in the warm-up, {phases['cooldown']} "
        f"in the cool-down); TTFT over the {n_ttft} whose first token came in it, TPOT over "
        f"the {n_itl} whose later tokens did; percentiles by guidellm's rule (no "
        "interpolation)" + (", so they are guidellm's own" if exact else "")
    )


def _phase(setting: Any) -> str:
    if not isinstance(setting, dict):
        return "none" if setting in (None, 0) else str(setting)
    if setting.get("percent"):
        return f"{setting['percent']:.0%}"
    if setting.get("value"):
        return f"{setting['value']:g} ({str(setting.get('mode', '')).replace('prefer_', '')})"
    return "none"


def _sampled(
    bench: dict[str, Any], rows: list[tuple[dict[str, Any], str]], kept: list[bool]
) -> str:
    """A limitation when the file's request lists are guidellm's sample (its sample_size):
    fewer successful requests in the window than guidellm counted."""
    size = (bench.get("config") or {}).get("sample_size")
    total = ((bench.get("metrics") or {}).get("request_totals") or {}).get("successful")
    have = sum(
        1 for (_, status), keep in zip(rows, kept, strict=True) if keep and status == "successful"
    )
    if size is None or not isinstance(total, int) or have >= total:
        return ""
    return (
        f"the file holds guidellm's sample of the requests (sample_size {size}): {have} of "
        f"the {total} successful requests it measured, so our metrics, over the sample, "
        "differ from guidellm's own"
    )


def store_import(
    store: Any,
    path: Path,
    got: dict[str, Any],
    *,
    campaign: str,
    experiment: str = "guidellm-import",
    arm: str = "guidellm",
    placement: str = "unknown",
    host: str = "imported",
    repetition: int = 0,
    baseline: str | None = None,
) -> list[Any]:
    """One stored run per benchmark (load level); returns them."""
    from socketlab.serve.vllm_import import store_imported_level

    return [
        store_imported_level(
            store,
            path,
            lv,
            campaign=campaign,
            experiment=experiment,
            host=host,
            repetition=repetition,
            params={"arm": arm, "placement": placement, "load": lv["label"]},
            file_sha256=got["sha256"],
            extra={
                "arm": arm,
                "baseline": baseline,
                "source_format": f"guidellm {got['version']}",
                "kept": lv["kept"],
            },
        )
        for lv in got["levels"]
    ]
