"""A vLLM ``bench serve`` result JSON as a serving run, in every layout vLLM has written
(socketlab.serve.vllm_defs; docs/serving.md lists the fields of each).

The per-request arrays become request records with the timestamps our load generator keeps
(first event at TTFT, one event per ITL gap), so the store holds them beside our own runs. The
fields vLLM defines are recomputed by vLLM's definitions from the arrays in seconds (no
rounding to ns), so they equal vLLM's own summary fields; how closely is stored per field
(``vllm_agreement``). vLLM's own scalars are kept as well (parser ``vllm-bench/1``).

Per-request latency is the file's ``latencies`` where written, else ttft + sum(itls), vLLM's
definition. Files before vLLM's January 2026 releases hold no ``start_times``: the requests'
places in time are unknown, so nothing that needs them is computed (no window throughput,
concurrency or per-second peaks; rates use the file's ``duration``), and that limitation is
stored with the run and shown by the import and the report - never a timeline at t = 0.
A file without per-request arrays is refused: nothing could be recomputed.
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
from socketlab.serve import vllm_defs
from socketlab.serve.records import RequestRecord
from socketlab.serve.runkind import PARSER
from socketlab.store.status import RunStatus

VLLM_PARSER = "vllm-bench/1"
NS = 1_000_000_000


def load_label(doc: dict[str, Any], path: Path) -> str:
    """r<rate> for a finite request rate, else c<N> for a concurrency cap (vLLM's closed-loop
    equivalent: rate inf), from the fields or vLLM's file name; our own files name it."""
    if isinstance(doc.get("load"), str) and doc.get("generator") == "socketlab.serve.loadgen":
        return doc["load"]
    rate = doc.get("request_rate")
    if isinstance(rate, int | float) and not isinstance(rate, bool) and rate != float("inf"):
        return f"r{rate:g}"
    if doc.get("max_concurrency"):
        return f"c{int(doc['max_concurrency'])}"
    m = re.search(r"concurrency(\d+)", path.name)
    if m:
        return f"c{m.group(1)}"
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
    "queue_times": ("a number (s) or null", lambda v: v is None or _number(v)),
    "errors": ("a string", lambda v: v is None or isinstance(v, str)),
    "itls": ("a list of numbers (s)", lambda v: isinstance(v, list) and all(map(_number, v))),
}
REQUIRED = ("ttfts", "itls", "output_lens")


def _check_arrays(doc: dict[str, Any], path: Path) -> int:
    """The number of requests, after checking every per-request array is a list of that length
    holding what vLLM writes there; a malformed file is a one-line error naming the field."""
    missing = [k for k in REQUIRED if not isinstance(doc.get(k), list)]
    if missing:
        raise SpecError(
            f"{path}: field {missing[0]}: missing; expected a vLLM bench-serve JSON "
            "saved with --save-detailed (per-request arrays)"
        )
    n = len(doc["ttfts"])
    for key, (expected, check) in ARRAYS.items():
        values = doc.get(key)
        if values is None:
            continue
        if not isinstance(values, list) or len(values) != n:
            got = f"{len(values)} entries" if isinstance(values, list) else type(values).__name__
            raise SpecError(
                f"{path}: field {key}: expected a list of {n} entries (one per "
                f"request, as ttfts), got {got}"
            )
        for i, v in enumerate(values):
            if not check(v):
                raise SpecError(f"{path}: field {key}[{i}]: expected {expected}, got {v!r:.40}")
    if "start_times" not in doc and not (_number(doc.get("duration")) and doc["duration"] > 0):
        raise SpecError(
            f"{path}: field duration: expected the run's duration in s (a positive "
            "number): without start_times the rates need it"
        )
    return n


def records_from(doc: dict[str, Any], path: Path) -> list[RequestRecord]:
    """Request records; without ``start_times`` each request's times are relative to its own
    send (t_send = 0, t_sched unknown)."""
    n = _check_arrays(doc, path)
    ok = vllm_defs.succeeded(doc)
    lats = vllm_defs.latencies(doc)
    starts = doc.get("start_times")
    origin = min(starts) if starts else 0.0
    errors = doc.get("errors") or [""] * n
    inputs = doc.get("input_lens") or [None] * n
    out = []
    for i in range(n):
        t_send = round((float(starts[i]) - origin) * NS) if starts else 0
        n_out = int(doc["output_lens"][i] or 0)
        rec = RequestRecord(
            index=i,
            phase="measured",
            prompt_id=f"vllm-{i}",
            n_in=inputs[i],
            t_sched=t_send if starts else None,
            t_send=t_send,
            n_out=n_out,
            n_out_source="usage",
        )
        if not ok[i] or n_out == 0:
            rec.status, rec.error = "error", str(errors[i] or "no output")[:200]
            out.append(rec)
            continue
        t = t_send + round(float(doc["ttfts"][i]) * NS)
        rec.events.append([t, 1])
        for gap in doc["itls"][i]:
            t += round(float(gap) * NS)
            rec.events.append([t, 1])
        end = t_send + round(lats[i] * NS)
        if len(rec.events) < n_out and end > rec.events[-1][0]:
            # no ITLs saved: the rest of the tokens arrive by the end
            rec.events.append([end, n_out - len(rec.events)])
        rec.t_done = max(end, rec.events[-1][0])
        rec.status = "ok"
        out.append(rec)
    return out


def limitations(doc: dict[str, Any]) -> list[str]:
    if isinstance(doc.get("start_times"), list):
        return []
    return [
        f"no start_times (vLLM layout {vllm_defs.layout(doc)}, before January 2026): the "
        "requests' places in time are unknown, so window throughput, concurrency, "
        "max_output_tokens_per_s and max_concurrent_requests are not recomputed (vLLM's own "
        "values are kept, parser vllm-bench/1); rates use the file's duration"
    ]


def import_vllm(path: Path, load: str | None = None) -> dict[str, Any]:
    """Read a file: {"label", "records", "summary" (ours), "metrics", "vllm" (their scalars),
    "agreement", "limitations", "layout", "sha256", ...}."""
    raw = path.read_bytes()
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise SpecError(f"{path}: not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise SpecError(f"{path}: expected a JSON object (a vLLM bench-serve result)")
    label = load or load_label(doc, path)
    records = records_from(doc, path)
    placed = isinstance(doc.get("start_times"), list)
    summary = metrics_mod.compute(records, placed=placed, duration_s=doc.get("duration"))
    theirs = {k.rstrip(":"): v for k, v in doc.items() if _number(v)}
    recomputed = vllm_defs.summary(doc)
    # vLLM's fields by vLLM's definitions, from the arrays in seconds (ours come from
    # ns-rounded records: the same definitions, rounded to 1 ns)
    summary.update(
        {
            k: v
            for k, v in recomputed.items()
            if summary.get(k) is not None
            or k in ("max_output_tokens_per_s", "max_concurrent_requests")
        }
    )
    if _number(doc.get("duration")):  # the rates above divide by the file's own duration
        summary["duration"] = float(doc["duration"])
    dims = {"load": label}
    if label.startswith("c") and label[1:].isdigit():
        dims["concurrency"] = int(label[1:])
    ours = [Metric(k, v, u, dims, PARSER) for k, v, u in metrics_mod.scalar_metrics(summary)]
    vllm = [
        Metric(k, float(v), u, {**dims, "source": "vllm"}, VLLM_PARSER)
        for k, v, u in metrics_mod.scalar_metrics(theirs)
    ]
    return {
        "label": label,
        "records": records,
        "summary": summary,
        "metrics": ours + vllm,
        "vllm": theirs,
        "agreement": vllm_defs.agreement(theirs, recomputed),
        "limitations": limitations(doc),
        "layout": vllm_defs.layout(doc),
        "sha256": hashlib.sha256(raw).hexdigest(),
        "model": doc.get("model_id"),
        "backend": doc.get("backend"),
    }


def store_imported_level(
    store: Any,
    path: Path,
    level: dict[str, Any],
    *,
    campaign: str,
    experiment: str,
    host: str,
    repetition: int,
    params: dict[str, Any],
    file_sha256: str,
    extra: dict[str, Any],
) -> Any:
    """Store one imported load level (a summary, its requests and metrics) as one run; its key
    hashes the file and the names, so importing the same file twice adds nothing new.
    Shared by the vLLM and guidellm importers."""
    from socketlab.serve.requests_store import save_requests
    from socketlab.store import RunRecord

    key = hashlib.sha256(
        json.dumps([campaign, experiment, host, params, repetition, file_sha256]).encode()
    ).hexdigest()
    s = level["summary"]
    status = RunStatus.OK if s["completed"] and not s["failed"] else RunStatus.FAILED
    reason = (
        "" if status == RunStatus.OK else (f"{s['failed']} of {s['num_prompts']} requests failed")
    )
    record = RunRecord(
        run_key=key,
        campaign=campaign,
        experiment=experiment,
        host=host,
        repetition=repetition,
        params=params,
        status=status,
        reason=reason,
        raw_dir=str(path.resolve()),
        extra={
            "imported_from": str(path),
            "sha256": file_sha256,
            "load": level["label"],
            "limitations": level["limitations"],
            **extra,
        },
    )
    save_requests(Path(store.path), key, level["label"], level["records"])
    store.add_run(record, level["metrics"])
    return record


def store_import(
    store: Any,
    path: Path,
    *,
    campaign: str,
    experiment: str = "vllm-import",
    arm: str = "vllm",
    placement: str = "unknown",
    host: str = "imported",
    repetition: int = 0,
    load: str | None = None,
    baseline: str | None = None,
    got: dict[str, Any] | None = None,
) -> Any:
    """Import a file as one stored run (key: hash of the file and the names); returns it.
    ``got``: the file already read by ``import_vllm`` (so a bad file never creates a store)."""
    got = got if got is not None else import_vllm(path, load)
    return store_imported_level(
        store,
        path,
        got,
        campaign=campaign,
        experiment=experiment,
        host=host,
        repetition=repetition,
        params={"arm": arm, "placement": placement},
        file_sha256=got["sha256"],
        extra={
            "arm": arm,
            "baseline": baseline,
            "model": got["model"],
            "backend": got["backend"],
            "source_format": f"vllm {got['layout']}",
            "vllm_agreement": got["agreement"],
        },
    )
