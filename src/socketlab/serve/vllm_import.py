"""A vLLM ``bench serve`` result JSON (``--save-result --save-detailed``) as a serving run.

The per-request arrays (``ttfts``, ``itls``, ``latencies``, ``output_lens``, ``input_lens``,
``start_times``, ``errors``) become request records with the same timestamps our load
generator keeps (first event at TTFT, one event per ITL gap, the end at the latency), so the
metrics are recomputed with our definitions and sit in the store beside our own runs; vLLM's
own summary numbers are kept too (parser ``vllm-bench/1``) for a side-by-side check. A file
without the per-request arrays is refused: its numbers could not be recomputed.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from socketlab.errors import SpecError
from socketlab.parse import Metric
from socketlab.serve import metrics as metrics_mod
from socketlab.serve.campaign import PARSER
from socketlab.serve.records import RequestRecord

VLLM_PARSER = "vllm-bench/1"
NS = 1_000_000_000


def load_label(doc: dict[str, Any], path: Path) -> str:
    """c<N> for a concurrency cap, else r<rate>; from the fields or vLLM's file name."""
    if doc.get("max_concurrency"):
        return f"c{int(doc['max_concurrency'])}"
    m = re.search(r"concurrency(\d+)", path.name)
    if m:
        return f"c{m.group(1)}"
    rate = doc.get("request_rate")
    if isinstance(rate, int | float) and rate != float("inf"):
        return f"r{rate:g}"
    return "rinf"


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


#: per-request array -> (what an entry must be, its check)
ARRAYS = {
    "ttfts": ("a number (s)", _number),
    "latencies": ("a number (s)", _number),
    "output_lens": ("a token count", _number),
    "input_lens": ("a token count or null", lambda v: v is None or _number(v)),
    "start_times": ("a number (s)", _number),
    "errors": ("a string", lambda v: v is None or isinstance(v, str)),
    "itls": ("a list of numbers (s)", lambda v: isinstance(v, list) and all(map(_number, v))),
}
REQUIRED = ("ttfts", "latencies", "output_lens")


def _check_arrays(doc: dict[str, Any], path: Path) -> int:
    """The number of requests, after checking every per-request array is a list of that length
    holding what vLLM writes there; a malformed file is a one-line error naming the field."""
    missing = [k for k in REQUIRED if not isinstance(doc.get(k), list)]
    if missing:
        raise SpecError(f"{path}: field {missing[0]}: missing; expected a vLLM bench-serve JSON "
                        "saved with --save-detailed (per-request arrays)")
    n = len(doc["ttfts"])
    for key, (expected, check) in ARRAYS.items():
        values = doc.get(key)
        if values is None:
            continue
        if not isinstance(values, list) or len(values) != n:
            got = f"{len(values)} entries" if isinstance(values, list) else type(values).__name__
            raise SpecError(f"{path}: field {key}: expected a list of {n} entries (one per "
                            f"request, as ttfts), got {got}")
        for i, v in enumerate(values):
            if not check(v):
                raise SpecError(f"{path}: field {key}[{i}]: expected {expected}, got {v!r:.40}")
    return n


def records_from(doc: dict[str, Any], path: Path) -> list[RequestRecord]:
    n = _check_arrays(doc, path)
    itls = doc.get("itls") or [[] for _ in range(n)]
    starts = doc.get("start_times") or [0.0] * n
    errors = doc.get("errors") or [""] * n
    inputs = doc.get("input_lens") or [None] * n
    out = []
    for i in range(n):
        t_send = round(float(starts[i]) * NS)
        n_out = int(doc["output_lens"][i] or 0)
        rec = RequestRecord(index=i, phase="measured", prompt_id=f"vllm-{i}", n_in=inputs[i],
                            t_sched=t_send, t_send=t_send, n_out=n_out, n_out_source="usage")
        if errors[i] or n_out == 0:
            rec.status, rec.error = "error", str(errors[i] or "no output")[:200]
            out.append(rec)
            continue
        t = t_send + round(float(doc["ttfts"][i]) * NS)
        rec.events.append([t, 1])
        for gap in itls[i]:
            t += round(float(gap) * NS)
            rec.events.append([t, 1])
        end = t_send + round(float(doc["latencies"][i]) * NS)
        if len(rec.events) < n_out and end > rec.events[-1][0]:
            # no ITLs saved: the rest of the tokens arrive by the end
            rec.events.append([end, n_out - len(rec.events)])
        rec.t_done = max(end, rec.events[-1][0])
        rec.status = "ok"
        out.append(rec)
    return out


def import_vllm(path: Path, load: str | None = None) -> dict[str, Any]:
    """Read a file: {"label", "records", "summary" (ours), "metrics", "vllm" (their scalars),
    "sha256"}."""
    raw = path.read_bytes()
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise SpecError(f"{path}: not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise SpecError(f"{path}: expected a JSON object (a vLLM bench-serve result)")
    label = load or load_label(doc, path)
    records = records_from(doc, path)
    summary = metrics_mod.compute(records)
    dims = {"load": label}
    if label.startswith("c") and label[1:].isdigit():
        dims["concurrency"] = int(label[1:])
    ours = [Metric(k, v, u, dims, PARSER) for k, v, u in metrics_mod.scalar_metrics(summary)]
    theirs = {k: v for k, v in doc.items()
              if isinstance(v, int | float) and not isinstance(v, bool)}
    vllm = [Metric(k, float(v), u, {**dims, "source": "vllm"}, VLLM_PARSER)
            for k, v, u in metrics_mod.scalar_metrics(theirs)]
    return {"label": label, "records": records, "summary": summary, "metrics": ours + vllm,
            "vllm": theirs, "sha256": hashlib.sha256(raw).hexdigest(),
            "model": doc.get("model_id"), "backend": doc.get("backend")}


def store_import(store: Any, path: Path, *, campaign: str, experiment: str = "vllm-import",
                 arm: str = "vllm", placement: str = "unknown", host: str = "imported",
                 repetition: int = 0, load: str | None = None,
                 baseline: str | None = None, got: dict[str, Any] | None = None) -> Any:
    """Import a file as one stored run (key: hash of the file and the names); returns it.
    ``got``: the file already read by ``import_vllm`` (so a bad file never creates a store)."""
    from socketlab.serve.requests_store import save_requests
    from socketlab.store import RunRecord

    got = got if got is not None else import_vllm(path, load)
    params = {"arm": arm, "placement": placement}
    key = hashlib.sha256(json.dumps([campaign, experiment, host, params, repetition,
                                     got["sha256"]]).encode()).hexdigest()
    s = got["summary"]
    status = "ok" if s["completed"] and not s["failed"] else "failed"
    reason = "" if status == "ok" else f"{s['failed']} of {s['num_prompts']} requests failed"
    record = RunRecord(
        run_key=key, campaign=campaign, experiment=experiment, host=host,
        repetition=repetition, params=params, status=status, reason=reason,
        raw_dir=str(path.resolve()),
        extra={"arm": arm, "baseline": baseline, "imported_from": str(path),
               "sha256": got["sha256"], "model": got["model"], "backend": got["backend"],
               "load": got["label"]})
    save_requests(Path(store.path), key, got["label"], got["records"])
    store.add_run(record, got["metrics"])
    return record
