"""collectors/dma_latency_hold.py: holds /dev/cpu_dma_latency open at a value, stops by pidfile."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "collectors" / "dma_latency_hold.py"
DEVICE = Path("/dev/cpu_dma_latency")


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=30
    )


def _request() -> int:
    with open(DEVICE, "rb") as f:
        return struct.unpack("i", f.read(4))[0]


@pytest.mark.root
@pytest.mark.skipif(
    not (DEVICE.exists() and os.access(DEVICE, os.W_OK)), reason="no writable /dev/cpu_dma_latency"
)
def test_holder_holds_the_request_until_stopped(tmp_path):
    pidfile = tmp_path / "holder.pid"
    before = _request()
    started = _run("start", "--pidfile", str(pidfile), "--value", "7")
    try:
        assert started.returncode == 0, started.stderr
        pid = json.loads(started.stdout)["pid"]
        assert int(pidfile.read_text()) == pid
        status = json.loads(_run("status", "--pidfile", str(pidfile)).stdout)
        assert status["running"] and status["holds"] and status["pid"] == pid
        # The kernel's aggregate request is the minimum of all holders: at most ours.
        assert _request() <= 7
        again = json.loads(_run("start", "--pidfile", str(pidfile)).stdout)
        assert again == {"started": False, "pid": pid, "reason": "already running"}
    finally:
        stopped = _run("stop", "--pidfile", str(pidfile))
    assert stopped.returncode == 0, stopped.stderr
    assert json.loads(stopped.stdout)["stopped"] == pid
    assert not pidfile.exists()
    assert _request() == before
    assert json.loads(_run("status", "--pidfile", str(pidfile)).stdout)["running"] is False


def test_missing_device_is_unsupported_exit_3(tmp_path):
    result = _run("start", "--pidfile", str(tmp_path / "p"), "--device", str(tmp_path / "none"))
    assert result.returncode == 3
    assert json.loads(result.stdout)["unsupported"].endswith(
        "does not exist (kernel without PM QoS CPU latency support)"
    )
    assert not (tmp_path / "p").exists()


def test_stop_never_signals_a_pid_that_is_not_a_holder(tmp_path):
    """A stale pidfile naming some other live process (here: this test) is not obeyed."""
    pidfile = tmp_path / "holder.pid"
    pidfile.write_text(f"{os.getpid()}\n")
    result = _run("stop", "--pidfile", str(pidfile))
    assert result.returncode == 0
    assert json.loads(result.stdout) == {"stopped": None, "reason": "not running"}
    assert not pidfile.exists()


def test_negative_value_is_a_usage_error(tmp_path):
    result = _run("start", "--pidfile", str(tmp_path / "p"), "--value", "-1")
    assert result.returncode == 2 and "--value must be >= 0" in result.stderr
