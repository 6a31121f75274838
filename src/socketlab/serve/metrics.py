"""Serving metrics from raw request records (pure; definitions: measurement.md §D.b).

Per request: TTFT = first output event - send (vLLM, genai-perf, guidellm); TTFT_sched = first
output event - scheduled (MLPerf); TPOT = (last - first output event) / (N_out - 1) when
N_out >= 2; ITL = every gap between output events (vLLM's pooled list) and the token-weighted
per-token ITL; E2E = last output event - send. Throughput within a measurement window counts
only the token events that fall inside it, which removes the drain-tail bias of "first dispatch
to last completion"; the vLLM-style whole-run numbers are published too, under vLLM's names.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from socketlab.serve import vllm_defs
from socketlab.serve.records import RequestRecord

NS = 1e9
MS = 1e6
#: percentiles published for every latency metric (numpy linear interpolation, as vLLM)
PERCENTILES = (50, 90, 95, 99)


def linear_percentile(a: np.ndarray, p: float) -> float:
    """vLLM's percentile: numpy's linear interpolation between the two nearest values."""
    return float(np.percentile(a, p))


@dataclass(frozen=True)
class Slo:
    """Objectives for goodput, inclusive (a request at exactly the limit is good)."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2el_ms: float | None = None

    def as_dict(self) -> dict[str, float]:
        return {k: v for k, v in vars(self).items() if v is not None}


def per_request(r: RequestRecord) -> dict[str, Any]:
    """Latencies of one request in ns (None where undefined)."""
    out: dict[str, Any] = {
        "ttft": None,
        "ttft_sched": None,
        "e2el": None,
        "tpot": None,
        "queue_client": None,
        "itl": [],
        "itl_token": [],
    }
    if r.t_send is not None and r.t_sched is not None:
        out["queue_client"] = r.t_send - r.t_sched
    if not r.events or r.t_send is None:
        return out
    first, end = r.events[0][0], r.events[-1][0]
    out["ttft"] = first - r.t_send
    out["e2el"] = end - r.t_send
    if r.t_sched is not None:
        out["ttft_sched"] = first - r.t_sched
    n_out = r.n_out if r.n_out is not None else sum(n for _, n in r.events)
    if n_out >= 2:
        out["tpot"] = (end - first) / (n_out - 1)
    for (t0, _), (t1, n) in zip(r.events, r.events[1:], strict=False):
        gap = t1 - t0
        out["itl"].append(gap)
        n = max(int(n), 1)
        out["itl_token"].extend([gap / n] * n)
    return out


def stats(
    values_ns: list[float],
    name: str,
    percentile: Callable[[np.ndarray, float], float] = linear_percentile,
) -> dict[str, float | None]:
    """mean/median/std/min/max/pXX of one metric in ms, with vLLM's field names; percentiles
    by ``percentile`` (an importer passes its tool's rule, so it recomputes the tool's own)."""
    keys = ["mean", "median", "std", "min", "max"] + [f"p{p}" for p in PERCENTILES if p != 50]
    if not values_ns:
        return {f"{k}_{name}_ms": None for k in keys} | {f"n_{name}": 0}
    a = np.asarray(values_ns, dtype=float) / MS
    out = {
        f"mean_{name}_ms": float(a.mean()),
        f"median_{name}_ms": percentile(a, 50),
        f"std_{name}_ms": float(a.std()),
        f"min_{name}_ms": float(a.min()),
        f"max_{name}_ms": float(a.max()),
        f"n_{name}": len(a),
    }
    for p in PERCENTILES:
        if p != 50:
            out[f"p{p}_{name}_ms"] = percentile(a, p)
    if len(a) >= 1000:
        out[f"p99.9_{name}_ms"] = percentile(a, 99.9)
    return out


def is_good(r: RequestRecord, lat: dict[str, Any], slo: Slo) -> bool:
    """Succeeded and met every defined objective; TPOT is not judged when N_out < 2
    (guidellm's rule; vLLM would pass it automatically)."""
    if not r.ok:
        return False
    if slo.ttft_ms is not None and (lat["ttft"] is None or lat["ttft"] / MS > slo.ttft_ms):
        return False
    if slo.tpot_ms is not None and lat["tpot"] is not None and lat["tpot"] / MS > slo.tpot_ms:
        return False
    return not (slo.e2el_ms is not None and (lat["e2el"] is None or lat["e2el"] / MS > slo.e2el_ms))


def _completion(r: RequestRecord) -> int | None:
    return r.t_done if r.t_done is not None else r.t_end


def _vllm_goodput(ok: list[RequestRecord], lats: dict[int, dict[str, Any]], slo: Slo) -> int:
    """Requests good by vLLM's rule: inclusive, and a one-token output's TPOT counts as 0."""
    limits = {
        k: v * MS
        for k, v in (("ttft", slo.ttft_ms), ("tpot", slo.tpot_ms), ("e2el", slo.e2el_ms))
        if v is not None
    }
    return sum(1 for r in ok if all((lats[id(r)][k] or 0) <= v for k, v in limits.items()))


def compute(
    records: list[RequestRecord],
    slo: Slo | None = None,
    window: tuple[int, int] | None = None,
    *,
    placed: bool = True,
    duration_s: float | None = None,
    percentile: Callable[[np.ndarray, float], float] = linear_percentile,
) -> dict[str, Any]:
    """The summary of one load point. Warm-up records are ignored; errors are never dropped.

    ``placed=False``: the requests' send times are unknown (each record's times are relative
    to its own send, e.g. a vLLM file without ``start_times``): only per-request latencies are
    computed, rates use ``duration_s`` (the source's own run duration), and every field that
    needs the requests' placement in time (window, concurrency, per-second peaks, dispatch
    delay) is left out rather than computed from a made-up timeline. ``percentile``: how latency
    percentiles are read (vLLM's linear interpolation; an importer may pass its tool's rule).
    """
    slo = slo or Slo()
    measured = [r for r in records if r.phase == "measured"]
    ok = [r for r in measured if r.ok]
    lats = {id(r): per_request(r) for r in measured}
    out: dict[str, Any] = {
        "completed": len(ok),
        "failed": len(measured) - len(ok),
        "num_prompts": len(measured),
    }

    sends = [r.t_send for r in measured if r.t_send is not None]
    ends = [c for r in measured if (c := _completion(r)) is not None]
    start = min(sends) if sends else 0
    stop = max(ends + sends) if sends else 0
    duration = max(stop - start, 1) / NS if placed else duration_s
    n_out = {
        id(r): (r.n_out if r.n_out is not None else sum(n for _, n in r.events)) for r in measured
    }
    total_in = sum(r.n_in or 0 for r in ok)
    total_out = sum(n_out[id(r)] for r in ok)
    good = [r for r in ok if is_good(r, lats[id(r)], slo)]
    rate = (lambda x: x / duration) if duration else (lambda x: None)
    out.update(
        duration=duration,
        total_input_tokens=total_in,
        total_output_tokens=total_out,
        request_throughput=rate(len(ok)),
        output_throughput=rate(total_out),
        total_token_throughput=rate(total_in + total_out),
        # vLLM's goodput rule (ours, judged the guidellm way, is goodput_req_s / slo_attainment)
        request_goodput=rate(_vllm_goodput(ok, lats, slo)) if slo.as_dict() else None,
        slo_attainment=len(good) / len(measured) if measured and slo.as_dict() else None,
        slo=slo.as_dict(),
    )
    if placed:
        out.update(_timeline(measured, ok, good, lats, slo, window, start, stop))

    def pool(key: str, rs: list[RequestRecord]) -> list[float]:
        vals: list[float] = []
        for r in rs:
            v = lats[id(r)][key]
            if isinstance(v, list):
                vals.extend(v)
            elif v is not None:
                vals.append(v)
        return vals

    for name in ("ttft", "tpot", "itl", "e2el", "ttft_sched", "itl_token"):
        out.update(stats(pool(name, ok), name, percentile))
    if placed:
        out.update(stats(pool("queue_client", measured), "queue_client", percentile))
        out["dispatch_delay_p99_ms"] = out["p99_queue_client_ms"]
        # Little's law: request rate x mean latency should equal the mean concurrency.
        if out["mean_e2el_ms"] is not None:
            out["littles_law_concurrency"] = (
                out["window_request_throughput"] * out["mean_e2el_ms"] / 1e3
            )

    out["error_counts"] = dict(Counter(r.error or "unknown" for r in measured if not r.ok))
    # vLLM's per-request arrays (seconds), measured requests in dispatch order, with vLLM's
    # meanings: a failed request has output length and latency 0 and a non-empty error.
    out["input_lens"] = [r.n_in for r in measured]
    out["output_lens"] = [n_out[id(r)] if r.ok else 0 for r in measured]
    out["ttfts"] = [(lats[id(r)]["ttft"] or 0) / NS for r in measured]
    out["latencies"] = [(lats[id(r)]["e2el"] or 0) / NS if r.ok else 0.0 for r in measured]
    out["itls"] = [[g / NS for g in lats[id(r)]["itl"]] for r in measured]
    out["errors"] = ["" if r.ok else (r.error or "unknown") for r in measured]
    if placed:
        out["start_times"] = [(r.t_send or 0) / NS for r in measured]
        out["queue_times"] = [(lats[id(r)]["queue_client"] or 0) / NS for r in measured]
        out.update(
            vllm_defs.peaks(
                [r.ok for r in measured],
                out["start_times"],
                out["ttfts"],
                out["itls"],
                out["latencies"],
                vllm_defs.STARTS,
            )
        )
    return out


def _timeline(measured, ok, good, lats, slo, window, start, stop) -> dict[str, Any]:
    """The fields that need every request's place in time: window rates, concurrency, peaks."""
    out: dict[str, Any] = {}
    if window is None:
        window = (start, max((r.t_end for r in ok if r.t_end is not None), default=stop))
    w0, w1 = window
    wlen = max(w1 - w0, 1) / NS

    def in_w(t: int | None) -> bool:
        return t is not None and w0 <= t <= w1

    w_tokens = sum(n for r in measured for t, n in r.events if in_w(t))
    out.update(
        window_start_s=w0 / NS,
        window_end_s=w1 / NS,
        window_s=wlen,
        window_output_tok_s=w_tokens / wlen,
        window_request_throughput=sum(1 for r in ok if in_w(r.t_end)) / wlen,
        window_total_tok_s=(w_tokens + sum(r.n_in or 0 for r in ok if in_w(r.t_first))) / wlen,
        goodput_req_s=sum(1 for r in good if in_w(r.t_end)) / wlen if slo.as_dict() else None,
        goodput_tok_s=(
            sum(n for r in good for t, n in r.events if in_w(t)) / wlen if slo.as_dict() else None
        ),
    )
    # Concurrency: exact sweep over send/completion events of every measured request (failed
    # ones too, to their end); the mean is time-weighted in W. vLLM's max_concurrent_requests
    # (successful requests only, to the last token) is computed apart, by its definition.
    edges = sorted(
        [(r.t_send, 1) for r in measured if r.t_send is not None]
        + [(c, -1) for r in measured if r.t_send is not None and (c := _completion(r)) is not None],
        key=lambda e: (e[0], e[1]),
    )
    cur = peak = 0
    area = 0.0
    last = w0
    for t, d in edges:
        lo, hi = max(last, w0), min(t, w1)
        if hi > lo:
            area += cur * (hi - lo)
        last = max(last, t)
        cur += d
        peak = max(peak, cur)
    out["peak_concurrency"] = peak
    out["mean_concurrency"] = area / (wlen * NS)
    buckets: Counter[int] = Counter()
    for r in measured:
        for t, n in r.events:
            buckets[int((t - start) // NS)] += n
    out["peak_output_tokens_1s"] = max(buckets.values(), default=0)
    return out


_LATENCIES = (
    "ttft",
    "tpot",
    "itl",
    "e2el",
    "ttft_sched",
    "itl_token",
    "queue_client",
    "client_queue_time",
    "tpot_token_weighted",
    "tpot_incl_ttft",
    "request_latency",
)
# (vLLM's name for queue_client, then guidellm's latencies: guidellm_import.MAPPED)
#: the scalar fields of a summary (ours, vLLM's, guidellm's) -> their units (socketlab.units);
#: percentiles are matched by _PERCENTILE, as vLLM's are whichever --metric-percentiles named
UNITS: dict[str, str] = {
    **{
        f"{s}_{name}_ms": "ms"
        for s in ("mean", "median", "std", "min", "max")
        for name in _LATENCIES
    },
    **{f"n_{name}": "count" for name in _LATENCIES},
    **dict.fromkeys(
        ("duration", "window_start_s", "window_end_s", "window_s", "client_cpu_s"), "s"
    ),
    **dict.fromkeys(
        (
            "output_throughput",
            "total_token_throughput",
            "max_output_tokens_per_s",
            "peak_output_tokens_1s",
            "window_output_tok_s",
            "window_total_tok_s",
            "goodput_tok_s",
            "output_tok_s",
        ),
        "tok/s",
    ),
    **dict.fromkeys(
        (
            "request_throughput",
            "request_goodput",
            "window_request_throughput",
            "goodput_req_s",
            "request_rate",
        ),
        "req/s",
    ),
    **dict.fromkeys(
        (
            "completed",
            "failed",
            "num_prompts",
            "total_input_tokens",
            "total_output_tokens",
            "peak_concurrency",
            "mean_concurrency",
            "littles_law_concurrency",
            "max_concurrent_requests",
            "max_concurrency",
            "requests_successful",
            "requests_errored",
            "requests_incomplete",
            "short_outputs",
        ),
        "count",
    ),
    **dict.fromkeys(("dispatch_delay_p99_ms", "event_loop_lag_p99_ms"), "ms"),
    "slo_attainment": "fraction",
    "burstiness": "ratio",
    "rtfx": "ratio",
}
_PERCENTILE = re.compile(rf"p\d+(?:\.\d+)?_(?:{'|'.join(_LATENCIES)})_ms")


def scalar_metrics(summary: dict[str, Any]) -> list[tuple[str, float, str]]:
    """(field, value, unit) of each number in ``summary`` that UNITS defines, for the store's
    metrics table; a field UNITS does not define stays in the summary only."""
    units = {k: UNITS.get(k) or ("ms" if _PERCENTILE.fullmatch(k) else None) for k in summary}
    return [
        (k, float(v), units[k])
        for k, v in summary.items()
        if units[k] and isinstance(v, int | float) and not isinstance(v, bool)
    ]
