"""`orchestrate import-vllm` stores a vLLM bench-serve JSON as a run whose recomputed metrics
match vLLM's own; `orchestrate serving-report` shows it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from socketlab.cli import main
from socketlab.serve.requests_store import load_requests
from socketlab.store import Store

FIXTURES = Path(__file__).parent / "fixtures" / "serve"
FIXTURE = FIXTURES / "vllm-bench-c4.json"  # vLLM 0.10/0.11 `bench serve --save-detailed`
#: the fields vLLM computes that every layout writes (fixtures: make_vllm_fixtures.py)
VLLM_FIELDS = (
    "completed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "mean_ttft_ms",
    "median_ttft_ms",
    "std_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "std_tpot_ms",
    "p99_tpot_ms",
    "mean_itl_ms",
    "median_itl_ms",
    "std_itl_ms",
    "p99_itl_ms",
)


def _stored(tmp_path, name):
    with Store(tmp_path / name / "store.sqlite", create=False) as store:
        (run,) = store.runs(name)
        frame = store.metrics_frame(name)
        (records,) = load_requests(store.path, run.run_key).values()
    ours = frame[(frame.parser == "serving/1") & (frame["dim.load"] == "c4")]
    return run, dict(zip(ours.metric, ours.value, strict=True)), records


@pytest.mark.parametrize(
    "name, layout, placed",
    [
        ("vllm-0.8-benchmark-serving-c4.json", "benchmark_serving", False),
        ("vllm-bench-c4.json", "serve", False),
        ("vllm-2026-c4.json", "serve-start-times", True),
    ],
)
def test_each_vllm_layout_imports_with_vllms_numbers(tmp_path, capsys, name, layout, placed):
    path = FIXTURES / name
    doc = json.loads(path.read_text())
    assert ("latencies" in doc, "start_times" in doc) == (placed, placed)  # as vLLM wrote
    assert main(["import-vllm", str(path), "--campaign", "imp", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"(vLLM layout {layout})" in out
    run, value, records = _stored(tmp_path, "imp")
    assert run.status == "failed" and run.reason == "1 of 7 requests failed"
    assert records[4].error.startswith("ClientConnectorError")
    fields = VLLM_FIELDS + (("failed",) if "failed" in doc else ())
    for field in fields:  # vLLM's definitions, from the arrays in seconds: vLLM's own numbers
        assert value[field] == pytest.approx(doc[field], rel=1e-9, abs=1e-12), field
    assert max(run.extra["vllm_agreement"].values()) < 1e-9
    if placed:
        assert run.extra["limitations"] == [] and "limitation:" not in out
        for field in ("max_concurrent_requests", "max_output_tokens_per_s"):
            assert value[field] == doc[field], field
        assert value["peak_concurrency"] == 4 and "window_output_tok_s" in value
        sends = [r.t_send for r in records]
        assert sends == sorted(sends) and sends[-1] > 0.9e9  # the 7th request waited ~1 s
    else:
        # no start times: nothing that needs them is computed, and the limitation is stored
        # and shown - no request timeline at t = 0 (a c4 file once gave 22x the throughput)
        for field in (
            "window_output_tok_s",
            "max_concurrent_requests",
            "peak_concurrency",
            "mean_concurrency",
            "max_output_tokens_per_s",
            "p99_queue_client_ms",
        ):
            assert field not in value, field
        (lim,) = run.extra["limitations"]
        assert lim.startswith(f"no start_times (vLLM layout {layout}")
        assert f"limitation: {lim}" in out
        assert value["duration"] == doc["duration"]
        capsys.readouterr()
        assert main(["serving-report", "imp", "--results", str(tmp_path)]) == 0
        report = capsys.readouterr().out
        assert "## Limitations of imported runs" in report and lim in report
    # e2el: latency as vLLM defines it (the file's latencies, else ttft + sum(itls))
    lat = doc.get("latencies") or [
        t + sum(i) for t, i in zip(doc["ttfts"], doc["itls"], strict=True)
    ]
    ok = [x for x, e in zip(lat, doc["errors"], strict=True) if not e]
    assert value["median_e2el_ms"] == pytest.approx(float(np.median(ok)) * 1000, rel=1e-9)


def test_vllm_011_bucket_concurrency_is_not_ours(tmp_path):
    """vLLM 0.10/0.11's max_concurrent_requests counts requests active in a 1 s bucket: 5 in
    the fixture under a cap of 4. It is kept as vLLM's number and not recomputed."""
    doc = json.loads(FIXTURE.read_text())
    assert doc["max_concurrent_requests"] == 5 and doc["max_concurrency"] == 4
    assert main(["import-vllm", str(FIXTURE), "--campaign", "imp", "--results", str(tmp_path)]) == 0
    with Store(tmp_path / "imp" / "store.sqlite", create=False) as store:
        frame = store.metrics_frame("imp")
    theirs = frame[frame.parser == "vllm-bench/1"]
    assert dict(zip(theirs.metric, theirs.value, strict=True))["max_concurrent_requests"] == 5
    assert "max_concurrent_requests" not in set(frame[frame.parser == "serving/1"].metric)


def test_import_shows_the_serving_report(tmp_path, capsys):
    assert (
        main(
            [
                "import-vllm",
                str(FIXTURE),
                "--campaign",
                "imp",
                "--arm",
                "vllm",
                "--results",
                str(tmp_path),
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["serving-report", "imp", "--results", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "| vllm-import | vllm | unknown | c4 |" in text
    assert "1 of 7 requests failed" in text


def test_summary_only_file_is_refused(tmp_path, capsys):
    path = FIXTURES / "vllm-0.11-summary-c4.json"
    rc = main(["import-vllm", str(path), "--campaign", "imp", "--results", str(tmp_path)])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"orchestrate: error: {path}: field ttfts: missing; expected a vLLM "
        "bench-serve JSON saved with --save-detailed (per-request arrays)"
    )


ARRAYS = {
    "ttfts": [0.1, 0.2],
    "itls": [[0.1], [0.1]],
    "latencies": [0.5, 0.6],
    "output_lens": [4, 4],
    "start_times": [0.0, 0.1],
}


@pytest.mark.parametrize(
    "doc, message",
    [
        ({"completed": 3, "median_ttft_ms": 10.0}, "field ttfts: missing"),
        (ARRAYS | {"latencies": [0.5]}, "field latencies: expected a list of 2 entries"),
        (ARRAYS | {"latencies": [0.5, "x"]}, "field latencies[1]: expected a number (s), got 'x'"),
        (ARRAYS | {"itls": [[0.1], [0.1, None]]}, "field itls[1]: expected a list of numbers"),
        (ARRAYS | {"output_lens": [4, True]}, "field output_lens[1]: expected a token count"),
        (ARRAYS | {"errors": "boom"}, "field errors: expected a list of 2 entries"),
        (
            {k: v for k, v in ARRAYS.items() if k != "start_times"},
            "field duration: expected the run's duration in s",
        ),
    ],
)
def test_import_refuses_a_file_it_cannot_recompute(tmp_path, capsys, doc, message):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    rc = main(["import-vllm", str(bad), "--campaign", "imp", "--results", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert err.count("\n") == 0 and err.startswith(f"orchestrate: error: {bad}: ")
    assert message in err, err
    assert not (tmp_path / "imp").exists()  # nothing stored


def test_import_refuses_a_folder(tmp_path, capsys):
    rc = main(["import-vllm", str(tmp_path), "--campaign", "imp", "--results", str(tmp_path)])
    assert rc == 2
    err = capsys.readouterr().err
    assert f"{tmp_path}: a folder (expected a vLLM bench-serve JSON file)" in err
