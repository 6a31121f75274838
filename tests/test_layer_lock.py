"""native/layer --lock against the emulation of /dev/pseudo_lock
(native/driver/pseudo_lock_sram/emu/pl_emu.c, LD_PRELOAD; tests/test_driver_emu.py drives
residency's side of the same lock.c): each worker's resident weight bytes are locked at level 2
on its own CPU after its first touch, measured before and after the run, and released by the
descriptor's close; the stage's gate still runs on every step. The emulation reports every line
held, so the held values here show the plumbing, not a cache: that needs the module loaded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from socketlab.cpulist import parse_cpulist
from tests.support.pl_emu import CAP_12_WAYS, build_with_emulation

REPO = Path(__file__).resolve().parents[1]
SHAPES = REPO / "experiments" / "shapes"
TINY_WEIGHTS = 1_638_400  # tiny's nine matrices, bf16, all on one worker (over CAP_12_WAYS)


def two_cpus() -> str:
    """the first two online CPUs (the first alone on a one-CPU host)"""
    online = parse_cpulist(Path("/sys/devices/system/cpu/online").read_text())
    return ",".join(map(str, online[:2]))


@pytest.fixture(scope="module")
def tools(tmp_path_factory) -> tuple[Path, Path]:
    return build_with_emulation(tmp_path_factory.mktemp("layer-lock"), "layer", no_warnings=True)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tiny") / "d"
    orchestrate = Path(sys.executable).parent / "orchestrate"
    proc = subprocess.run(
        [
            str(orchestrate),
            "layer-dump",
            str(SHAPES / "tiny.yaml"),
            "--context",
            "100",
            "--batch",
            "1",
            "--seed",
            "3",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def run_locked(
    tools, tiny, tmp_path, *args: str, **env: str
) -> tuple[subprocess.CompletedProcess, list[str]]:
    binary, emu = tools
    log = tmp_path / "emu.log"
    device = str(tmp_path / "pseudo_lock")
    proc = subprocess.run(
        [str(binary), "--dump", str(tiny), "--steps", "20", "--lock", "--device", device, *args],
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


def records(proc: subprocess.CompletedProcess) -> tuple[dict, list[dict]]:
    recs = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.strip()]
    assert recs and recs[0]["type"] == "meta" and recs[0]["binary"] == "layer"
    return recs[0], recs[1:]


def assert_gate_passed(metrics: list[dict]) -> None:
    gate = [m for m in metrics if m["name"] == "gate_rel_rms"]
    assert len(gate) == 20
    assert all(m["pass"] is True and m["repeat_max_abs"] == 0 for m in gate), gate


@pytest.mark.parametrize("workers", [1, 2])
def test_lock_each_workers_weights_and_pass_the_gate(tools, tiny, tmp_path, workers):
    """Per worker: LOCK its weight bytes at level 2 on its own CPU, WORKER on, MEASURE before;
    MEASURE after the run; close releases every region and worker. One worker keeps 1 MiB
    resident (--resident-kib: tiny's 1.6 MiB is over the 12-way capacity); two hold 800 KiB
    each, their whole slices."""
    cpus = "0" if workers == 1 else two_cpus()
    if len(cpus.split(",")) != workers:
        pytest.fail(f"needs {workers} online CPUs")
    extra = ["--resident-kib", "1024"] if workers == 1 else []
    proc, log = run_locked(tools, tiny, tmp_path, "--cpus", cpus, "--lock-ways", "12", *extra)
    assert proc.returncode == 0, proc.stderr
    meta, metrics = records(proc)
    assert_gate_passed(metrics)
    assert meta["lock"] is True and meta["lock_abi"] == 3
    assert meta["l2_lock_bytes_per_core"] == CAP_12_WAYS and meta["l2_cbm_lock"] == 0xFFF
    want = 1 << 20 if workers == 1 else TINY_WEIGHTS // 2
    assert log[:2] == [log[0], "caps"] and log[0].startswith("open fd=")
    for cpu in map(int, cpus.split(",")):
        assert f"lock cpu={cpu} len={want} level=2 -> 0" in log
        assert f"worker cpu={cpu} on=1" in log
    assert sum(line.startswith("measure id=") for line in log) == 2 * workers
    assert log[-1] == f"close released regions={workers} workers={workers}"
    for name in ("held_lock_before", "held_lock_after"):
        held = {m["cpu"]: m for m in metrics if m["name"] == name}
        assert sorted(held) == sorted(map(int, cpus.split(",")))
        for m in held.values():
            assert m["value"] == 1.0  # the emulation reports every line held
            assert m["lock_bytes"] == want and m["lock_regions"] == 1 and m["lock"] is True


def test_resident_rows_apart_are_locked_as_separate_page_runs(tools, tiny, tmp_path):
    """--resident-kib 1153 keeps q..up (1152 KiB) and, past down's rows (1536 B each, none
    fit), 2 ple-gate rows (1 KiB): two regions, [0, 1152K) and the ple gate's page."""
    proc, log = run_locked(tools, tiny, tmp_path, "--cpus", "0", "--resident-kib", "1153")
    assert proc.returncode == 0, proc.stderr
    _, metrics = records(proc)
    assert_gate_passed(metrics)
    locks = [line for line in log if line.startswith("lock ")]
    assert locks == ["lock cpu=0 len=1179648 level=2 -> 0", "lock cpu=0 len=4096 level=2 -> 0"]
    assert log[-1] == "close released regions=2 workers=2"
    after = [m for m in metrics if m["name"] == "held_lock_after"]
    assert [(m["lock_regions"], m["lock_bytes"]) for m in after] == [(2, 1179648 + 4096)]


def test_no_device_is_not_available(tools, tiny, tmp_path):
    binary, _ = tools
    proc = subprocess.run(
        [str(binary), "--dump", str(tiny), "--lock", "--device", str(tmp_path / "absent")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 3
    assert proc.stderr.startswith(
        "layer: not available on this host: pseudo-lock driver not loaded"
    )
    assert len(proc.stderr.strip().splitlines()) == 1 and not proc.stdout


def test_weights_over_the_lockable_capacity_are_a_usage_error(tools, tiny, tmp_path):
    proc, log = run_locked(tools, tiny, tmp_path, "--cpus", "0")
    assert proc.returncode == 2
    assert (
        f"worker 0 (cpu 0) has {TINY_WEIGHTS} resident weight bytes (in pages), larger "
        f"than the lockable L2 capacity per core, {CAP_12_WAYS} bytes"
    ) in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not any(line.startswith("lock ") for line in log)


def test_driver_with_other_ways_is_not_available(tools, tiny, tmp_path):
    proc, log = run_locked(
        tools, tiny, tmp_path, "--cpus", two_cpus(), "--lock-ways", "14", PL_EMU_L2_WAYS="12"
    )
    assert proc.returncode == 3
    assert "reserves 12 L2 ways (lock mask 0xfff), --lock-ways asks for 14" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not any(line.startswith("lock ") for line in log)


@pytest.mark.parametrize(
    "args,expect",
    [
        (["--lock-ways", "12"], "--lock-ways is only used with --lock"),
        (["--lock", "--lock-ways", "40"], "--lock-ways"),
    ],
)
def test_bad_lock_options_are_one_line_exit_2(tools, tiny, args, expect):
    binary, _ = tools
    proc = subprocess.run(
        [str(binary), "--dump", str(tiny), *args], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert expect in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
