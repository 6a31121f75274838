"""native/residency --lock against an emulation of /dev/pseudo_lock
(native/driver/pseudo_lock_sram/emu/pl_emu.c, LD_PRELOAD): the ABI v3 ioctl contract with the
module's own budget code, so the userspace side's sequence and error handling run here, where no
module can load. What the emulation cannot show (a SIGKILLed holder's release is the kernel's
file close) is the module's job and is not claimed here."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.pl_emu import CAP_12_WAYS, build_with_emulation


@pytest.fixture(scope="module")
def tools(tmp_path_factory) -> tuple[Path, Path]:
    return build_with_emulation(tmp_path_factory.mktemp("emu"), "residency")


def run_locked(
    tools, tmp_path, *args: str, **env: str
) -> tuple[subprocess.CompletedProcess, list[str]]:
    binary, emu = tools
    log = tmp_path / "emu.log"
    device = str(tmp_path / "pseudo_lock")
    proc = subprocess.run(
        [str(binary), "--device", device, "--lock", "--steps", "20", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            "LD_PRELOAD": str(emu),
            "PL_EMU_DEVICE": device,
            "PL_EMU_LOG": str(log),
            "PATH": "/usr/bin:/bin",
            **env,
        },
    )
    return proc, log.read_text().splitlines() if log.exists() else []


def test_lock_measure_and_close_sequence(tools, tmp_path):
    """Per worker: LOCK at level 2 on its own CPU, WORKER on, MEASURE before; MEASURE after
    the run; the descriptor's close releases both regions and both worker CPUs."""
    proc, log = run_locked(tools, tmp_path, "--slice", "64K", "--cpus", "0,1", "--lock-ways", "12")
    assert proc.returncode == 0, proc.stderr
    assert log[:2] == ["open fd=" + log[0].split("=")[1], "caps"]
    for cpu in (0, 1):
        assert f"lock cpu={cpu} len=65536 level=2 -> 0" in log
        assert f"worker cpu={cpu} on=1" in log
    assert sum(line.startswith("measure id=") for line in log) == 4
    assert log[-1] == "close released regions=2 workers=2"
    recs = [json.loads(x) for x in proc.stdout.splitlines()]
    assert recs[0]["lock"] is True and recs[0]["l2_lock_bytes_per_core"] == CAP_12_WAYS
    held = {r["cpu"]: r["value"] for r in recs if r.get("name") == "held_lock_after"}
    assert held == {0: 1.0, 1: 1.0}  # the emulation reports every line held


def test_slice_over_the_lockable_capacity_is_a_usage_error(tools, tmp_path):
    proc, log = run_locked(tools, tmp_path, "--slice", str(CAP_12_WAYS + 4096))
    assert proc.returncode == 2
    assert "larger than the lockable L2 capacity per core, 1376256 bytes" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not any(line.startswith("lock ") for line in log)


def test_enospc_when_the_core_budget_is_used(tools, tmp_path):
    """Another holder already locked 1 MiB on every core: a 512 KiB slice no longer fits."""
    proc, log = run_locked(
        tools, tmp_path, "--slice", "512K", "--cpus", "0", PL_EMU_L2_USED="1048576"
    )
    assert proc.returncode == 2, proc.stderr
    assert "budget is used up (ENOSPC" in proc.stderr
    assert "lock cpu=0 len=524288 level=2 -> -28" in log
    # exit 2 leaves the descriptor to the kernel's close (the module's release), which an
    # LD_PRELOAD emulation does not see; nothing was put in the worker CLOS before the refusal
    assert not any(line.startswith("worker ") for line in log)


def test_exdev_node_mismatch_is_a_failed_check(tools, tmp_path):
    proc, log = run_locked(tools, tmp_path, "--slice", "64K", "--cpus", "0", PL_EMU_EXDEV="1")
    assert proc.returncode == 1, proc.stderr
    assert "not on the cpu's node (EXDEV)" in proc.stderr
    assert "lock cpu=0 len=65536 level=2 -> -18" in log


def test_driver_with_other_ways_is_not_available(tools, tmp_path):
    proc, log = run_locked(
        tools, tmp_path, "--slice", "64K", "--lock-ways", "14", PL_EMU_L2_WAYS="12"
    )
    assert proc.returncode == 3
    assert "reserves 12 L2 ways (lock mask 0xfff), --lock-ways asks for 14" in proc.stderr
    assert not any(line.startswith("lock ") for line in log)
