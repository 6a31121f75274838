"""What the native/layer tests share (tests/test_layer_stage.py, tests/test_layer_modes.py): the
stage's build, dumps from `orchestrate layer-dump`, a run of a binary and its JSON-lines records."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NATIVE = REPO / "native"
SHAPES = REPO / "experiments" / "shapes"
ORCHESTRATE = Path(sys.executable).parent / "orchestrate"
TIMEOUT = 120


def two_cpus() -> str:
    first = Path("/sys/devices/system/cpu/online").read_text().strip().split(",")[0]
    lo, _, hi = first.partition("-")
    return f"{lo},{int(lo) + 1}" if hi and int(hi) > int(lo) else lo


#: --cpus for 1 and 2 workers
CPUS = {1: "0", 2: two_cpus()}


def make(out: Path, cc: str, *targets: str) -> subprocess.CompletedProcess:
    """native/Makefile's targets (paths under out) built into out with CC=cc."""
    return subprocess.run(
        ["make", "-C", str(NATIVE), f"BUILD={out}", f"CC={cc}", "-j2", *targets],
        capture_output=True,
        text=True,
        timeout=600,
    )


def orchestrate(*args: object, timeout: int = 300) -> subprocess.CompletedProcess:
    """`orchestrate ARGS...` (each argument as str), output captured as text."""
    return subprocess.run(
        [str(ORCHESTRATE), *map(str, args)], capture_output=True, text=True, timeout=timeout
    )


def layer_dump(shape: str, context: int, batch: int, out: Path, *extra: str, seed: int = 3) -> Path:
    """`orchestrate layer-dump` of experiments/shapes/SHAPE.yaml into out (extra flags last)."""
    args = ["--context", context, "--batch", batch, "--seed", seed, "--out", out, *extra]
    proc = orchestrate("layer-dump", SHAPES / f"{shape}.yaml", *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def run(binary: Path, *args: object, **flags: object) -> subprocess.CompletedProcess:
    """binary with `--name value` for each keyword (underscores as dashes, in the order given),
    then args; every value as str."""
    opts = [x for k, v in flags.items() for x in (f"--{k.replace('_', '-')}", v)]
    argv = [str(binary), *map(str, [*opts, *args])]
    return subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT)


def records(proc: subprocess.CompletedProcess) -> tuple[dict, list[dict]]:
    recs = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.strip()]
    assert recs and recs[0]["type"] == "meta" and recs[0]["binary"] == "layer"
    return recs[0], recs[1:]
