"""`orchestrate import-vllm` stores a vLLM bench-serve JSON as a run whose recomputed metrics
match vLLM's own; `orchestrate serving-report` shows it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from socketlab.cli import main
from socketlab.serve.requests_store import load_requests
from socketlab.store import Store

FIXTURE = Path(__file__).parent / "fixtures" / "serve" / "vllm-bench-c4.json"


def test_import_recomputes_vllm_numbers(tmp_path, capsys):
    rc = main(["import-vllm", str(FIXTURE), "--campaign", "imp", "--arm", "vllm",
               "--results", str(tmp_path)])
    assert rc == 0
    doc = json.loads(FIXTURE.read_text())
    with Store(tmp_path / "imp" / "store.sqlite", create=False) as store:
        (run,) = store.runs("imp")
        frame = store.metrics_frame("imp")
        (records,) = load_requests(store.path, run.run_key).values()
    assert run.status == "failed" and run.reason == "1 of 5 requests failed"
    assert len(records) == 5 and records[-1].error.startswith("ClientConnectorError")
    ours = frame[(frame.parser == "serving/1") & (frame["dim.load"] == "c4")]
    value = dict(zip(ours.metric, ours.value, strict=True))
    for name in ("median_ttft_ms", "p99_ttft_ms", "mean_ttft_ms", "median_tpot_ms",
                 "p99_tpot_ms", "median_itl_ms"):
        assert value[name] == pytest.approx(doc[name], rel=1e-6), name
    assert (value["completed"], value["failed"]) == (4, 1)
    theirs = frame[frame.parser == "vllm-bench/1"]
    assert dict(zip(theirs.metric, theirs.value, strict=True))["median_ttft_ms"] == \
        pytest.approx(doc["median_ttft_ms"])

    capsys.readouterr()
    assert main(["serving-report", "imp", "--results", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "| vllm-import | vllm | unknown | c4 |" in text
    assert "1 of 5 requests failed" in text


ARRAYS = {"ttfts": [0.1, 0.2], "latencies": [0.5, 0.6], "output_lens": [4, 4]}


@pytest.mark.parametrize("doc, message", [
    ({"completed": 3, "median_ttft_ms": 10.0}, "field ttfts: missing"),
    (ARRAYS | {"latencies": [0.5]}, "field latencies: expected a list of 2 entries"),
    (ARRAYS | {"latencies": [0.5, "x"]}, "field latencies[1]: expected a number (s), got 'x'"),
    (ARRAYS | {"itls": [[0.1], [0.1, None]]}, "field itls[1]: expected a list of numbers"),
    (ARRAYS | {"output_lens": [4, True]}, "field output_lens[1]: expected a token count"),
    (ARRAYS | {"errors": "boom"}, "field errors: expected a list of 2 entries"),
])
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
