"""The pseudo-lock device emulation (native/driver/pseudo_lock_sram/emu/pl_emu.c, LD_PRELOAD)
and a native binary to drive through it, built into one test folder."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

NATIVE = Path(__file__).resolve().parents[2] / "native"
DRIVER = NATIVE / "driver" / "pseudo_lock_sram"
CAP_12_WAYS = 1_376_256  # 7/8 of 12 of 16 ways of a 2 MiB L2 (the emulated CPUID)


def build_with_emulation(out: Path, target: str, *, no_warnings: bool = False) -> tuple[Path, Path]:
    """(out/target built with gcc through native/Makefile, out/pl_emu.so)"""
    if shutil.which("gcc") is None:
        pytest.fail("gcc is not installed")
    emu = out / "pl_emu.so"
    proc = subprocess.run(
        [
            "gcc",
            "-std=gnu11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-shared",
            "-fPIC",
            f"-I{DRIVER}",
            str(DRIVER / "emu/pl_emu.c"),
            "-o",
            str(emu),
            "-ldl",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    proc = subprocess.run(
        ["make", "-C", str(NATIVE), f"BUILD={out}", "CC=gcc", "-j2", f"{out}/{target}"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    if no_warnings:
        assert "warning" not in proc.stderr.lower(), proc.stderr[-3000:]
    return out / target, emu
