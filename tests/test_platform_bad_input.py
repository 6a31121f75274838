"""Bad input to the platform benchmark: one clear line each, exit 2 or a failed point with the
reason, and nothing left running (checked by PID)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from socketlab.store import Store, store_path
from tests.support.campaign import write_spec
from tests.support.moto import free_port

REPO = Path(__file__).resolve().parents[1]
COLLECTORS = REPO / "collectors"


def _run(*argv: str, env=None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        list(argv), capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO
    )


def _one_line(proc: subprocess.CompletedProcess) -> str:
    line = proc.stderr.strip()
    assert line and "\n" not in line and "Traceback" not in line, proc.stderr
    return line


def _closed_port() -> int:
    with socket.socket() as s:  # bound, never listening: connections are refused
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_iperf3_point_without_a_peer_host_is_refused_at_plan():
    proc = _run(
        sys.executable,
        "-m",
        "socketlab.cli",
        "plan",
        "experiments/platform.yaml",
        "--hosts",
        "localhost",
    )
    assert proc.returncode == 2
    line = _one_line(proc)
    assert "experiments/platform.yaml:" in line and "experiments[2].command" in line
    assert "undefined inventory variable 'vars.socketlab_peer' on host localhost" in line


def test_iperf3_client_without_peer_and_server_without_client():
    if shutil.which("iperf3") is None:
        pytest.skip("iperf3 not installed (scripts/system-deps.sh)")
    script = str(COLLECTORS / "platform_iperf.py")
    proc = _run(sys.executable, script, "--role", "client")
    assert proc.returncode == 2 and "--peer is required" in _one_line(proc)
    # a server nobody connects to is stopped by its PID when its wait is over
    port = str(free_port())
    proc = _run(sys.executable, script, "--role", "server", "--port", port, "--wait", "1")
    assert proc.returncode == 0
    meta = next(json.loads(x) for x in proc.stdout.splitlines() if '"meta"' in x)
    assert meta["ended"].startswith("stopped by SIG"), (meta, proc.stderr)
    assert not Path(f"/proc/{meta['pid']}").exists()
    assert f"PID {meta['pid']}" in _one_line(proc)
    refused = _run(
        sys.executable,
        script,
        "--role",
        "client",
        "--peer",
        "127.0.0.1",
        "--port",
        str(_closed_port()),
        "--connect-wait",
        "1",
        "--seconds",
        "1",
    )
    assert refused.returncode == 1 and "iperf3 client to 127.0.0.1" in _one_line(refused)


def test_s3_endpoint_that_refuses_is_one_line_exit_2():
    env = {
        "PATH": "/usr/bin:/bin",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "HOME": "/nonexistent",
    }
    url = f"http://127.0.0.1:{_closed_port()}"
    s3load, worker = str(COLLECTORS / "platform_s3load.py"), str(COLLECTORS / "platform_worker.py")
    proc = _run(
        sys.executable,
        "-I",
        s3load,
        "--endpoint-url",
        url,
        "--bucket",
        "b",
        "--prefix",
        "p",
        "--direction",
        "write",
        env=env,
    )
    assert proc.returncode == 2
    assert _one_line(proc).startswith(
        f"platform_s3load: S3 endpoint {url}: EndpointConnectionError"
    )
    refused = _run(sys.executable, "-I", worker, "--endpoint-url", url, env=env)
    assert refused.returncode == 2
    assert f"platform_worker: S3 endpoint {url}" in _one_line(refused)
    profile = _run(
        sys.executable,
        "-I",
        s3load,
        "--profile",
        "nope",
        "--bucket",
        "b",
        "--prefix",
        "p",
        "--direction",
        "read",
        env=env,
    )
    assert profile.returncode == 2 and "--profile nope: no such AWS profile" in _one_line(profile)


def test_fio_on_a_missing_path_fails_the_point_with_the_reason(tmp_path):
    direct = _run(
        sys.executable, str(COLLECTORS / "platform_fio.py"), "--dir", str(tmp_path / "missing")
    )
    assert direct.returncode == 2 and "no such folder" in _one_line(direct)
    device = _run(sys.executable, str(COLLECTORS / "platform_fio.py"), "--dir", "/dev/null")
    assert device.returncode == 2 and "raw devices are never tested" in _one_line(device)
    # through the runner: the same command line as experiments/platform.yaml, via {{ tools }}
    spec = write_spec(
        tmp_path / "fio.yaml",
        {
            "campaign": "fio-bad",
            "hosts": {"pattern": "localhost"},
            "experiments": [
                {
                    "name": "fio",
                    "command": "{{ python }} -I -S {{ tools }}/platform_fio.py --dir "
                    f"{tmp_path / 'missing'} --size 1M --runtime 1",
                    "sanity": {"required_metrics": ["read_bw"]},
                }
            ],
        },
    )
    results = tmp_path / "results"
    from tests.test_platform_sweep import local_inventory

    proc = _run(
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
    )
    assert proc.returncode == 1
    with Store(store_path("fio-bad", results), create=False) as store:
        (run,) = store.runs("fio-bad")
    assert run.status == "failed"
    assert run.reason.startswith("exit code 2 (accepted: 0): platform_fio: --dir ")
    assert "no such folder" in run.reason


def test_together_group_whose_peer_never_comes_fails_with_the_reason(tmp_path):
    """A `together` point whose other host fails its build first: the waiting host's point
    fails naming the group instead of waiting forever (runner barrier abort)."""
    from socketlab.runner import Runner
    from socketlab.spec.points import RunPoint

    point = RunPoint("c", "e", "a", {}, 0, ("true",), extra={"together": "g"})
    other = RunPoint("c", "e", "b", {}, 0, ("true",), extra={"together": "g"})
    runner = Runner(
        campaign="c",
        points=[point, other],
        hosts={"a": None, "b": None},
        profiles={"a": "pa", "b": "pb"},
        store=Store(tmp_path / "s.sqlite"),
        results_dir=tmp_path,
    )
    runner.groups.plan(runner.pending())
    runner.groups.abandon(other)
    started = time.monotonic()
    with pytest.raises(Exception, match="together group 'g': not every host"):
        runner.groups.meet(point)
    assert time.monotonic() - started < 5
