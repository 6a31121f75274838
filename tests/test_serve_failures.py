"""A server that never becomes ready, exits early, dies mid-run or answers errors gives a
stored failed run with its reason, and no process of its tree is left (checked by PID)."""

from __future__ import annotations

import json
import sys
import textwrap
import time

import pytest

from socketlab.execute.local import LocalExecutor
from socketlab.hostside._process import pid_alive
from socketlab.serve.requests_store import load_requests
from socketlab.serve.server import Server, ServerFailure
from socketlab.spec.expand import expand_points
from socketlab.spec.load import load_spec
from socketlab.store import Store
from tests.support.runplan import run_plan

FACTS = {
    "topology": {"cpu_online": "0-1", "flags": []},
    "isolation": {"housekeeping": [0], "workers": [1], "siblings": []},
    "isolation_applied": False,
    "vars": {"python": sys.executable},
}


def run_arm(tmp_path, command, *, requests=4, warmup=1, ready_timeout=20):
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(
        textwrap.dedent(f"""\
        schema_version: 1
        campaign: serve-fail
        experiments:
          - name: broken
            kind: serving
            serving:
              arms:
                - name: arm
                  command: {json.dumps(command)}
                  placement: workers
              load: {{concurrency: [1]}}
              input_tokens: 4
              output_tokens: 6
              requests: {requests}
              warmup_requests: {warmup}
              ready_timeout_s: {ready_timeout}
              request_timeout_s: 10
        """)
    )
    plan = expand_points(load_spec(spec_path), {"localhost": FACTS})
    results = tmp_path / "results"
    store = Store(results / "serve-fail" / "store.sqlite")
    (record,) = run_plan(plan, store, results)
    stored = store.runs("serve-fail")
    assert [r.run_key for r in stored] == [record.run_key]
    return store, stored[0]


def scripted(*args):
    return ["{{ vars.python }}", "-m", "socketlab.serve.scripted_server", "--port", "{port}", *args]


def assert_tree_gone(tmp_path, run):
    serving = json.loads(
        (tmp_path / "results" / "serve-fail" / "runs" / run.run_key / "serving.json").read_text()
    )
    assert serving["status"] == run.status
    pids = serving["extra"]["server_pids"]
    assert pids, "the run recorded no server PIDs"
    assert not [p for p in pids if pid_alive(p)], f"left running: {pids}"
    return pids


def test_never_ready_is_recorded_and_tree_stopped(tmp_path):
    store, run = run_arm(tmp_path, scripted("--never-ready", "--spawn-child"), ready_timeout=1.5)
    assert run.status == "failed"
    assert "never ready" in run.reason and "HTTP 503" in run.reason
    pids = assert_tree_gone(tmp_path, run)
    assert len(pids) == 2  # the server and its `sleep` child
    assert store.metric_count("serve-fail") == 0


def test_exit_before_ready_gives_exit_code(tmp_path):
    _, run = run_arm(
        tmp_path, ["{{ vars.python }}", "-c", "import sys; print('bad model'); sys.exit(7)"]
    )
    assert run.status == "failed"
    assert "exited before ready with exit code 7" in run.reason
    assert "bad model" in run.reason  # last log line


def test_missing_server_program(tmp_path):
    _, run = run_arm(tmp_path, ["/nonexistent/llama-server", "--port", "{port}"])
    assert run.status == "failed"
    assert run.reason.startswith("server command could not start: [Errno 2]")
    assert "/nonexistent/llama-server" in run.reason


def test_died_mid_run_gives_exit_code_and_keeps_requests(tmp_path):
    # request 1 is the warm-up; request 3 (the second measured one) kills the server mid-stream
    store, run = run_arm(tmp_path, scripted("--die-after", "2", "--every-ms", "1"))
    assert run.status == "failed"
    assert "server died mid-run with exit code 3" in run.reason
    assert run.exit_code == 3
    assert_tree_gone(tmp_path, run)
    (records,) = load_requests(store.path, run.run_key).values()
    measured = [r for r in records if r.phase == "measured"]
    assert [r.status for r in measured[:2]] == ["ok", "error"]
    assert measured[1].events, "the cut stream delivered some tokens first"
    assert all(r.t_send is not None for r in measured)


def test_http_errors_are_counted_with_reason(tmp_path):
    store, run = run_arm(tmp_path, scripted("--http-error", "500"))
    assert run.status == "failed"
    assert "c1: 4 of 4 requests failed (HTTP 500:" in run.reason
    assert_tree_gone(tmp_path, run)
    frame = store.metrics_frame("serve-fail")
    failed = frame[(frame["metric"] == "failed") & (frame["dim.load"] == "c1")]
    assert failed["value"].tolist() == [4.0]


def test_stop_escalates_to_sigkill_and_finds_children_outside_the_group(tmp_path):
    code = (
        "import signal, subprocess, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "subprocess.Popen(['setsid', 'sleep', '600']); time.sleep(600)"
    )
    ex = LocalExecutor("escalate", workroot=str(tmp_path / "work"))
    ex.connect()
    ex.install_tools(tmp_path / "scratch")
    server = Server(
        ex,
        [sys.executable, "-c", code],
        "http://127.0.0.1:9/never",
        f"{ex.workdir}/server.log",
        ready_timeout_s=1.0,
        stop_grace_s=1.0,
        log_path=tmp_path / "log",
    )
    server.start()
    try:
        with pytest.raises(ServerFailure, match="never ready"):
            server.wait_ready()
        deadline = time.monotonic() + 20  # the child may start late on a busy machine
        while len(server.pids_seen) < 2 and time.monotonic() < deadline:
            server.track()
            time.sleep(0.05)
        assert len(server.pids_seen) == 2
    finally:
        left = server.stop()
        ex.close()
    assert left == []
    assert not [p for p, started in server.pids_seen.items() if pid_alive(p, started)]
    assert server.exit_code == -9  # SIGTERM was ignored


THP = "/sys/kernel/mm/transparent_hugepage/enabled"


@pytest.mark.root
def test_host_state_drift_during_a_serving_run_marks_it_invalid(tmp_path, kernel_knobs_lock):
    """The server flips a fingerprinted knob (THP) as it starts; the runner's drift check, the
    same as for command runs, stores the run invalid naming the knob."""
    import os

    if os.geteuid() != 0 or not os.access(THP, os.W_OK):
        pytest.skip(f"needs root and a writable {THP}")
    with open(THP) as fh:
        original = fh.read().split("[", 1)[1].split("]", 1)[0]
    other = "never" if original != "never" else "madvise"
    flip = (
        f"import runpy, sys; open({THP!r}, 'w').write({other!r}); "
        "sys.argv = ['testserver', '--port', sys.argv[1]]; "
        "runpy.run_module('socketlab.serve.scripted_server', run_name='__main__')"
    )
    try:
        _, run = run_arm(tmp_path, ["{{ vars.python }}", "-c", flip, "{port}"])
    finally:
        with open(THP, "w") as fh:
            fh.write(original)
    print(f"stored {run.status}: {run.reason}")
    assert run.status == "invalid"
    assert f"thp: {original} -> {other}" in run.reason
    assert (run.fingerprint_before["thp"], run.fingerprint_after["thp"]) == (original, other)
