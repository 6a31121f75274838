"""Issue 15, shutdown: SIGTERM and SIGINT mid-run stop the run's process group and its
collectors (checked by PID), store the stopped run as interrupted, print one line, exit
128+signal; a resume then runs every point once. Real orchestrator, real collectors, localhost.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from socketlab.store import INTERRUPTED
from tests.support.campaign import PY, local_inventory, stored, write_spec
from tests.support.procs import alive, wait_for

#: a run that says it started (its PID in a file), then sleeps while the hold file exists
SLOW = (
    "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); "
    "time.sleep(60 if os.path.exists(sys.argv[2]) else 0); "
    'print(\'{"type": "metric", "name": "x", "value": 1, "unit": "1"}\')'
)


def _pids(folder: Path, pattern: str) -> list[int]:
    return [int(p.read_text()) for p in folder.rglob(pattern) if p.read_text().strip()]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_mid_run_stops_everything_and_resume_completes(tmp_path, sig):
    marker, hold = tmp_path / "started", tmp_path / "hold"
    hold.write_text("")
    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "campaign": "stop",
            "defaults": {"timeout_s": 120, "collectors": ["proc_noise", "proc_peakmem"]},
            "experiments": [
                {
                    "name": "slow",
                    "command": [PY, "-c", SLOW, f"{marker}-{{{{ n }}}}", str(hold)],
                    "sweep": {"matrix": {"n": [1, 2, 3]}},
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
        str(local_inventory(tmp_path)),
        "--plain",
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = Path(f"{marker}-1")
        wait_for(first.exists, 60, "the first run to start")
        wait_for(lambda: first.read_text().strip(), 5, "its PID")
        target = int(first.read_text())
        work = tmp_path / "work"
        collectors = _pids(work, "proc_*.pid")
        assert len(collectors) == 2, collectors  # both collectors run beside the target
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    print(f"stopped with {sig.name}: rc {proc.returncode}; stderr: {err!r}")
    assert proc.returncode == 128 + sig
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("orchestrate: stopped")]
    assert lines == [
        f"orchestrate: stopped by {sig.name}: 1 runs interrupted, 1 stored this "
        f"session; `orchestrate run {spec}` resumes"
    ], err
    wait_for(lambda: not alive(target), 2, f"the run's PID {target} to be gone")
    for pid in collectors:
        wait_for(lambda pid=pid: not alive(pid), 2, f"collector PID {pid} to be gone")
    runs = stored(results, "stop")
    assert [r.status for r in runs.values()] == [INTERRUPTED]
    assert not Path(f"{marker}-2").exists()  # nothing new started after the signal

    # a resume runs the interrupted point and the two never started, each once
    hold.unlink()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    runs = stored(results, "stop")
    assert sorted(r.status for r in runs.values()) == ["ok", "ok", "ok"]
    assert sorted(r.params["n"] for r in runs.values()) == [1, 2, 3]
    assert all(r.attempts == (2 if r.params["n"] == 1 else 1) for r in runs.values())
    assert not any(alive(pid) for pid in _pids(tmp_path / "work", "proc_*.pid")), (
        "collectors of the resumed runs outlived them"
    )
    os.sync()


def test_a_refused_second_orchestrator_of_the_campaign_leaves_no_host_note(tmp_path):
    """The holder runs this campaign: the refused one must not note the host as not reached
    (its note would outlive the holder's session); another campaign's holder is noted."""
    from socketlab.cli import main
    from socketlab.execute.local import LocalExecutor
    from socketlab.store import Store, store_path

    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "campaign": "busy",
            "experiments": [{"name": "a", "command": ["true"], "metrics": {"parser": "jsonl"}}],
        },
    )
    results = tmp_path / "results"
    run = [
        "run",
        str(spec),
        "--results",
        str(results),
        "--inventory",
        str(local_inventory(tmp_path)),
        "--plain",
    ]
    for holder, noted in (("busy", False), ("someone-else", True)):
        other = LocalExecutor("localhost", workroot=str(tmp_path / "work"))
        other.connect()
        other.lock({"campaign": holder})
        try:
            assert main(run) == 1
        finally:
            other.close()
        with Store(store_path("busy", results), create=False) as store:
            notes = store.host_failures("busy")
        print(f"holder {holder}: notes {notes}")
        assert bool(notes) == noted
