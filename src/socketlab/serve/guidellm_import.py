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
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from socketlab.errors import SpecError
from socketlab.parse import Metric
from socketlab.serve import metrics as metrics_mod
from socketlab.serve.campaign import PARSER
from socketlab.serve.records import RequestRecord

GUIDELLM_PARSER = "guidellm/1"
NS = 1_000_000_000
#: guidellm metric -> (our name, scale to our unit)
MAPPED = {
    "time_to_first_token_ms": ("ttft", 1.0),
    "inter_token_latency_ms": ("tpot_token_weighted", 1.0),
    "time_per_output_token_ms": ("tpot_incl_ttft", 1.0),
    "request_latency": ("request_latency", 1000.0),
}
LIMITATION = ("guidellm keeps only the first and last token time of a request: vLLM's pooled "
              "ITL (itl) and the per-token ITL are not recomputed")


def _load(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_bytes())
    except ValueError as exc:
        raise SpecError(f"{path}: not JSON ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        raise SpecError(f"{path}: field benchmarks: missing; expected a guidellm benchmarks "
                        "JSON (guidellm run --output kind=json)")
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
    raise SpecError(f"{where}.config.strategy: expected a guidellm strategy (synchronous, "
                    f"concurrent with streams, constant/poisson with rate), got {kind!r}")


def _record(i: int, req: dict[str, Any], status: str, origin: float, where: str) -> RequestRecord:
    t = (req.get("info") or {}).get("timings")
    if not isinstance(t, dict) or not isinstance(t.get("request_start"), int | float):
        raise SpecError(f"{where}.info.timings.request_start: expected a time in s")

    def ns(x: float) -> int:
        return round((x - origin) * NS)

    n_out = req.get("output_tokens")
    rec = RequestRecord(index=i, phase="measured", prompt_id=str(req.get("request_id", i)),
                        n_in=req.get("prompt_tokens"), t_sched=ns(t["request_start"]),
                        t_send=ns(t["request_start"]), n_out=n_out,
                        n_out_source="usage" if (req.get("output_metrics") or {}).get(
                            "text_tokens") is not None else "events")
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
            raise SpecError(f"{where}.requests.successful: missing; expected the per-request "
                            "stats guidellm writes")
        rows = [(r, s) for s in ("successful", "incomplete", "errored")
                for r in reqs.get(s) or []]
        starts = [((r.get("info") or {}).get("timings") or {}).get("request_start")
                  for r, _ in rows]
        origin = min((s for s in starts if isinstance(s, int | float)), default=0.0)
        rows.sort(key=lambda x: ((x[0].get("info") or {}).get("timings") or {}).get(
            "request_start") or 0.0)
        records = [_record(i, r, s, origin, f"{where}.requests.{s}[{i}]")
                   for i, (r, s) in enumerate(rows)]
        m = bench.get("metrics") or {}
        w0 = bench.get("start_time")
        w1 = bench.get("end_time")
        window = ((round((w0 - origin) * NS), round((w1 - origin) * NS))
                  if isinstance(w0, int | float) and isinstance(w1, int | float) else None)
        summary = metrics_mod.compute(records, window=window)
        for k in [k for k in summary if "_itl_ms" in k or k.startswith("n_itl")]:
            summary.pop(k)  # not recomputable from first/last token times (LIMITATION)
        theirs = _theirs(m)
        limits = [LIMITATION]
        total = (m.get("request_totals") or {}).get("total")
        if isinstance(total, int) and total != len(records):
            limits.append(f"guidellm kept {len(records)} of {total} requests (sampled): our "
                          "metrics cover those only")
        dims = {"load": label}
        if label.startswith("c") and label[1:].isdigit():
            dims["concurrency"] = int(label[1:])
        metrics = [Metric(k, v, u, dims, PARSER)
                   for k, v, u in metrics_mod.scalar_metrics(summary)]
        metrics += [Metric(k, v, u, {**dims, "source": "guidellm"}, GUIDELLM_PARSER)
                    for k, v, u in metrics_mod.scalar_metrics(theirs)]
        levels.append({"label": label, "records": records, "summary": summary,
                       "metrics": metrics, "guidellm": theirs, "limitations": limits})
    return {"levels": levels, "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "version": (doc.get("metadata") or {}).get("guidellm_version")}


def store_import(store: Any, path: Path, got: dict[str, Any], *, campaign: str,
                 experiment: str = "guidellm-import", arm: str = "guidellm",
                 placement: str = "unknown", host: str = "imported", repetition: int = 0,
                 baseline: str | None = None) -> list[Any]:
    """One stored run per benchmark (load level); returns them."""
    from socketlab.serve.vllm_import import store_imported_level

    return [store_imported_level(
        store, path, lv, campaign=campaign, experiment=experiment, host=host,
        repetition=repetition, params={"arm": arm, "placement": placement, "load": lv["label"]},
        file_sha256=got["sha256"],
        extra={"arm": arm, "baseline": baseline, "source_format": f"guidellm {got['version']}"})
        for lv in got["levels"]]
