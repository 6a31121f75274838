"""A serving campaign against a real llama.cpp server (llama-cpp-python) on a tiny generated
model: experiments/serving-tiny.yaml, two placement arms x two concurrency levels. The store
holds every request's timestamps (the metrics recompute from them) and the report shows the
comparison and placement tables."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

from socketlab.cpulist import parse_cpulist
from socketlab.serve import dram, metrics
from socketlab.serve.report import serving_report
from socketlab.serve.requests_store import load_requests
from socketlab.spec.expand import expand_points
from socketlab.spec.load import load_spec
from socketlab.store import Store
from tests.support.runplan import run_plan
from tests.support.tiny_gguf import write_tiny_gguf

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None,
    reason="llama-cpp-python[server] is not installed (the Makefile's 'serve' extra)",
)


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve-llama")
    model = write_tiny_gguf(tmp / "tiny-llama.gguf")
    spec = load_spec(REPO / "experiments" / "serving-tiny.yaml")
    online = sorted(os.sched_getaffinity(0))
    facts = {
        "topology": {"cpu_online": f"{online[0]}-{online[-1]}", "flags": []},
        # one housekeeping CPU, the rest workers: what plan_isolation gives on 2 CPUs
        # with housekeeping_per_node=1 (no SMT, so no siblings)
        "isolation": {"housekeeping": online[:1], "workers": online[1:], "siblings": []},
        "isolation_applied": False,
        "vars": {"serve_python": sys.executable, "serve_model": str(model)},
    }
    plan = expand_points(spec, {"localhost": facts})
    store = Store(tmp / "results" / spec.campaign / "store.sqlite")
    records = run_plan(plan, store, tmp / "results")
    return spec, plan, store, records


def test_every_arm_ran_under_its_placement(campaign):
    spec, plan, store, records = campaign
    assert [r.status for r in records] == ["ok", "ok"], [r.reason for r in records]
    assert {r.params["placement"] for r in records} == {"workers", "all"}
    for r in records:
        server = set(parse_cpulist(r.extra["server_cpus"]))
        seen = set()
        for cpus in r.extra["server_affinity"]:
            seen |= set(parse_cpulist(cpus))
        assert seen == server, (r.params, r.extra["server_affinity"])
        assert r.extra["server_pids_left"] == []
        # DRAM bytes per token: counted where IMC counters exist, else the reason is recorded
        why = dram.unavailable()
        if why:
            assert r.extra["dram_bytes_per_output_token"] == why
        else:
            frame = store.metrics_frame(spec.campaign)
            assert (
                frame[frame.run_key == r.run_key].metric == "dram_bytes_per_output_token"
            ).sum() == 1
        if r.params["placement"] == "workers":
            assert not server & set(parse_cpulist(r.extra["client_cpus"]))


def test_store_holds_every_request_timestamps(campaign):
    spec, plan, store, records = campaign
    cfg = spec.experiments[0].prepared.config
    frame = store.metrics_frame(spec.campaign)
    for r in records:
        levels = load_requests(store.path, r.run_key)
        assert sorted(level for _, level in levels) == ["c1", "c2"]
        for (_, level), recs in levels.items():
            assert len(recs) == cfg.warmup_requests + cfg.requests
            measured = [x for x in recs if x.phase == "measured"]
            assert len(measured) == cfg.requests
            for x in measured:
                assert x.ok, x.error
                assert None not in (x.t_sched, x.t_send, x.t_first, x.t_end, x.t_done)
                assert x.t_sched <= x.t_send < x.t_first <= x.t_end <= x.t_done
                assert x.n_out == cfg.output_tokens == len(x.events)
                assert x.n_in == cfg.input_tokens  # exact lengths from the server's tokenizer
            # the stored metrics are exactly what the stored timestamps give
            again = metrics.compute(recs, cfg.slo)
            stored = frame[(frame.run_key == r.run_key) & (frame["dim.load"] == level)]
            value = dict(zip(stored.metric, stored.value, strict=True))
            assert value["median_tpot_ms"] == pytest.approx(again["median_tpot_ms"])
            assert value["p99_ttft_ms"] == pytest.approx(again["p99_ttft_ms"])
            assert value["peak_pss_bytes"] > 1 << 20  # the server's PSS was sampled
            assert value["total_output_tokens"] == cfg.requests * cfg.output_tokens
        # CPU time per thread group of the server tree, over the whole run
        cpu = frame[(frame.run_key == r.run_key) & (frame.metric == "server_cpu_s")]
        assert len(cpu) >= 1 and set(cpu["dim.load"]) == {"all"}
        assert cpu["dim.thread_group"].notna().all() and cpu["value"].sum() > 0


def test_report_shows_comparison_and_placement_tables(campaign):
    spec, plan, store, records = campaign
    text = serving_report(store, spec.campaign)
    assert "| throughput | TPOT P99 | TTFT P99 | peak memory |" in text
    rows = [line for line in text.splitlines() if line.startswith("| llama-placement |")]
    # 4 comparison rows (2 arms x 2 levels) + 4 placement rows
    assert len(rows) == 8, text
    baseline = [x for x in rows[:4] if "| workers | workers |" in x]
    assert len(baseline) == 2 and all(
        x.endswith("| 1.00x | 1.00x | 1.00x | 1.00x |") for x in baseline
    ), text
    # the other arm's ratios and placement deltas are its stored values over the baseline's
    frame = store.metrics_frame(spec.campaign)

    def val(arm, load, metric):
        (v,) = frame[(frame.arm == arm) & (frame["dim.load"] == load) & (frame.metric == metric)][
            "value"
        ]
        return v

    for load in ("c1", "c2"):
        ratios = [
            val("all", load, m) / val("workers", load, m)
            for m in ("window_output_tok_s", "p99_tpot_ms", "p99_ttft_ms", "peak_pss_bytes")
        ]
        (row,) = [x for x in rows[:4] if f"| all | all | {load} |" in x]
        assert row.endswith(" | ".join(f"{x:,.2f}x" for x in ratios) + " |"), row
        delta = (
            val("all", load, "median_tpot_ms") / val("workers", load, "median_tpot_ms") - 1
        ) * 100
        (ab,) = [x for x in rows[4:] if x.startswith(f"| llama-placement | {load} | all |")]
        assert f"| {delta:+.1f}% |" in ab, ab
    assert "## Placement A/B" in text and "| vs workers |" in text
    # 2 CPUs: arm `all` leaves none free for the client, and the report says so
    shared = {r.params["arm"] for r in records if r.extra["client_shared"]}
    assert shared == {"all"}
    assert "- llama-placement arm all (placement all)" in text
    assert "arm workers (placement" not in text
    assert "Runs not ok" not in text


def test_html_report_plots_and_the_requests_frame(campaign, capsys):
    """`serving-report --format html`: the cells as a table and four plots (TTFT and TPOT by
    load, throughput vs concurrency, placement A/B); socketlab.results' requests frame holds
    every stored request, and its per-request latencies give the stored medians."""
    from socketlab import results
    from socketlab.cli import main

    spec, plan, store, records = campaign
    results_dir = store.path.parent.parent
    assert (
        main(["serving-report", spec.campaign, "--results", str(results_dir), "--format", "html"])
        == 0
    )
    page = (store.path.parent / "serving-report.html").read_text()
    assert f"written to {store.path.parent / 'serving-report.html'}" in capsys.readouterr().out
    assert page.count("data:image/png;base64,") == 4
    assert page.count("<tr") == 1 + 4  # header + 2 arms x 2 levels
    assert "throughput_ratio" in page and "Load generator shared the server&#39;s CPUs" in page
    res = results.load(spec.campaign, results=results_dir)
    assert len(res.requests) == len(store.request_rows(spec.campaign))
    frame = res.metrics_with_runs()
    measured = res.requests[
        (res.requests["phase"] == "measured") & (res.requests["status"] == "ok")
    ]
    for (run_key, level), group in measured.groupby(["run_key", "level"], observed=True):
        stored = frame[
            (frame["run_key"] == run_key)
            & (frame["dim.load"] == level)
            & (frame["metric"] == "median_ttft_ms")
        ]["value"]
        assert float(stored.iloc[0]) == pytest.approx(group["ttft_ms"].median())


def test_orchestrate_run_drives_the_serving_kind(tmp_path, capsys):
    """The same campaign through `orchestrate run` (inventory, facts, isolation plan, runner
    hook) and `orchestrate serving-report`."""
    from socketlab.cli import main

    model = write_tiny_gguf(tmp_path / "tiny.gguf")
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(
        "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
        f"      ansible_python_interpreter: {sys.executable}\n"
        f"      serve_python: {sys.executable}\n      serve_model: {model}\n"
        # a work folder (and host lock) of its own: other orchestrators may hold the default
        f"      socketlab_workroot: {tmp_path / 'work'}\n"
    )
    text = (REPO / "experiments" / "serving-tiny.yaml").read_text()
    # this machine has 2 CPUs: one housekeeping CPU leaves one worker; one level, fewer requests
    text = text.replace(
        "campaign: serving-tiny", "campaign: serving-cli\nisolation: {housekeeping_per_node: 1}"
    )
    text = text.replace("concurrency: [1, 2]", "concurrency: [2]").replace(
        "requests: 6", "requests: 4"
    )
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    results = tmp_path / "results"
    rc = main(
        ["run", str(spec), "--inventory", str(inventory), "--results", str(results), "--plain"]
    )
    out = capsys.readouterr()
    assert rc == 0, out.out + out.err
    with Store(results / "serving-cli" / "store.sqlite", create=False) as store:
        runs = store.runs("serving-cli")
        assert sorted((r.params["arm"], r.status) for r in runs) == [
            ("all", "ok"),
            ("workers", "ok"),
        ]
        for r in runs:
            (recs,) = load_requests(store.path, r.run_key).values()
            assert len([x for x in recs if x.phase == "measured" and x.ok]) == 4
            assert r.fingerprint_before and r.extra["server_pids_left"] == []
    assert main(["serving-report", "serving-cli", "--results", str(results)]) == 0
    report = capsys.readouterr().out
    assert "| llama-placement | workers | workers | c2 |" in report
    assert (results / "serving-cli" / "serving-report.md").exists()


def test_summary_json_round_trips_through_import_vllm(campaign, tmp_path, capsys):
    """Our summary.json is a vLLM result (layout serve-start-times) with vLLM's meanings:
    import-vllm takes it back and vLLM's definitions give back every number it holds."""
    from socketlab.cli import main
    from socketlab.serve import vllm_defs

    spec, plan, store, records = campaign
    path = Path(records[0].raw_dir) / "c2" / "summary.json"
    doc = json.loads(path.read_text())
    assert vllm_defs.layout(doc) == vllm_defs.STARTS
    assert doc["errors"] == [""] * doc["num_prompts"] and doc["max_concurrency"] == 2
    assert isinstance(doc["error_counts"], dict) and "label" not in doc
    assert main(["import-vllm", str(path), "--campaign", "rt", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "(vLLM layout serve-start-times)" in out and "limitation:" not in out
    with Store(tmp_path / "rt" / "store.sqlite", create=False) as again:
        (run,) = again.runs("rt")
        frame = again.metrics_frame("rt")
    assert run.extra["load"] == "c2" and run.status == "ok"
    agreement = run.extra["vllm_agreement"]
    for field in (
        "median_ttft_ms",
        "p99_tpot_ms",
        "mean_itl_ms",
        "median_e2el_ms",
        "output_throughput",
        "max_concurrent_requests",
        "max_output_tokens_per_s",
    ):
        assert agreement[field] < 1e-9, (field, agreement[field])
    value = dict(
        zip(
            frame[frame.parser == "serving/1"].metric,
            frame[frame.parser == "serving/1"].value,
            strict=True,
        )
    )
    assert value["max_concurrent_requests"] == doc["max_concurrent_requests"] <= 2
