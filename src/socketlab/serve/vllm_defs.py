"""vLLM's ``bench serve`` result JSON: the layouts each version writes and vLLM's own summary
definitions, computed from the per-request arrays in seconds exactly as vLLM computes them.

Layouts (the writers read: vllm-project/vllm ``benchmarks/benchmark_serving.py`` and
``vllm/benchmarks/serve.py``; docs/serving.md has the field table):

- ``benchmark_serving``: the old script (vLLM 0.6-0.9). No ``failed``, ``endpoint_type``,
  ``latencies`` or ``start_times``; goodput is written under the key ``"request_goodput:"``
  (with the colon); the per-request arrays are always written (its --save-detailed filter
  runs before the results are merged, so it removes nothing).
- ``serve``: ``vllm bench serve`` up to 2025 (0.10, 0.11): adds ``failed``, ``endpoint_type``,
  ``label``, ``max_output_tokens_per_s`` and ``max_concurrent_requests`` (the largest count of
  requests active in one 1 s bucket); arrays only with --save-detailed; no ``latencies`` or
  ``start_times``.
- ``serve-start-times``: ``vllm bench serve`` from January 2026: adds ``latencies``,
  ``start_times`` (perf_counter seconds), ``queue_times``, ``rtfx``; ``max_concurrent_requests``
  becomes the exact peak of a sweep over [start, start + latency) of the successful requests;
  without --save-detailed it still keeps ``latencies`` and ``queue_times``.

Per request vLLM defines: latency = last content chunk - start = ttft + sum(itls) (the field
``latencies`` where written; vLLM's own timeline plot derives it the same way); TPOT =
(latency - ttft) / (output_len - 1) for output_len > 1; ITL = the pooled chunk gaps. A request
failed when its ``errors`` entry is non-empty (vLLM writes "" for a success).
"""

from __future__ import annotations

from typing import Any

import numpy as np

OLD, SERVE, STARTS = "benchmark_serving", "serve", "serve-start-times"


def layout(doc: dict[str, Any]) -> str:
    if "start_times" in doc or "queue_times" in doc or "rtfx" in doc:
        return STARTS
    if "request_goodput:" in doc or ("failed" not in doc and "endpoint_type" not in doc):
        return OLD
    return SERVE


def succeeded(doc: dict[str, Any]) -> list[bool]:
    """vLLM's success flag, which the file does not hold: an empty error string (or, without
    ``errors``, a non-zero output length, since vLLM writes 0 for a failed request)."""
    if isinstance(doc.get("errors"), list):
        return [not e for e in doc["errors"]]
    return [bool(n) for n in doc["output_lens"]]


def latencies(doc: dict[str, Any]) -> list[float]:
    """Per-request latency in s: the file's ``latencies``, else ttft + sum(itls)."""
    if isinstance(doc.get("latencies"), list):
        return [float(x) for x in doc["latencies"]]
    return [float(t) + float(sum(i)) for t, i in zip(doc["ttfts"], doc["itls"], strict=True)]


def _stats(name: str, values: list[float], percentiles: list[float]) -> dict[str, float]:
    """vLLM's mean/median/std/pXX in ms (np.* of ``values or 0``: 0.0 for no values)."""
    v = values or 0
    out = {
        f"mean_{name}_ms": float(np.mean(v)) * 1000,
        f"median_{name}_ms": float(np.median(v)) * 1000,
        f"std_{name}_ms": float(np.std(v)) * 1000,
    }
    for p in percentiles:
        word = str(int(p)) if int(p) == p else str(p)
        out[f"p{word}_{name}_ms"] = float(np.percentile(v, p)) * 1000
    return out


def percentiles_in(doc: dict[str, Any]) -> list[float]:
    """The percentiles the file was written with (``--metric-percentiles``), from its keys."""
    found = set()
    for k in doc:
        if k.startswith("p") and k.endswith("_ttft_ms"):
            try:
                found.add(float(k[1 : -len("_ttft_ms")]))
            except ValueError:
                continue
    return sorted(found) or [99.0]


def peaks(
    ok: list[bool],
    starts: list[float],
    ttfts: list[float],
    itls: list[list[float]],
    lats: list[float],
    style: str,
) -> dict[str, float]:
    """``max_output_tokens_per_s`` (content chunks of successful requests per 1 s bucket from
    their first start) and ``max_concurrent_requests`` in the writer's ``style``."""
    idx = [i for i, good in enumerate(ok) if good]
    if not idx:
        return {"max_output_tokens_per_s": 0.0, "max_concurrent_requests": 0}
    t0 = min(starts[i] for i in idx)
    n_buckets = int(np.ceil(max(starts[i] + lats[i] for i in idx) - t0)) + 1
    tokens = np.zeros(n_buckets)
    active = np.zeros(n_buckets)
    for i in idx:
        t = starts[i] + ttfts[i]
        times = [t]
        for gap in itls[i]:
            t += gap
            times.append(t)
        for x in times:
            b = int(x - t0)
            if 0 <= b < n_buckets:
                tokens[b] += 1
        first = int(starts[i] - t0)
        if style == SERVE:  # 0.10/0.11: every bucket from the start's to the end's, inclusive
            for b in range(first, int(starts[i] + lats[i] - t0) + 1):
                active[b] += 1
    if style == SERVE:
        peak = int(np.max(active))
    else:  # 2026: exact sweep over half-open intervals, a departure before an arrival
        edges = sorted([(starts[i], 1) for i in idx] + [(starts[i] + lats[i], -1) for i in idx])
        cur = peak = 0
        for _, d in edges:
            cur += d
            peak = max(peak, cur)
    return {"max_output_tokens_per_s": float(np.max(tokens)), "max_concurrent_requests": peak}


def summary(doc: dict[str, Any], slo_ms: dict[str, float] | None = None) -> dict[str, Any]:
    """vLLM's summary fields recomputed from a file's per-request arrays (and its ``duration``
    for the rates). Fields that need ``start_times`` are left out when the file has none."""
    ok = succeeded(doc)
    lats = latencies(doc)
    out_lens = [int(n or 0) if good else 0 for n, good in zip(doc["output_lens"], ok, strict=True)]
    ins = doc.get("input_lens") or [0] * len(ok)
    ttfts, itls_all, tpots, e2els, all_tpots = [], [], [], [], []
    for i, good in enumerate(ok):
        if not good:
            continue
        if out_lens[i] > 1:
            tpots.append((lats[i] - doc["ttfts"][i]) / (out_lens[i] - 1))
        all_tpots.append(tpots[-1] if out_lens[i] > 1 else 0.0)
        itls_all += doc["itls"][i]
        ttfts.append(doc["ttfts"][i])
        e2els.append(lats[i])
    completed = sum(ok)
    total_in = sum(int(ins[i] or 0) for i, good in enumerate(ok) if good)
    total_out = sum(out_lens)
    out: dict[str, Any] = {
        "completed": completed,
        "failed": len(ok) - completed,
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
    }
    dur = doc.get("duration")
    if isinstance(dur, int | float) and dur > 0:
        out.update(
            request_throughput=completed / dur,
            output_throughput=total_out / dur,
            total_token_throughput=(total_in + total_out) / dur,
        )
        if slo_ms:  # vLLM: inclusive, a one-token output has TPOT 0 (passes)
            cols = {"ttft": ttfts, "tpot": all_tpots, "e2el": e2els}
            good = sum(
                1
                for row in zip(*(cols[k] for k in slo_ms), strict=True)
                if all(v <= slo_ms[k] / 1000 for k, v in zip(slo_ms, row, strict=True))
            )
            out["request_goodput"] = good / dur
    pcts = percentiles_in(doc)
    for name, values in (("ttft", ttfts), ("tpot", tpots), ("itl", itls_all), ("e2el", e2els)):
        out.update(_stats(name, values, pcts))
    if isinstance(doc.get("start_times"), list):
        out.update(
            peaks(
                ok,
                [float(s) for s in doc["start_times"]],
                [float(t) for t in doc["ttfts"]],
                doc["itls"],
                lats,
                layout(doc),
            )
        )
    return out


def agreement(doc: dict[str, Any], recomputed: dict[str, Any]) -> dict[str, float]:
    """Relative difference |file - recomputed| / |file| for every summary field the file
    holds and the arrays give (0 where both are 0)."""
    out = {}
    for k, mine in recomputed.items():
        theirs = doc.get(k)
        if isinstance(theirs, bool) or not isinstance(theirs, int | float):
            continue
        out[k] = abs(theirs - mine) / abs(theirs) if theirs else float(abs(mine) > 0)
    return out
