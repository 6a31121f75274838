"""A stop that lands after a run has started but before its pidfile exists still stops it.

The runner lists a run for the stop as soon as the run begins (fresh folders, fingerprint,
collectors), but the run's process and its pidfile come later. The signal is put in that window
deterministically: the host's interpreter is a wrapper whose first collector start (before the
run) waits at a gate; the test signals the orchestrator there, waits for the orchestrator to
say it has sent the stop, then opens the gate. The run must be stored
interrupted, its command never started (no target.pid, no marker), its collectors gone by PID,
nothing after it started, and a resume must run it. Real orchestrator (CLI), real collectors,
localhost and an sshd host in a network namespace.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from socketlab.store import INTERRUPTED
from tests.support.campaign import PY, stored, write_spec
from tests.support.procs import alive, wait_for

#: writes its PID to argv[1], then sleeps while the hold file argv[2] exists
SLOW = (
    "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); "
    "time.sleep(60 if os.path.exists(sys.argv[2]) else 0); "
    'print(\'{"type": "metric", "name": "x", "value": 1, "unit": "1"}\')'
)


def _gated_python(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(interpreter, gate, at-gate marker): a collector's start waits while the gate file
    exists; what it prints (its daemon's PID) is kept in collectors.log."""
    gate, at_gate, started = tmp_path / "gate", tmp_path / "at-gate", tmp_path / "collectors.log"
    wrapper = tmp_path / "python3-gated"
    wrapper.write_text(f"""#!/bin/sh
case "$*" in
  *"proc_peakmem.py start"*)
    if [ -e '{gate}' ]; then
      : > '{at_gate}'
      while [ -e '{gate}' ]; do sleep 0.05; done
    fi
    out=$({PY} "$@"); rc=$?
    printf '%s\\n' "$out"; printf '%s\\n' "$out" >> '{started}'
    exit $rc ;;
esac
exec {PY} "$@"
""")
    wrapper.chmod(0o755)
    gate.write_text("")
    return wrapper, gate, at_gate


def _inventory(tmp_path: Path, python: Path, ssh_host=None) -> tuple[Path, dict]:
    where = {
        "socketlab_workroot": str(tmp_path / "work"),
        "ansible_python_interpreter": str(python),
    }
    if ssh_host is None:
        hosts, body = {"localhost": {"ansible_connection": "local", **where}}, {}
        tree = {"all": {"hosts": hosts}}
    else:
        hosts = {ssh_host.name: {**ssh_host.inventory_vars(), **where}}
        tree, body = (
            {"all": {"children": {"testhosts": {"hosts": hosts}}}},
            {"hosts": {"group": "testhosts"}},
        )
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(tree))
    return path, body


@pytest.mark.parametrize(
    "where, sig",
    [
        ("local", signal.SIGTERM),
        ("local", signal.SIGINT),
        pytest.param("ssh", signal.SIGTERM, marks=pytest.mark.netns),
    ],
    ids=["local-SIGTERM", "local-SIGINT", "ssh-SIGTERM"],
)
def test_stop_before_the_pidfile_exists_stops_the_run(tmp_path, request, where, sig):
    host = request.getfixturevalue("ssh_pool").hosts[0] if where == "ssh" else None
    python, gate, at_gate = _gated_python(tmp_path)
    inventory, hosts = _inventory(tmp_path, python, host)
    marker, hold = tmp_path / "started", tmp_path / "hold"
    hold.write_text("")
    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "campaign": "window",
            **hosts,
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
    results, log = tmp_path / "results", tmp_path / "orchestrate.log"
    argv = [
        sys.executable,
        "-m",
        "socketlab.cli",
        "run",
        str(spec),
        "--results",
        str(results),
        "--inventory",
        str(inventory),
        "--plain",
    ]
    with open(log, "w") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, text=True)
    try:
        wait_for(at_gate.exists, 120, "the collector before the first run to reach the gate")
        proc.send_signal(sig)  # the run is listed for the stop; its process does not exist yet
        said = f"{sig.name}: stopping the run or build in flight"
        wait_for(lambda: said in log.read_text(), 30, "the orchestrator to send the stop")
        gate.unlink()  # now the run goes on towards its start
        proc.wait(timeout=60)
    finally:
        gate.unlink(missing_ok=True)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = log.read_text()
    print(f"{where} {sig.name}: rc {proc.returncode}; stderr: {err!r}")
    assert proc.returncode == 128 + sig
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("orchestrate: stopped")]
    assert lines == [
        f"orchestrate: stopped by {sig.name}: 1 runs interrupted, 1 stored this "
        f"session; `orchestrate run {spec}` resumes"
    ], err
    runs = stored(results, "window")
    assert [(r.status, r.params["n"]) for r in runs.values()] == [(INTERRUPTED, 1)]
    (key,) = runs
    fetched = results / "window" / "runs" / key / "collectors"
    assert not (fetched / "target.pid").exists()  # the command was never started...
    assert not Path(f"{marker}-1").exists()  # ...so it wrote nothing
    said = [
        json.loads(line)
        for line in (tmp_path / "collectors.log").read_text().splitlines()
        if line.startswith("{")
    ]
    collectors = [r["pid"] for r in said if "pid" in r]
    assert len(collectors) == 1, said
    for pid in collectors:  # started after the signal, stopped with the run
        wait_for(lambda pid=pid: not alive(pid), 5, f"collector PID {pid} to be gone")
    assert not Path(f"{marker}-2").exists()  # nothing new started after the signal

    hold.unlink()  # the resume runs the interrupted point and the other, each once
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    runs = stored(results, "window")
    assert sorted((r.params["n"], r.status, r.attempts) for r in runs.values()) == [
        (1, "ok", 2),
        (2, "ok", 1),
    ]


def test_a_stop_that_looked_before_the_run_was_listed_still_reaches_it(tmp_path):
    """The stop thread reads the runner's list of runs in flight once; a host that joins the
    list just after (the signal landed between its "stopping?" check and the listing) must see
    the stop itself. Real runner method, real local executor, a real command."""
    from socketlab.execute.local import LocalExecutor
    from socketlab.runner import Runner

    runner = Runner(
        campaign="c", points=[], hosts={}, profiles={}, store=None, results_dir=tmp_path / "results"
    )
    ex = LocalExecutor("localhost", workroot=str(tmp_path / "work"))
    ex.connect()
    runner.interrupted = signal.SIGTERM  # came while the list was empty: nothing was stopped
    marker, pidfile = tmp_path / "ran", tmp_path / "run" / "target.pid"
    with runner.in_flight("localhost", ex, str(pidfile)):
        result = ex.run(
            [PY, "-c", f"open({str(marker)!r}, 'w')"],
            out_dir=str(pidfile.parent),
            pidfile=str(pidfile),
            timeout=60,
        )
    ex.close()
    print(result)
    assert (result.exit_code, result.stderr) == (None, "interrupted before it started")
    assert not marker.exists() and not pidfile.exists()
