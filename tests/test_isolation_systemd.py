"""The isolation playbooks' systemd paths, driven against an emulated systemd.

PID 1 here is not systemd, so service confinement (AllowedCPUs on system.slice and init.scope),
irqbalance through systemctl and the latency holder as a transient unit never run on their own.
These tests run the real playbooks with `-e socketlab_service_manager=systemd` and
tests/support/systemd_emu.py first on PATH: the emulation keeps unit properties in a JSON file,
really starts and stops the unit processes (the holder really holds /dev/cpu_dma_latency) and
fails on any call it does not know. The rest of isolation changes this machine's kernel knobs as
usual, so these tests hold the kernel-knob lock and always restore; run them alone.

Also here: a host name the inventory lacks gives one error line naming it
(playbooks/check_hosts.yml).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from socketlab.paths import ansible_env
from tests.support.procs import alive
from tests.support.systemd_emu import install, load, stop_all
from tests.test_isolation_playbooks import (
    ANSIBLE_PLAYBOOK,
    DMA_LATENCY,
    Runner,
    assert_same_knobs,
    error_line,
    knob_snapshot,
    recap,
)

pytestmark = [
    pytest.mark.root,
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="isolation changes kernel knobs: needs root"),
    pytest.mark.skipif(not Path("/proc/irq").is_dir(), reason="no /proc/irq on this machine"),
]

SYSTEMD = ("-e", "socketlab_service_manager=systemd")
HOLDER_UNIT = "socketlab-dma-latency-localhost.service"
# init.scope starts confined already: restore must put "0-1" back, not reset it; system.slice
# starts unset, so restore must reset it with an empty AllowedCPUs=.
UNITS = {
    "system.slice": {"AllowedCPUs": "", "ActiveState": "active"},
    "init.scope": {"AllowedCPUs": "0-1", "ActiveState": "active"},
}
WRITES = {"set-property", "start", "stop"}
# The stand-in irqbalance runs for this long at most, should a test die before its cleanup.
STANDIN_S = "900"


class Emu:
    """An emulated systemd in tmp_path, and the env that puts it first on PATH."""

    def __init__(self, tmp_path: Path) -> None:
        self.state = tmp_path / "systemd-emu.json"
        self.bin = tmp_path / "emu-bin"
        # irqbalance.service's process: a copy of sleep named irqbalance, so its comm is
        # "irqbalance" (what the modules look for) without balancing this VM's IRQs.
        standin = tmp_path / "emu-sbin" / "irqbalance"
        standin.parent.mkdir()
        shutil.copy(shutil.which("sleep"), standin)
        units = {
            **UNITS,
            "irqbalance.service": {
                "ActiveState": "inactive",
                "MainPID": 0,
                "ExecStart": [str(standin), STANDIN_S],
            },
        }
        install(self.bin, self.state, units)
        self.env = {**ansible_env(), "PATH": f"{self.bin}:{os.environ['PATH']}"}

    def units(self) -> dict:
        return load(self.state)["units"]

    def calls(self) -> list[list[str]]:
        return load(self.state)["calls"]

    def errors(self) -> list[str]:
        return load(self.state)["errors"]

    def systemctl(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [self.bin / "systemctl", *args], capture_output=True, text=True, timeout=60
        )


@pytest.fixture
def emu(tmp_path, kernel_knobs_lock):
    """The emulation with irqbalance.service active, and a Runner using it; teardown restores
    whatever a failed test left applied, then stops every emulated unit's process by PID."""
    emu = Emu(tmp_path)
    started = emu.systemctl("start", "irqbalance")
    assert started.returncode == 0, started.stderr
    emu.runner = Runner(tmp_path / "state")
    emu.runner.env = emu.env
    try:
        yield emu
    finally:
        for state in emu.runner.state_files():
            emu.runner.run("restore.yml", "-e", f"socketlab_state_file={state}")
        stop_all(emu.state)


def _comm(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


def _holds(pid: int, device: Path) -> bool:
    fds = Path(f"/proc/{pid}/fd")
    return any(os.readlink(fd) == str(device.resolve()) for fd in fds.iterdir())


def _moved(snapshot: dict[str, str]) -> dict[str, str]:
    """The knob snapshot without the irqbalance PIDs: restore starts irqbalance again, so its
    PID is new; the unit's state is compared through the emulation instead."""
    return {k: v for k, v in snapshot.items() if k != "irqbalance PIDs"}


def test_systemd_apply_verify_reapply_restore(emu):
    units_before = emu.units()
    irqbalance_pid = units_before["irqbalance.service"]["MainPID"]
    assert alive(irqbalance_pid) and _comm(irqbalance_pid) == "irqbalance"
    before = knob_snapshot()
    applied = emu.runner.run("isolate.yml", *SYSTEMD)
    try:
        assert applied.returncode == 0, applied.output
        (state_file,) = emu.runner.state_files()
        state = json.loads(state_file.read_text())
        # What restore needs, recorded before any change: the units' AllowedCPUs as systemd
        # showed them, and that irqbalance and the holder go through systemd.
        assert state["systemd_units"] == {"system.slice": "", "init.scope": "0-1"}
        assert state["processes"]["irqbalance"]["running"] is True
        assert state["processes"]["irqbalance"]["manager"] == "systemd"
        assert state["holder"]["manager"] == "systemd" and state["holder"]["unit"] == HOLDER_UNIT
        housekeeping = state["plan"]["housekeeping_list"]
        assert housekeeping == "0"  # one-node 2-CPU VM, housekeeping_per_node=1

        units = emu.units()
        assert units["system.slice"]["AllowedCPUs"] == housekeeping
        assert units["init.scope"]["AllowedCPUs"] == housekeeping
        assert [
            "systemctl",
            "set-property",
            "--runtime",
            "init.scope",
            f"AllowedCPUs={housekeeping}",
        ] in emu.calls()
        # irqbalance stopped through systemctl, not by signalling its PID.
        assert ["systemctl", "stop", "irqbalance"] in emu.calls()
        assert units["irqbalance.service"]["ActiveState"] == "inactive"
        assert not alive(irqbalance_pid)
        # The holder runs as a transient unit whose main process really holds the device.
        holder = units[HOLDER_UNIT]
        assert holder["ActiveState"] == "active" and holder["collect"] is True
        assert (
            holder["ExecStart"][1].endswith("dma_latency_hold.py") and "run" in holder["ExecStart"]
        )
        pid = holder["MainPID"]
        assert alive(pid)
        assert int(Path(state["holder"]["pidfile"]).read_text()) == pid
        if DMA_LATENCY.exists():
            assert _holds(pid, DMA_LATENCY)
            assert knob_snapshot()["pm_qos cpu_dma_latency (µs)"] == "0"
        assert "service confinement does not apply on this host" not in applied.output

        verified = emu.runner.run("verify.yml", "-e", "socketlab_noise_seconds=0")
        assert verified.returncode == 0, verified.output
        said = " ".join(verified.output.split())  # the YAML callback wraps long lines
        assert re.search(
            r"all \d+ knobs match the plan \(.*, system\.slice AllowedCPUs, "
            r"init\.scope AllowedCPUs\)",
            said,
        ), verified.output

        # Verify reads AllowedCPUs back through systemctl: a unit widened by hand is drift.
        assert (
            emu.systemctl("set-property", "--runtime", "init.scope", "AllowedCPUs=0-1").returncode
            == 0
        )
        drifted = emu.runner.run("verify.yml", "-e", "socketlab_noise_seconds=0")
        assert drifted.returncode != 0
        assert "init.scope AllowedCPUs: expected 0, found 0-1" in drifted.output, drifted.output
        assert (
            emu.systemctl(
                "set-property", "--runtime", "init.scope", f"AllowedCPUs={housekeeping}"
            ).returncode
            == 0
        )

        second = emu.runner.run("isolate.yml", *SYSTEMD)
        assert second.returncode == 0, second.output
        assert recap(second.output)["localhost"]["changed"] == 0, second.output
        assert emu.units()[HOLDER_UNIT]["MainPID"] == pid  # the same holder, not a second one
    finally:
        restored = emu.runner.run("restore.yml")
    assert restored.returncode == 0, restored.output
    units = emu.units()
    # AllowedCPUs back exactly: system.slice reset by an empty value, init.scope to "0-1".
    for unit in UNITS:
        assert units[unit]["AllowedCPUs"] == units_before[unit]["AllowedCPUs"], unit
    assert ["systemctl", "set-property", "--runtime", "system.slice", "AllowedCPUs="] in (
        emu.calls()
    )
    # irqbalance started again through systemctl; the holder unit stopped and gone.
    assert ["systemctl", "start", "irqbalance"] in emu.calls()
    restarted = units["irqbalance.service"]
    assert restarted["ActiveState"] == "active" and alive(restarted["MainPID"])
    assert _comm(restarted["MainPID"]) == "irqbalance"
    assert ["systemctl", "stop", HOLDER_UNIT] in emu.calls()
    assert HOLDER_UNIT not in units and not alive(pid)
    assert not emu.runner.state_files() and not emu.runner.state_dir.exists()
    assert_same_knobs(_moved(before), _moved(knob_snapshot()))
    assert emu.errors() == []


def test_systemd_check_mode_changes_nothing(emu):
    units_before, calls_before = emu.units(), len(emu.calls())
    before = knob_snapshot()
    checked = emu.runner.run("isolate.yml", "--check", "--diff", *SYSTEMD)
    assert checked.returncode == 0, checked.output
    # The diff says what would change, and nothing did.
    assert "+init.scope AllowedCPUs=0" in checked.output, checked.output
    assert alive(units_before["irqbalance.service"]["MainPID"])
    assert emu.units() == units_before
    new_calls = emu.calls()[calls_before:]
    assert new_calls and all(call[1] in ("show", "is-active") for call in new_calls), new_calls
    assert not emu.runner.state_files()
    assert_same_knobs(before, knob_snapshot())
    assert emu.errors() == []


def test_multi_range_allowed_cpus_round_trip(tmp_path):
    """systemd shows AllowedCPUs as "0-1 96-97" (spaces); a second apply must read that back as
    the same set (changed=false), not fail to parse it. No kernel knobs: no lock needed."""
    emu = Emu(tmp_path)
    state = tmp_path / "isolation-localhost.json"
    state.write_text(json.dumps({"files": {}, "systemd_units": {"system.slice": ""}}))
    args = json.dumps(
        {
            "cpus": "0-1,96-97",
            "units": ["system.slice"],
            "state_file": str(state),
            "service_manager": "systemd",
        }
    )
    adhoc = [
        str(ANSIBLE_PLAYBOOK.with_name("ansible")),
        "localhost",
        "-m",
        "socketlab.lab.systemd_cpuset",
        "-a",
        args,
    ]
    first = subprocess.run(adhoc, capture_output=True, text=True, env=emu.env, timeout=300)
    assert "localhost | CHANGED" in first.stdout, first.stdout + first.stderr
    assert emu.units()["system.slice"]["AllowedCPUs"] == "0-1 96-97"
    second = subprocess.run(adhoc, capture_output=True, text=True, env=emu.env, timeout=300)
    assert "localhost | SUCCESS" in second.stdout, second.stdout + second.stderr
    assert "changed: false" in second.stdout and "on (already)" in second.stdout
    assert emu.errors() == []


def test_emulation_refuses_calls_it_does_not_know(tmp_path):
    emu = Emu(tmp_path)
    for call in (
        ["restart", "irqbalance"],
        ["set-property", "system.slice", "AllowedCPUs=0"],
        ["show", "-p", "AllowedCPUs", "--value", "user.slice"],
    ):
        result = emu.systemctl(*call)
        assert result.returncode == 1 and "not emulated" in result.stderr, call
    assert len(emu.errors()) == 3
    assert emu.units()["system.slice"]["AllowedCPUs"] == ""  # the persistent set was refused


@pytest.mark.parametrize("playbook", ["isolate.yml", "verify.yml", "restore.yml"])
def test_unknown_host_one_line_naming_it(tmp_path, kernel_knobs_lock, playbook):
    runner = Runner(tmp_path / "state")
    before = knob_snapshot()
    result = runner.run(playbook, "-e", "socketlab_hosts=localhost,nosuch")
    assert result.returncode != 0, result.output
    inventory = runner.inventory
    assert error_line(result.output) == (
        f"[ERROR]: Task failed: Action failed: unknown host 'nosuch': not in inventory {inventory}"
    )
    assert not runner.state_dir.exists()
    assert_same_knobs(before, knob_snapshot())
