"""Is AMX really executing? oneDNN's kernel-selection trace per precision (runs on the host).

``platform_amx.py [--precision bf16|int8|fp32 ...] [--no-control] [--traces DIR] [--timeout S]
[--jsonl]`` runs one workload child per precision, plus the negative control (BF16 with
ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16, which caps oneDNN below AMX), each under ONEDNN_VERBOSE=1
(oneDNN reads its environment once per process), and judges each trace with
``platform_onednn.py`` beside this file (the controller loads the same file for
``orchestrate platform amx --trace``). The workload needs torch built with oneDNN in the
host's Python (run it with ``python3 -I``, not ``-S``, so site-packages are seen); this file
itself needs only the stdlib and runs on Python 3.9.

The workload (``--workload bf16|int8|fp32``, the child): a Linear-GELU-Linear stack (1024 ->
4096 -> 1024, batch 64, seeded weights, nothing downloaded) in FP32, under BF16 autocast, or
dynamically quantized to INT8 on torch's ``onednn`` quantized engine (the default x86/fbgemm
engine never reaches oneDNN's matmul, so its trace could not show AMX either way). Every run
first applies an FP32 GELU: it goes through oneDNN's eltwise on every CPU, so the trace always
carries oneDNN's ISA line, and on an AMX host it is the ``jit:..._amx`` eltwise the verdict
must not count.

Output with ``--jsonl``: per run one ``{"type": "meta", "run", "precision", "control",
"host_flags", "trace"}`` record (the oneDNN lines the verdict read, so the controller keeps the
evidence with the run) and one ``amx_executing`` metric record (the verdict and its reason as
dimensions); a run whose workload failed prints a meta record with its ``error`` instead.

Exit: 0 verdicts given; 1 a workload failed, or the control ran AMX ("self-check failed": the
parser or the cap is wrong); 2 bad arguments; 3 not available on this host (no torch with
oneDNN: one line).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
CONTROL_ISA = "AVX512_CORE_BF16"


if __package__:  # imported by the orchestrator, as socketlab.hostside.platform_amx
    from . import platform_onednn as onednn
else:  # a script on a host: its sibling is beside it
    sys.path.insert(0, HERE)
    import platform_onednn as onednn


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


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> list[str] | None:
    return onednn.cpu_flags(cpuinfo)


def _interpreter() -> list[str]:
    """This interpreter with the flags it runs under (-I, -S), for the workload children."""
    flags = ["-I"] if sys.flags.isolated else []
    if sys.flags.no_site:
        flags.append("-S")
    return [sys.executable, *flags]


def run_workload(run: ProbeRun, out_dir: str | None, timeout_s: float) -> tuple[str, int]:
    """(trace text, exit code) of one workload child; the trace kept in out_dir/<run>.log."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ONEDNN_", "DNNL_"))}
    env["ONEDNN_VERBOSE"] = "1"
    if run.control:  # both names: oneDNN before 3.0 reads DNNL_*
        env["ONEDNN_MAX_CPU_ISA"] = env["DNNL_MAX_CPU_ISA"] = CONTROL_ISA
    argv = [*_interpreter(), os.path.join(HERE, "platform_amx.py"), "--workload", run.precision]
    try:
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s)
        text, code = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        text, code = _text(exc.stdout) + _text(exc.stderr), 124
        text += f"\nworkload killed after {timeout_s:g} s\n"
    if out_dir is not None:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, f"{run.name}.log"), "w") as fh:
            fh.write(text)
    return text, code


def _text(data) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data


def probe(
    precisions: list[str], control: bool, out_dir: str | None, timeout_s: float = 300.0
) -> list[tuple[ProbeRun, object, str]]:
    """[(run, verdict or None, error)] for every run; flags from this host's CPUID."""
    return [
        (run, v, error)
        for run, v, error, _ in _probe(precisions, control, out_dir, timeout_s, cpu_flags())
    ]


def _probe(precisions, control, out_dir, timeout_s, flags):
    results = []
    for run in runs(precisions, control):
        text, code = run_workload(run, None if out_dir is None else str(out_dir), timeout_s)
        if code != 0:
            tail = " | ".join(text.strip().splitlines()[-2:])
            results.append((run, None, f"workload exited {code}: {tail}", text))
            continue
        v = onednn.verdict(onednn.parse_trace(text), run.precision, flags, run.control)
        results.append((run, v, "", text))
    return results


def torch_missing() -> str | None:
    """Why this Python cannot run the workload; None when it can."""
    if importlib.util.find_spec("torch") is None:
        return "torch with oneDNN is not installed (pip install torch)"
    try:
        import torch
    except Exception as exc:  # a broken install: say what, in one line
        return f"torch does not import: {type(exc).__name__}: {exc}".splitlines()[0]
    if not torch.backends.mkldnn.is_available():
        return f"torch {torch.__version__} is built without oneDNN (mkldnn)"
    return None


def workload(prec: str) -> int:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)
    ).eval()
    x = torch.randn(64, 1024)
    with torch.no_grad():
        torch.nn.functional.gelu(x)  # the ISA line, and the eltwise false positive on AMX
        if prec == "fp32":
            y = model(x)
        elif prec == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                y = model(x)
        else:
            if "onednn" not in torch.backends.quantized.supported_engines:
                print("torch has no onednn quantized engine", file=sys.stderr)
                return 3
            torch.backends.quantized.engine = "onednn"
            q = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
            y = q(x)
    print(prec, float(y.float().abs().mean()))
    return 0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="platform_amx",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--precision",
        action="append",
        choices=list(onednn.PRECISIONS),
        help="precision(s) to run (default: all three)",
    )
    p.add_argument("--no-control", action="store_true", help="skip the negative control")
    p.add_argument("--traces", help="keep each run's output in this folder (<run>.log)")
    p.add_argument("--timeout", type=float, default=300.0, help="per workload, seconds")
    p.add_argument("--jsonl", action="store_true", help="JSON-lines records")
    p.add_argument("--workload", choices=list(onednn.PRECISIONS), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.workload:
        return workload(args.workload)
    why = torch_missing()
    if why:
        print(f"platform_amx: not available on this host: {why}", file=sys.stderr)
        return 3
    flags = cpu_flags()
    results = _probe(
        args.precision or list(onednn.PRECISIONS),
        not args.no_control,
        args.traces,
        args.timeout,
        flags,
    )
    failed = broken = False
    for run, v, error, text in results:
        head = {
            "type": "meta",
            "run": run.name,
            "precision": run.precision,
            "control": "yes" if run.control else "no",
        }
        if v is None:
            failed = True
            if args.jsonl:
                print(json.dumps({**head, "error": error}))
            print(f"{run.name}: {error}", file=sys.stderr)
            continue
        broken = broken or v.control_ok is False
        if args.jsonl:
            print(json.dumps({**head, "host_flags": flags, "trace": onednn.trace_lines(text)}))
            print(json.dumps(onednn.record(run.name, v), sort_keys=True))
        else:
            print(onednn.line(run.name, v))
    if broken:
        print("self-check failed: the forced-no-AMX control ran AMX", file=sys.stderr)
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
