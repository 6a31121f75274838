"""Run the AMX workloads under ONEDNN_VERBOSE on this host and turn the traces into verdicts.

One child process per precision (oneDNN reads its environment once per process), plus the
negative control: BF16 with ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16, which caps oneDNN below AMX,
so its verdict must be "AMX not used"; if it is not, the parser (or the cap) is wrong and the
probe says so with exit 1.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from socketlab.platform.onednn import Verdict, parse_trace, verdict

CONTROL_ISA = "AVX512_CORE_BF16"


@dataclass(frozen=True)
class ProbeRun:
    name: str  #: bf16, int8, fp32, bf16-control
    precision: str
    control: bool


def runs(precisions: list[str], control: bool) -> list[ProbeRun]:
    out = [ProbeRun(p, p, False) for p in precisions]
    if control:
        out.append(ProbeRun("bf16-control", "bf16", True))
    return out


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> list[str] | None:
    """The first CPU's flags; None where /proc/cpuinfo has none (non-x86)."""
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("flags"):
                return line.split(":", 1)[1].split()
    except OSError:
        return None
    return None


def run_workload(run: ProbeRun, out_dir: Path | None, timeout_s: float) -> tuple[str, int]:
    """(trace text, exit code) of one workload child."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ONEDNN_", "DNNL_"))}  # fmt: skip
    env["ONEDNN_VERBOSE"] = "1"
    if run.control:  # both names: oneDNN before 3.0 reads DNNL_*
        env["ONEDNN_MAX_CPU_ISA"] = env["DNNL_MAX_CPU_ISA"] = CONTROL_ISA
    argv = [sys.executable, "-m", "socketlab.platform.amx_workload", run.precision]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s)
    text = proc.stdout + proc.stderr
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / f"{run.name}.log").write_text(text)
    return text, proc.returncode


def probe(precisions: list[str], control: bool, out_dir: Path | None,
          timeout_s: float = 300.0) -> list[tuple[ProbeRun, Verdict | None, str]]:  # fmt: skip
    """[(run, verdict or None, error)] for every run; flags from this host's CPUID."""
    flags = cpu_flags()
    results = []
    for run in runs(precisions, control):
        text, code = run_workload(run, out_dir, timeout_s)
        if code != 0:
            tail = " | ".join(text.strip().splitlines()[-2:])
            results.append((run, None, f"workload exited {code}: {tail}"))
            continue
        results.append((run, verdict(parse_trace(text), run.precision, flags, run.control), ""))
    return results
