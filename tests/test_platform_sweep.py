"""Adaptive sweeps with a stop rule (socketlab.spec.adaptive), run for real on localhost.

The worker here is SYNTHETIC on purpose: its p95 is a fixed table of workers -> ms, so the step
where the rule breaches is known in advance (the real worker, collectors/platform_worker.py run
from the host's copy of collectors/ as experiments/platform.yaml runs it, is exercised at the
end with a rule that always holds).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from socketlab.spec.adaptive import Adaptive, StopRule, decide
from socketlab.store import Store, store_path
from tests.support.campaign import ok_count, write_spec

#: p95 (ms) and throughput (1/s) by workers: p95 > 2 x 10 first at workers=3
P95 = {1: 10.0, 2: 15.0, 3: 25.0, 4: 30.0, 5: 40.0, 6: 50.0}
TPUT = {1: 100.0, 2: 180.0, 3: 240.0, 4: 250.0, 5: 255.0, 6: 256.0}
SYNTH = (
    "import json, os, sys, time\n"
    "n = int(sys.argv[1]); flag = sys.argv[2]\n"
    f"p95 = {P95}; tput = {TPUT}\n"
    "if flag and n == 3 and not os.path.exists(flag):\n"
    "    open(flag, 'w').write(str(os.getpid())); time.sleep(120)\n"
    "for name, v, unit in (('latency_p95', p95[n], 'ms'), ('throughput', tput[n], '1/s')):\n"
    "    print(json.dumps({'type': 'metric', 'name': name, 'value': v, 'unit': unit}))\n"
)


def _spec(
    tmp_path: Path, rules: list[dict], flag: str = "", reps: int = 1, workers=(1, 2, 3, 4, 5, 6)
) -> Path:
    return write_spec(
        tmp_path / "sweep.yaml",
        {
            "campaign": "sweep",
            "hosts": {"pattern": "localhost"},
            "defaults": {"timeout_s": 200, "repetitions": reps},
            "experiments": [
                {
                    "name": "workers",
                    "command": [sys.executable, "-c", SYNTH, "{{ workers }}", flag],
                    "sweep": {"matrix": {"workers": list(workers)}},
                    "metrics": {"parser": "jsonl"},
                    "sanity": {"required_metrics": ["latency_p95", "throughput"]},
                    "adaptive": {"param": "workers", "stop": rules},
                }
            ],
        },
    )


def local_inventory(folder: Path) -> Path:
    """localhost with a work folder of its own: its own host lock, so another session's
    orchestrator on this machine can't hold these runs up."""
    path = folder / "localhost.yml"
    if not path.exists():
        path.write_text(
            yaml.safe_dump(
                {
                    "all": {
                        "hosts": {
                            "localhost": {
                                "ansible_connection": "local",
                                "ansible_python_interpreter": sys.executable,
                                "socketlab_workroot": str(folder / "work"),
                            }
                        }
                    }
                }
            )
        )
    return path


def _orchestrate(*args: str, **kw) -> subprocess.CompletedProcess:
    extra = []
    if args[0] in ("run", "plan"):
        extra = ["--inventory", str(local_inventory(Path(args[1]).parent))]
    return subprocess.run(
        [sys.executable, "-m", "socketlab.cli", *args, *extra],
        capture_output=True,
        text=True,
        timeout=300,
        **kw,
    )


def _state(results: Path):
    with Store(store_path("sweep", results), create=False) as store:
        runs = store.runs("sweep")
        stops = {k: json.loads(v) for k, v in store.meta_items("adaptive:").items()}
    return runs, stops


P95_RULE = [{"metric": "latency_p95", "above": 2.0}]


def test_decide_with_known_numbers():
    a = Adaptive("workers", tuple(map(float, P95)), (StopRule("latency_p95", above=2.0),))
    steps = {
        float(n): {"expected": 1, "ok": 1, "bad": "", "metrics": {"latency_p95": [v]}}
        for n, v in P95.items()
    }
    stop = decide(a, steps)
    assert (stop.value, stop.kind) == (3.0, "breach")
    assert stop.reason == "latency_p95 25 > 2 x 10 = 20 at workers=3"
    gain = Adaptive("workers", a.values, (StopRule("throughput", min_gain=0.05),))
    steps = {
        float(n): {"expected": 1, "ok": 1, "bad": "", "metrics": {"throughput": [v]}}
        for n, v in TPUT.items()
    }
    stop = decide(gain, steps)
    assert stop.value == 4.0 and "gain +4.2% < 5%" in stop.reason
    partial = {k: v for k, v in steps.items() if k < 3}
    assert decide(gain, partial) is None  # step 3 not stored yet: go on
    failed = {**partial, 3.0: {"expected": 1, "ok": 0, "bad": "failed: exit 1", "metrics": {}}}
    assert decide(gain, failed).kind == "failed"


def test_sweep_stops_at_the_first_breach_and_records_why(tmp_path):
    spec = _spec(tmp_path, P95_RULE)
    plan = _orchestrate("plan", str(spec))
    assert plan.returncode == 0, plan.stderr
    assert (
        "adaptive workers: sweep workers upward over [1, 2, 3, 4, 5, 6]; stop when "
        "latency_p95 > 2 x first step; else at the cap"
    ) in plan.stdout
    results = tmp_path / "results"
    proc = _orchestrate("run", str(spec), "--results", str(results), "--plain")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs, stops = _state(results)
    assert sorted(r.params["workers"] for r in runs) == [1, 2, 3]
    (stop,) = stops.values()
    assert stop == {
        "value": 3.0,
        "kind": "breach",
        "reason": "latency_p95 25 > 2 x 10 = 20 at workers=3",
    }
    again = _orchestrate("run", str(spec), "--results", str(results), "--plain")
    assert again.returncode == 0 and len(_state(results)[0]) == 3  # nothing more to run


def test_sweep_that_never_breaches_stops_at_its_cap(tmp_path):
    spec = _spec(tmp_path, [{"metric": "latency_p95", "above": 10.0}], workers=(1, 2, 4))
    results = tmp_path / "results"
    proc = _orchestrate("run", str(spec), "--results", str(results), "--plain")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs, stops = _state(results)
    assert sorted(r.params["workers"] for r in runs) == [1, 2, 4]
    assert list(stops.values()) == [
        {"value": 4.0, "kind": "cap", "reason": "cap reached at workers=4; no rule breached"}
    ]


def test_sweep_resumes_after_sigkill(tmp_path):
    flag = tmp_path / "slept"
    spec = _spec(tmp_path, P95_RULE, flag=str(flag), reps=2)
    results = tmp_path / "results"
    argv = [
        sys.executable,
        "-m",
        "socketlab.cli",
        "run",
        str(spec),
        "--results",
        str(results),
        "--plain",
        "--inventory",
        str(local_inventory(tmp_path)),
    ]
    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 120
        while not (flag.exists() and flag.read_text()) and time.monotonic() < deadline:
            time.sleep(0.1)  # step 3 sleeps, once
        assert flag.exists(), "step 3 never started"
        assert ok_count(store_path("sweep", results)) == 4  # steps 1 and 2, twice each
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    sleeper = int(flag.read_text())
    deadline = time.monotonic() + 10  # pdeathsig: the killed orchestrator's run dies with it
    while Path(f"/proc/{sleeper}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{sleeper}").exists(), f"PID {sleeper} still running"
    before = {r.run_key: r.attempts for r in _state(results)[0]}
    assert len(before) == 4 and not _state(results)[1]  # no stop known yet
    resumed = _orchestrate("run", str(spec), "--results", str(results), "--plain")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    runs, stops = _state(results)
    assert sorted(r.params["workers"] for r in runs) == [1, 1, 2, 2, 3, 3]
    assert all(r.attempts == 1 for r in runs if r.run_key in before)  # not run again
    assert [s["value"] for s in stops.values()] == [3.0]


def test_stop_rule_on_an_unknown_metric_is_one_line(tmp_path):
    spec = _spec(tmp_path, [{"metric": "latency_p59", "above": 2.0}])
    proc = _orchestrate("plan", str(spec))
    assert proc.returncode == 2
    line = proc.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert "experiments[0].adaptive.stop[0].metric: unknown metric 'latency_p59'" in line
    assert "latency_p95, throughput" in line


def test_real_worker_sweep_pinned_unpinned(tmp_path):
    """The CPU-bound worker through the orchestrator (its timings are this machine's; the rule
    is set so it can't breach, so the steps that run don't depend on the CPU)."""
    spec = write_spec(
        tmp_path / "w.yaml",
        {
            "campaign": "sweep",
            "hosts": {"pattern": "localhost"},
            "experiments": [
                {
                    "name": "worker",
                    "command": "{{ python }} -I {{ tools }}/platform_worker.py --workers "
                    "{{ workers }} --requests 4 --warmup 1 --pinned {{ pinned }}",
                    "sweep": {"matrix": {"pinned": [0, 1], "workers": [1, 2]}},
                    "sanity": {"required_metrics": ["latency_p95", "throughput"]},
                    "adaptive": {
                        "param": "workers",
                        "stop": [{"metric": "latency_p95", "above": 1e6}],
                    },
                }
            ],
        },
    )
    results = tmp_path / "results"
    proc = _orchestrate("run", str(spec), "--results", str(results), "--plain")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs, stops = _state(results)
    assert sorted((r.params["pinned"], r.params["workers"]) for r in runs) == [
        (0, 1),
        (0, 2),
        (1, 1),
        (1, 2),
    ]
    assert sorted(s["kind"] for s in stops.values()) == ["cap", "cap"]
    with Store(store_path("sweep", results), create=False) as store:
        names = {r["name"] for r in store.metric_rows("sweep")}
    assert {"request_latency", "latency_p50", "latency_p95", "throughput"} <= names


@pytest.mark.parametrize("bad", ["order"])
def test_adaptive_needs_sequential_order(tmp_path, bad):
    spec = _spec(tmp_path, P95_RULE)
    text = spec.read_text().replace("repetitions: 1", "repetitions: 1\n  order: shuffled")
    spec.write_text(text)
    proc = _orchestrate("plan", str(spec))
    assert proc.returncode == 2 and "expected 'sequential', got 'shuffled'" in proc.stderr
