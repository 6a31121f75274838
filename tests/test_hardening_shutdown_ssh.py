"""Issue 15, shutdown over SSH: SIGTERM to the orchestrator while a run is in flight on an sshd
host (a network namespace) kills that run's group on the host at once (the agent is told
beside the run, whose reply holds the channel), stores the run interrupted, and a resume runs
it again. The local version is tests/test_hardening_shutdown.py."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from socketlab.store import INTERRUPTED
from tests.support.campaign import PY, stored, write_spec
from tests.support.procs import alive, wait_for

pytestmark = pytest.mark.netns

#: the bound of the issue: a correctness bound, polled; without the interrupt the host's
#: processes live until the orchestrator has given up on its host thread and exited (5 s+)
GONE_S = 2.0

#: says its PID and its child's (one group), then sleeps while the hold file exists
SLOW = (
    "import os, subprocess, sys, time; child = subprocess.Popen(['sleep', '600']); "
    "open(sys.argv[1] + '.tmp', 'w').write(f'{os.getpid()} {child.pid}'); "
    "os.replace(sys.argv[1] + '.tmp', sys.argv[1]); "
    "time.sleep(60 if os.path.exists(sys.argv[2]) else 0); child.kill(); "
    'print(\'{"type": "metric", "name": "x", "value": 1, "unit": "1"}\')'
)


def _inventory(pool, tmp_path: Path) -> Path:
    host = pool.hosts[0]  # one host: the netns hosts share this machine's /proc and files
    hosts = {host.name: {**host.inventory_vars(), "socketlab_workroot": str(tmp_path / "work")}}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {"testhosts": {"hosts": hosts}}}}))
    return path


def test_sigterm_mid_run_over_ssh_kills_the_remote_run_and_resume_reruns_it(ssh_pool, tmp_path):
    marker, hold = tmp_path / "started", tmp_path / "hold"
    hold.write_text("")
    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "campaign": "stop-ssh",
            "hosts": {"group": "testhosts"},
            "defaults": {"timeout_s": 120, "collectors": ["proc_peakmem"]},
            "experiments": [
                {
                    "name": "slow",
                    "command": [PY, "-c", SLOW, f"{marker}-{{{{ n }}}}", str(hold)],
                    "sweep": {"matrix": {"n": [1, 2]}},
                    "metrics": {"parser": "jsonl"},
                }
            ],
        },
    )
    results = tmp_path / "results"
    argv = [
        sys.executable,
        "-m",
        "socketlab.cli",
        "run",
        str(spec),
        "--results",
        str(results),
        "--inventory",
        str(_inventory(ssh_pool, tmp_path)),
        "--plain",
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = Path(f"{marker}-1")
        wait_for(first.exists, 120, "the first run to start on the SSH host")
        remote = [int(p) for p in first.read_text().split()]  # the run and its child
        collectors = [int(p.read_text()) for p in (tmp_path / "work").rglob("proc_*.pid")]
        assert len(collectors) == 1 and all(alive(p) for p in remote + collectors)
        proc.send_signal(signal.SIGTERM)
        for pid in remote:  # killed on the host while the orchestrator still runs
            wait_for(lambda pid=pid: not alive(pid), GONE_S, f"remote PID {pid} to be gone")
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    print(f"rc {proc.returncode}; stderr: {err!r}")
    assert proc.returncode == 128 + signal.SIGTERM
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("orchestrate: stopped")]
    assert lines == [
        "orchestrate: stopped by SIGTERM: 1 runs interrupted, 1 stored this "
        f"session; `orchestrate run {spec}` resumes"
    ], err
    for pid in collectors:
        wait_for(lambda pid=pid: not alive(pid), GONE_S, f"collector PID {pid} to be gone")
    runs = stored(results, "stop-ssh")
    assert [(r.status, r.params["n"]) for r in runs.values()] == [(INTERRUPTED, 1)]
    assert "interrupted by SIGTERM" in next(iter(runs.values())).reason
    assert not Path(f"{marker}-2").exists()  # nothing new started after the signal

    hold.unlink()  # the resume reruns the interrupted point and runs the other, each once
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    runs = stored(results, "stop-ssh")
    assert sorted((r.params["n"], r.status, r.attempts) for r in runs.values()) == [
        (1, "ok", 2),
        (2, "ok", 1),
    ]
