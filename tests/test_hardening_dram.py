"""Issue 15: serve/dram.py's ``perf stat -a`` starts through the process module, so perf and
its sleep die with the orchestrator that started them, even a SIGKILLed one (checked by PID).
A software event stands in for the IMC counters, which this kind of machine may not have."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys

import pytest

from socketlab.execute import process
from tests.support.procs import alive, wait_for

#: the orchestrator's part: start the counter, say the PIDs (perf, its sleep), stay
HOLDER = """
import json, sys, time
from pathlib import Path
from socketlab.serve.dram import DramCounter
from socketlab.execute import process
counter = DramCounter(Path(sys.argv[1]), events=["task-clock"])
counter.start()  # the parent-death signal is the starting thread's: this one stays
perf = counter.proc.pid
for _ in range(3000):
    if process.descendants(perf):
        break
    time.sleep(0.01)
print(json.dumps([perf, *process.descendants(perf)]), flush=True)
time.sleep(600)
"""


def _perf_works() -> bool:
    if shutil.which("perf") is None:
        return False
    probe = subprocess.run(
        ["perf", "stat", "-a", "-e", "task-clock", "--", "true"], capture_output=True, timeout=30
    )
    return probe.returncode == 0


@pytest.mark.skipif(not _perf_works(), reason="perf stat -a does not run here")
def test_perf_of_the_dram_counter_dies_with_a_sigkilled_orchestrator(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path / "dram.csv")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        pids = json.loads(holder.stdout.readline())
        assert len(pids) >= 2, pids  # perf and the sleep it counts over
        assert all(alive(p) for p in pids)
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        for pid in pids:  # a bound on correctness, polled; not a timing assertion
            wait_for(lambda pid=pid: not alive(pid), 2.0, f"PID {pid} to be gone")
    finally:
        if holder.poll() is None:
            holder.kill()
        for pid in process.descendants(holder.pid):
            process.kill_group(pid)


@pytest.mark.skipif(not _perf_works(), reason="perf stat -a does not run here")
def test_the_dram_counter_still_counts_and_stops(tmp_path):
    from socketlab.serve.dram import DramCounter

    counter = DramCounter(tmp_path / "dram.csv", events=["task-clock"])
    counter.start()
    assert counter.reason is None and counter.proc is not None
    wait_for(lambda: process.descendants(counter.proc.pid), 30, "perf to start its sleep")
    counter.stop()  # SIGINT to the group: perf's workload ends, perf prints its counts
    assert counter.reason is None  # not "perf stat did not stop within 10 s"
    assert counter.proc.returncode is not None and not alive(counter.proc.pid)
    assert "task-clock" in (tmp_path / "dram.csv").read_text()
