"""DRAM bytes per output token from the memory controllers' CAS counters (measurement.md §C.1).

Where the PMU exposes uncore IMC boxes (``/sys/bus/event_source/devices/uncore_imc*`` on Intel
servers), ``perf stat -a`` counts ``cas_count_read``/``cas_count_write`` (or the per-channel
``cas_count_*_sch*`` events of newer parts) over the load; each CAS moves one 64-byte line.
Elsewhere (this VM: "PMU not available due to virtualization") the reason is recorded instead:
"not available on this host: <reason>".
"""

from __future__ import annotations

import shutil
import signal
import subprocess
from pathlib import Path

from socketlab.execute import process
from socketlab.units import cas_bytes


def imc_events(sysfs: Path = Path("/sys/bus/event_source/devices")) -> list[str]:
    """perf event names for every IMC box's CAS read/write counters."""
    out = []
    for dev in sorted(sysfs.glob("uncore_imc*")):
        events = dev / "events"
        names = (
            sorted(p.name for p in events.glob("cas_count_*") if "." not in p.name)
            if events.is_dir()
            else []
        )
        out += [f"{dev.name}/{n}/" for n in names if "read" in n or "rd" in n or "wr" in n]
    return out


def unavailable(sysfs: Path = Path("/sys/bus/event_source/devices")) -> str | None:
    """Why DRAM bytes cannot be counted here, or None when they can."""
    if not sysfs.is_dir():
        return f"not available on this host: no {sysfs}"
    if not any(sysfs.glob("uncore_imc*")):
        have = ", ".join(sorted(p.name for p in sysfs.iterdir())) or "none"
        return f"not available on this host: no uncore_imc PMU in {sysfs} (event sources: {have})"
    if not imc_events(sysfs):
        return "not available on this host: uncore_imc PMUs have no cas_count events"
    if shutil.which("perf") is None:
        return "not available on this host: perf is not installed"
    return None


def parse_perf_csv(text: str) -> dict[str, float]:
    """``perf stat -x,`` output -> {"read_bytes": ..., "write_bytes": ...}.

    Lines are ``value,unit,event,...``; perf applies the events' scale (a MiB unit) when sysfs
    has one, else the value is a CAS count of 64-byte lines.
    """
    out = {"read_bytes": 0.0, "write_bytes": 0.0}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split(",")
        if len(fields) < 3:
            continue
        value, unit, event = fields[0], fields[1], fields[2]
        try:
            v = float(value)
        except ValueError:  # "<not counted>", "<not supported>"
            continue
        key = "write_bytes" if ("write" in event or "_wr" in event) else "read_bytes"
        out[key] += cas_bytes(v, unit)
    return out


class DramCounter:
    """``perf stat -a`` over the IMC CAS events between start() and stop()."""

    def __init__(self, out: Path, cpus: list[int] | None = None, events: list[str] | None = None):
        self.out = out
        self.cpus = cpus
        self.events = events  #: perf events; None: the IMC CAS counters
        self.reason = unavailable() if events is None else None
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        if self.reason:
            return
        events = self.events if self.events is not None else imc_events()
        argv = ["perf", "stat", "-a", "-x,", "-o", str(self.out), "-e", ",".join(events)]
        try:
            # the process module: own session, parent-death signal (perf and its sleep die
            # with the orchestrator, even a SIGKILLed one: the sleep has its own signal, since
            # perf's would not reach a child it forked)
            self.proc = process.start(
                argv + ["--", *process.argv_for(["sleep", "86400"])],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            self.reason = f"not available on this host: perf failed to start ({exc})"

    def stop(self) -> dict[str, float] | None:
        if self.proc is None:
            return None
        # perf prints its counts when the workload ends: SIGINT the group (the sleep too, as
        # Ctrl-C would); perf alone keeps waiting for its workload
        process.kill_group(self.proc.pid, signal.SIGINT)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill_group(self.proc.pid)
            self.proc.wait(timeout=5)
            self.reason = "perf stat did not stop within 10 s"
            return None
        if not self.out.exists():
            self.reason = "perf stat wrote no output"
            return None
        return parse_perf_csv(self.out.read_text())
