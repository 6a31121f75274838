#!/usr/bin/env python3
"""Core clocks while a run runs: cpufreq, or APERF/MPERF through /dev/cpu/*/msr, or turbostat.

    clock_freq.py start --out DIR [--cpus LIST] [--interval 1]
    clock_freq.py stop --out DIR

Stdlib only (runs on the target). Sources, best first:

* ``aperfmperf``: /dev/cpu/N/msr readable: APERF (0xE8) and MPERF (0xE7) per CPU each interval and
  the base clock from MSR_PLATFORM_INFO (0xCE, bits 15:8 x 100 MHz). Busy MHz = base x dAPERF /
  dMPERF, which is what turbostat calls Bzy_MHz (MPERF only counts in C0).
* ``turbostat``: when present and allowed to run: ``turbostat --quiet --interval I --show
  CPU,Busy%,Bzy_MHz,Avg_MHz,CoreTmp,PkgTmp,PkgWatt,RAMWatt`` into ``DIR/turbostat.txt``.
* ``cpufreq``: /sys/devices/system/cpu/cpuN/cpufreq/scaling_cur_freq (the kernel's estimate).

With APERF/MPERF and cpufreq the hottest hwmon core sensor (coretemp / k10temp) is sampled too.

Where none works (a VM: no MSR driver, no cpufreq, turbostat refused) ``start`` writes one
``{"unsupported": "<reason for each source>"}`` record. socketlab.parse.collectors.clock_freq turns
the records into busy_mhz_mean / _p5 / _min / _max and core_temp_max metrics.
"""

from __future__ import annotations

import glob
import os
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _collector  # noqa: E402

NAME = "clock_freq"
MSR_APERF, MSR_MPERF, MSR_PLATFORM_INFO = 0xE8, 0xE7, 0xCE
TURBOSTAT_SHOW = "CPU,Busy%,Bzy_MHz,Avg_MHz,CoreTmp,PkgTmp,PkgWatt,RAMWatt"


def read_msr(cpu: int, reg: int) -> int:
    fd = os.open(f"/dev/cpu/{cpu}/msr", os.O_RDONLY)
    try:
        return struct.unpack("<Q", os.pread(fd, 8, reg))[0]
    finally:
        os.close(fd)


def core_temp_max() -> float | None:
    """Hottest core/package sensor in °C from hwmon (coretemp on Intel, k10temp on AMD)."""
    hottest = None
    for hw in glob.glob("/sys/class/hwmon/hwmon*"):
        try:
            with open(os.path.join(hw, "name")) as fh:
                if fh.read().strip() not in ("coretemp", "k10temp"):
                    continue
        except OSError:
            continue
        for path in glob.glob(os.path.join(hw, "temp*_input")):
            try:
                with open(path) as fh:
                    t = int(fh.read().strip()) / 1000.0
            except (OSError, ValueError):
                continue
            hottest = t if hottest is None else max(hottest, t)
    return hottest


def online_cpus() -> list[int]:
    try:
        with open("/sys/devices/system/cpu/online") as fh:
            return _collector.parse_cpulist(fh.read().strip())
    except OSError:
        return [0]


def _why_not_msr(cpu: int) -> str | None:
    if not os.path.exists(f"/dev/cpu/{cpu}/msr"):
        return "no /dev/cpu/*/msr (msr driver absent)"
    try:
        read_msr(cpu, MSR_APERF)
        read_msr(cpu, MSR_MPERF)
        read_msr(cpu, MSR_PLATFORM_INFO)
    except OSError as exc:
        return f"/dev/cpu/{cpu}/msr: {exc.strerror}"
    return None


def _why_not_turbostat() -> str | None:
    exe = shutil.which("turbostat")
    if exe is None:
        return "turbostat not installed"
    try:
        probe = subprocess.run(
            [exe, "--quiet", "--num_iterations", "1", "--interval", "0.1", "--show", "Bzy_MHz"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"turbostat: {exc}"
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or [f"exit {probe.returncode}"])[-1].strip()
        return last if last.startswith("turbostat") else f"turbostat: {last}"
    return None


def _why_not_cpufreq(cpu: int) -> str | None:
    path = f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq"
    if not os.path.exists(path):
        return "no cpufreq (scaling_cur_freq absent)"
    try:
        with open(path) as fh:
            int(fh.read().strip())
    except (OSError, ValueError) as exc:
        return f"{path}: {exc}"
    return None


def unsupported(args) -> str | None:
    """Pick the source (stored on args.mode) or say why none works."""
    cpus = _collector.parse_cpulist(args.cpus) if args.cpus else online_cpus()
    reasons = []
    for mode, why in (
        ("aperfmperf", lambda: _why_not_msr(cpus[0])),
        ("turbostat", _why_not_turbostat),
        ("cpufreq", lambda: _why_not_cpufreq(cpus[0])),
    ):
        reason = why()
        if reason is None:
            args.mode = mode
            return None
        reasons.append(reason)
    return "no clock source: " + "; ".join(reasons)


def _loop_msr(ctx, cpus: list[int]) -> None:
    base_mhz = ((read_msr(cpus[0], MSR_PLATFORM_INFO) >> 8) & 0xFF) * 100
    while True:
        sample = {}
        for cpu in cpus:
            try:
                sample[str(cpu)] = [read_msr(cpu, MSR_APERF), read_msr(cpu, MSR_MPERF)]
            except OSError:
                continue
        ctx.write(
            {
                "mode": "aperfmperf",
                "base_mhz": base_mhz,
                "aperf_mperf": sample,
                "temp_c_max": core_temp_max(),
            }
        )
        if not ctx.sleep(ctx.interval):
            break
    # one last sample so the final interval is counted
    sample = {str(c): [read_msr(c, MSR_APERF), read_msr(c, MSR_MPERF)] for c in cpus}
    ctx.write({"mode": "aperfmperf", "base_mhz": base_mhz, "aperf_mperf": sample})


def _loop_turbostat(ctx, cpus: list[int]) -> None:
    out = os.path.join(ctx.out, "turbostat.txt")
    argv = [
        shutil.which("turbostat") or "turbostat",
        "--quiet",
        "--interval",
        f"{ctx.interval:g}",
        "--show",
        TURBOSTAT_SHOW,
        "--out",
        out,
    ]
    if ctx.cpus:
        argv[1:1] = ["--cpu", ",".join(str(c) for c in cpus)]
    child = _collector.start_child(argv)
    ctx.write({"mode": "turbostat", "pid": child.pid, "file": "turbostat.txt", "argv": argv})
    while ctx.sleep(0.2):
        if child.poll() is not None:
            break
    (err,) = _collector.end_children([child])
    ctx.write({"mode": "turbostat", "exit": child.returncode, "stderr": err})


def _loop_cpufreq(ctx, cpus: list[int]) -> None:
    while True:
        mhz = {}
        for cpu in cpus:
            try:
                with open(f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq") as fh:
                    mhz[str(cpu)] = int(fh.read().strip()) / 1000.0
            except (OSError, ValueError):
                continue
        ctx.write({"mode": "cpufreq", "mhz": mhz, "temp_c_max": core_temp_max()})
        if not ctx.sleep(ctx.interval):
            break


def loop(ctx) -> None:
    cpus = ctx.cpus or online_cpus()
    mode = getattr(ctx.args, "mode", "cpufreq")
    {"aperfmperf": _loop_msr, "turbostat": _loop_turbostat, "cpufreq": _loop_cpufreq}[mode](
        ctx, cpus
    )


if __name__ == "__main__":
    sys.exit(_collector.run(sys.argv[1:], NAME, loop, unsupported, __doc__))
