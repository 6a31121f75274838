"""collectors/proc_noise.py: the per-CPU noise sampler, one-shot and as a start|stop collector."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "collectors" / "proc_noise.py"


def _load():
    spec = importlib.util.spec_from_file_location("proc_noise", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


noise = _load()


def _run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout
    )


INTERRUPTS = """\
           CPU0       CPU1       CPU2
  0:         10          0          5   IO-APIC   2-edge      timer
 36:          0        100          0   PCI-MSIX  1-edge      virtio1-req.0
NMI:          1          2          3   Non-maskable interrupts
LOC:       1000       2000       3000   Local timer interrupts
RES:          7          8          9   Rescheduling interrupts
ERR:          0
MIS:          0
"""


def _fake_proc(root: Path, interrupts: str, threads: dict[int, tuple[int, int, int]]) -> Path:
    """A procfs tree with /proc/interrupts and threads {tid: (cpu, voluntary, nonvoluntary)}."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "interrupts").write_text(interrupts)
    for tid, (cpu, vol, nonvol) in threads.items():
        task = root / str(tid) / "task" / str(tid)
        task.mkdir(parents=True, exist_ok=True)
        # comm with a space and a ')' to prove the parser splits after the last ')'.
        fields = ["S"] + ["0"] * 18 + ["4242"] + ["0"] * 16 + [str(cpu)] + ["0"] * 10
        (task / "stat").write_text(f"{tid} (odd) name) " + " ".join(fields) + "\n")
        (task / "status").write_text(
            f"Name:\todd\nvoluntary_ctxt_switches:\t{vol}\nnonvoluntary_ctxt_switches:\t{nonvol}\n"
        )
    return root


def test_interrupts_are_split_into_device_timer_and_other(tmp_path):
    proc = _fake_proc(tmp_path / "proc", INTERRUPTS, {})
    counts = noise.read_interrupts(str(proc))
    assert counts == {
        0: {"device": 10, "local_timer": 1000, "other": 8},
        1: {"device": 100, "local_timer": 2000, "other": 10},
        2: {"device": 5, "local_timer": 3000, "other": 12},
    }


def test_rates_between_two_samples_per_cpu(tmp_path):
    first_tree = _fake_proc(tmp_path / "a", INTERRUPTS, {10: (1, 5, 5), 11: (2, 0, 0)})
    later = INTERRUPTS.replace("        100  ", "        300  ").replace("2000", "2400")
    second_tree = _fake_proc(tmp_path / "b", later, {10: (1, 45, 15), 12: (0, 6, 0)})
    first = {
        "t": 0.0,
        "irqs": noise.read_interrupts(str(first_tree)),
        "threads": noise.read_thread_switches(str(first_tree)),
    }
    second = {
        "t": 2.0,
        "irqs": noise.read_interrupts(str(second_tree)),
        "threads": noise.read_thread_switches(str(second_tree)),
    }
    per_cpu = noise.rates(first, second)
    # CPU1: 200 device IRQs, 400 timer ticks, thread 10 switched 50 times, over 2 s.
    assert per_cpu[1] == {
        "device_irqs_per_s": 100.0,
        "local_timer_irqs_per_s": 200.0,
        "other_irqs_per_s": 0.0,
        "ctx_switches_per_s": 25.0,
    }
    # A thread born inside the window counts in full (6 switches on CPU0).
    assert per_cpu[0]["ctx_switches_per_s"] == 3.0
    summary = noise.summarise(per_cpu, {"workers": [1, 2], "siblings": []})
    assert summary["workers"]["cpus"] == "1-2"
    assert summary["workers"]["device_irqs_per_s"] == {"mean": 50.0, "max": 100.0}
    assert summary["siblings"]["count"] == 0
    assert summary["siblings"]["ctx_switches_per_s"]["mean"] is None


def test_groups_argument():
    assert noise.parse_groups("housekeeping=0,2-3,workers=1,siblings=") == {
        "housekeeping": [0, 2, 3],
        "workers": [1],
        "siblings": [],
    }
    with pytest.raises(ValueError):
        noise.parse_groups("0,1")


def test_sample_sees_a_thread_that_switches_on_its_cpu():
    """A thread pinned to the last CPU that sleeps 1 ms at a time must show up there."""
    cpus = sorted(os.sched_getaffinity(0))
    target = cpus[-1]
    stop = threading.Event()

    def sleeper():
        os.sched_setaffinity(0, {target})
        while not stop.is_set():
            time.sleep(0.001)

    thread = threading.Thread(target=sleeper, daemon=True)
    thread.start()
    try:
        result = _run("sample", "--seconds", "1", "--groups", f"workers={target},none=")
    finally:
        stop.set()
        thread.join(timeout=5)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["source"] == "proc_noise"
    assert set(data["cpus"]) == {str(c) for c in range(len(data["cpus"]))}
    workers = data["groups"]["workers"]
    # ~1000 sleeps/s; even a loaded 2-CPU box manages far more than 100.
    assert workers["ctx_switches_per_s"]["mean"] > 100, data
    assert workers["local_timer_irqs_per_s"]["mean"] >= 0
    assert data["table"][1].split()[:2] == ["group", "cpus"]
    assert any(line.startswith("workers") for line in data["table"])


def test_sample_without_interrupts_file_says_unsupported(tmp_path):
    (tmp_path / "proc").mkdir()
    result = _run("--proc", str(tmp_path / "proc"), "sample", "--seconds", "0.1")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "unsupported": f"{tmp_path / 'proc' / 'interrupts'} does not exist"
    }


def test_bad_groups_is_a_usage_error():
    result = _run("sample", "--seconds", "0.1", "--groups", "0-1")
    assert result.returncode == 2
    assert "--groups: expected NAME=CPULIST" in result.stderr


def test_collector_start_stop_writes_json_lines(tmp_path):
    out = tmp_path / "out"
    started = _run("start", "--out", str(out), "--cpus", "0", "--interval", "0.2")
    assert started.returncode == 0, started.stderr
    pid = json.loads(started.stdout)["pid"]
    pidfile = out / "proc_noise.pid"
    assert int(pidfile.read_text()) == pid
    try:
        again = _run("start", "--out", str(out))
        assert again.returncode == 1 and "already running" in again.stderr
        # Wait for two interval records (not a fixed sleep: a loaded box may starve the daemon).
        log, deadline = out / "proc_noise.jsonl", time.monotonic() + 20
        while time.monotonic() < deadline and (not log.exists() or log.read_text().count("\n") < 2):
            time.sleep(0.05)
    finally:
        stopped = _run("stop", "--out", str(out))
    assert stopped.returncode == 0, stopped.stderr
    assert json.loads(stopped.stdout) == {"source": "proc_noise", "stopped": pid}
    assert not pidfile.exists()
    assert not Path(f"/proc/{pid}").exists() or "proc_noise" not in Path(
        f"/proc/{pid}/cmdline"
    ).read_text(errors="replace")
    records = [json.loads(line) for line in (out / "proc_noise.jsonl").read_text().splitlines()]
    assert len(records) >= 3  # two (or more) intervals plus the last sample written on stop
    assert {r["cpu"] for r in records} == {0}
    for record in records:
        assert set(noise.METRICS) <= set(record)
        assert record["ts"] > 1e9 and record["interval_s"] > 0
    # A second stop finds nothing to stop and says so.
    assert json.loads(_run("stop", "--out", str(out)).stdout)["stopped"] is None


def test_collector_on_host_without_interrupts_records_unsupported(tmp_path):
    (tmp_path / "proc").mkdir()
    out = tmp_path / "out"
    result = _run("--proc", str(tmp_path / "proc"), "start", "--out", str(out))
    assert result.returncode == 0, result.stderr
    (record,) = [json.loads(x) for x in (out / "proc_noise.jsonl").read_text().splitlines()]
    assert record["unsupported"].endswith("interrupts does not exist")
    assert not (out / "proc_noise.pid").exists()


def _wait_gone(pid: int, timeout: float = 10) -> bool:
    """True once PID no longer runs proc_noise.py (an unreaped zombie has an empty cmdline)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not noise._collector.is_ours(pid, "proc_noise.py"):
            return True
        time.sleep(0.05)
    return False


def test_collector_stops_by_itself_when_its_folder_goes_or_time_is_up(tmp_path):
    """A daemon whose orchestrator died must not sample forever."""
    gone = tmp_path / "gone"
    first = _run("start", "--out", str(gone), "--interval", "0.2")
    timed = tmp_path / "timed"
    second = _run("start", "--out", str(timed), "--interval", "0.2", "--max-seconds", "0.5")
    pids = [json.loads(p.stdout)["pid"] for p in (first, second)]
    try:
        shutil.rmtree(gone)
        assert _wait_gone(pids[0]), "proc_noise kept running after its --out folder was removed"
        assert _wait_gone(pids[1]), "proc_noise kept running past --max-seconds"
        assert not (timed / "proc_noise.pid").exists()
        assert (timed / "proc_noise.jsonl").read_text().count("\n") >= 1
    finally:
        for pid in pids:
            if noise._collector.is_ours(pid, "proc_noise.py"):
                os.kill(pid, signal.SIGTERM)
