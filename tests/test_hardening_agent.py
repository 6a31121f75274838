"""The host agent's interrupt (collectors/_runwrap.py), over a pipe as the local executor
talks to it: an interrupt read while a run is in flight kills the run's group at once and the
run's reply follows; an interrupt that comes before its run refuses that run; requests queued
behind an interrupt are still answered, in order."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.procs import alive, wait_for

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def agent():
    proc = subprocess.Popen(
        [
            sys.executable,
            "-I",
            "-S",
            str(REPO / "collectors" / "_runwrap.py"),
            "serve",
            "--idle",
            "600",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert json.loads(proc.stdout.readline())["ready"]
    yield proc
    proc.stdin.close()  # EOF: the agent stops what it holds and exits
    proc.wait(timeout=30)


def send(agent, *requests: dict) -> None:
    agent.stdin.write("".join(json.dumps(r) + "\n" for r in requests))
    agent.stdin.flush()


def reply(agent) -> dict:
    return json.loads(agent.stdout.readline())


def _run(tmp_path: Path, name: str, *argv: str) -> dict:
    return {
        "op": "run",
        "argv": list(argv),
        "timeout": 120,
        "out_dir": str(tmp_path / name),
        "pidfile": str(tmp_path / f"{name}.pid"),
    }


def test_an_interrupt_kills_the_run_in_flight_by_its_group(agent, tmp_path):
    child = tmp_path / "child.pid"
    run = _run(tmp_path, "slow", "sh", "-c", f"sleep 600 & echo $! > {child}; wait")
    send(agent, run)
    wait_for(lambda: child.exists() and child.read_text().strip(), 30, "the run to start")
    leader = int(Path(run["pidfile"]).read_text())
    background = int(child.read_text())
    send(agent, {"op": "ping"}, {"op": "interrupt", "pidfile": run["pidfile"]}, {"op": "ping"})
    got = reply(agent)  # the run's reply first: the interrupt went ahead of the pings
    assert got["exit_code"] == -9 and not got["timed_out"] and got["pgid"] == leader, got
    assert reply(agent) == {"pong": True} and reply(agent) == {"pong": True}
    wait_for(lambda: not alive(background), 5, f"PID {background} of the run's group to go")


def test_an_interrupt_for_another_run_leaves_this_one(agent, tmp_path):
    run = _run(tmp_path, "quick", sys.executable, "-c", "import time; time.sleep(0.5)")
    send(agent, run, {"op": "interrupt", "pidfile": str(tmp_path / "other.pid")})
    assert reply(agent)["exit_code"] == 0


def test_an_interrupt_before_its_run_refuses_the_run(agent, tmp_path):
    marker = tmp_path / "ran"
    run = _run(tmp_path, "late", "touch", str(marker))
    send(agent, {"op": "interrupt", "pidfile": run["pidfile"]}, run)
    got = reply(agent)
    assert got["exit_code"] is None and got["stderr"] == "interrupted before it started", got
    assert not marker.exists()
    send(agent, _run(tmp_path, "next", "touch", str(marker)))  # another run still runs
    assert reply(agent)["exit_code"] == 0 and marker.exists()
