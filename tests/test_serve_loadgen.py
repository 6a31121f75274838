"""Load generator and metric definitions against an endpoint with known, injected delays.

The scripted endpoint (socketlab.serve.scripted_server, a real process on localhost) writes the
first token D1 ms after the request arrives and then one every D2 ms; the client must recover
TTFT = D1 and TPOT = D2 within 1 ms at p50, so the metric code can fail.
"""

from __future__ import annotations

import os
from contextlib import contextmanager, suppress

import pytest

from socketlab.serve import metrics, scripted_server
from socketlab.serve.loadgen import LoadConfig, Prompt, poisson_offsets, run_load
from socketlab.serve.records import RequestRecord

# D2 / TOKENS (2.7 ms) is well above the 1 ms bound: a TPOT that divided by N_out instead of
# N_out - 1 (13.3 ms) or folded TTFT in (20 ms) would fail the test.
D1_MS, D2_MS, TOKENS = 40.0, 16.0, 6


def _fifo() -> None:
    """SCHED_FIFO for the calling thread where allowed (root here): wake-ups then preempt the
    other work sharing this 2-CPU machine, so the test measures the client, not the load of
    whatever else runs. Without the privilege the test runs at normal priority."""
    with suppress(PermissionError, OSError):
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))


@contextmanager
def realtime():
    old = os.sched_getscheduler(0), os.sched_getparam(0)
    _fifo()
    try:
        yield
    finally:
        os.sched_setscheduler(0, old[0], old[1])


@contextmanager
def scripted(tmp_path, *args):
    proc, url = scripted_server.launch(list(args), tmp_path / "port", preexec_fn=_fifo)
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def prompts(tag, n):
    return [Prompt(f"{tag}{i}", f"[{tag}{i}] hello world") for i in range(n)]


@pytest.mark.parametrize("endpoint", ["/v1/completions", "/v1/chat/completions"])
def test_known_delays_recovered(tmp_path, endpoint):
    with scripted(
        tmp_path, "--first-ms", str(D1_MS), "--every-ms", str(D2_MS), "--tokens", str(TOKENS)
    ) as url:
        cfg = LoadConfig(base_url=url, endpoint=endpoint, concurrency=1, max_tokens=TOKENS)
        with realtime():
            res = run_load(cfg, prompts("w", 3), prompts("m", 12))
    s = metrics.compute(res.records, metrics.Slo(ttft_ms=D1_MS + 5), res.window)
    assert s["completed"] == 12 and s["failed"] == 0
    # TTFT carries the connection and first-request overhead on a busy 2-vCPU machine (1.1 ms
    # was seen in CI); 2.5 ms still tells D1 from D1 + D2 or from a clock started late
    assert abs(s["median_ttft_ms"] - D1_MS) < 2.5, s["median_ttft_ms"]
    assert abs(s["median_tpot_ms"] - D2_MS) < 1.0, s["median_tpot_ms"]
    assert abs(s["median_itl_ms"] - D2_MS) < 1.0
    assert s["median_e2el_ms"] == pytest.approx(D1_MS + (TOKENS - 1) * D2_MS, abs=2.5)
    assert s["output_lens"] == [TOKENS] * 12  # from the usage chunk
    assert s["n_ttft_sched"] == 12
    # warm-up requests are recorded but never measured
    assert [r.phase for r in res.records].count("warmup") == 3
    assert s["num_prompts"] == 12
    # server-side write stamps: the client saw each token within a few ms of its write
    t0 = res.meta["t0_ns"]
    lags = [
        (t + t0 - st) / 1e6
        for r in res.records
        if r.phase == "measured"
        for (t, _), st in zip(r.events, r.server_ts_ns, strict=True)
    ]
    assert 0 <= sorted(lags)[len(lags) // 2] < 1.0


def test_poisson_schedule_is_seeded_and_dispatched_on_time(tmp_path):
    a = poisson_offsets(50, rate=10.0, burstiness=1.0, seed=7)
    assert a == poisson_offsets(50, rate=10.0, burstiness=1.0, seed=7)
    assert a != poisson_offsets(50, rate=10.0, burstiness=1.0, seed=8)
    assert 2.5 < a[-1] < 8.0  # 49 gaps of mean 0.1 s
    with scripted(tmp_path, "--first-ms", "10", "--every-ms", "2", "--tokens", "5") as url:
        cfg = LoadConfig(base_url=url, rate=40.0, seed=3, max_tokens=5)
        with realtime():
            res = run_load(cfg, prompts("w", 1), prompts("m", 12))
    s = metrics.compute(res.records, None, res.window)
    assert s["completed"] == 12
    measured = [r for r in res.records if r.phase == "measured"]
    expected = poisson_offsets(12, 40.0, 1.0, 3)
    got = [(r.t_sched - measured[0].t_sched) / 1e9 for r in measured]
    assert got == pytest.approx(expected, abs=1e-6)
    assert s["p99_queue_client_ms"] < 20.0
    # the server waits 10 ms before the first token, so that is a floor; the bound above is
    # the last token's time (10 + 4 x 2 ms), what a TTFT stopped at the wrong event would read.
    # Not tighter: CI's busy 2-vCPU guest read 11.04 ms (connection and scheduling overhead).
    assert 10.0 <= s["median_ttft_ms"] < 18.0, s["median_ttft_ms"]
    assert s["median_ttft_sched_ms"] >= s["median_ttft_ms"]


def _rec(idx, send, events, n_out=None, status="ok", sched=None, phase="measured"):
    return RequestRecord(
        index=idx,
        phase=phase,
        t_sched=send if sched is None else sched,
        t_send=send,
        events=[list(e) for e in events],
        n_out=n_out,
        status=status,
        t_done=events[-1][0] if events else None,
        error=None if status == "ok" else "HTTP 500: boom",
    )


MS = 1_000_000


def test_tpot_itl_and_goodput_definitions():
    # chunk of 1 token at 10 ms, then a 3-token chunk at 20 ms, then 2 tokens at 30 ms: N_out 6
    r = _rec(0, 0, [(10 * MS, 1), (20 * MS, 3), (30 * MS, 2)], n_out=6)
    lat = metrics.per_request(r)
    assert lat["ttft"] == 10 * MS
    assert lat["tpot"] == pytest.approx(20 * MS / 5)  # (end - first) / (N_out - 1)
    assert lat["itl"] == [10 * MS, 10 * MS]  # vLLM's raw event gaps
    assert lat["itl_token"] == pytest.approx([10 * MS / 3] * 3 + [5 * MS] * 2)
    one = _rec(1, 0, [(50 * MS, 1)], n_out=1)
    assert metrics.per_request(one)["tpot"] is None
    slo = metrics.Slo(ttft_ms=40, tpot_ms=3)
    # one-token outputs are judged on the other objectives (guidellm), not passed (vLLM)
    assert not metrics.is_good(one, metrics.per_request(one), slo)
    assert not metrics.is_good(r, lat, slo)  # TPOT 4 ms > 3
    assert metrics.is_good(r, lat, metrics.Slo(ttft_ms=10, tpot_ms=4))  # inclusive
    bad = _rec(2, 0, [], status="error")
    s = metrics.compute([r, one, bad, _rec(3, 0, [(1, 1)], phase="warmup")], slo)
    assert (s["completed"], s["failed"], s["num_prompts"]) == (2, 1, 3)
    assert s["error_counts"] == {"HTTP 500: boom": 1}
    assert s["errors"] == ["", "", "HTTP 500: boom"]  # vLLM's per-request list
    assert s["output_lens"] == [6, 1, 0] and s["latencies"][2] == 0.0  # vLLM: 0 when failed
    assert s["slo_attainment"] == 0.0
    assert s["request_goodput"] == 0.0  # r: TPOT 4 > 3 ms; one: TTFT 50 > 40 ms
    # vLLM's goodput rule takes a one-token output's TPOT as 0: `one` passes TPOT 3 ms
    s = metrics.compute([r, one, bad], metrics.Slo(ttft_ms=60, tpot_ms=3))
    assert s["request_goodput"] == pytest.approx(1 / s["duration"])


def test_window_throughput_counts_only_events_inside():
    a = _rec(0, 0, [(t * MS, 1) for t in range(1, 101)])  # 100 tokens over 1..100 ms
    b = _rec(1, 0, [(t * MS, 1) for t in range(1, 201)])  # drain tail to 200 ms
    s = metrics.compute([a, b], None, window=(0, 100 * MS))
    assert s["window_output_tok_s"] == pytest.approx(200 / 0.1)
    assert s["output_throughput"] == pytest.approx(300 / 0.2)  # vLLM: whole run
    assert s["peak_concurrency"] == 2 and s["max_concurrent_requests"] == 2
    assert s["mean_concurrency"] == pytest.approx(2.0)
    # vLLM's max_concurrent_requests: successful requests only, to their last token
    c = _rec(2, 50 * MS, [(60 * MS, 1)], status="error")
    s = metrics.compute([a, b, c], None, window=(0, 100 * MS))
    assert (s["peak_concurrency"], s["max_concurrent_requests"]) == (3, 2)


def test_scripted_endpoint_that_fails_to_start_is_reported(tmp_path):
    with pytest.raises(RuntimeError, match=r"scripted endpoint exited with code 2"):
        scripted_server.launch(["--tokens", "many"], tmp_path / "port")
