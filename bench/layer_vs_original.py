"""Our layer stage (native/layer) and the original campaign's l2r_layer side by side on one dump.

The original (repository infervisor/plow, runtime/cpu/bench/l2r/l2r_layer.c) is never part of
this repository: build it yourself on the host that runs it and pass the binary with
--original. It needs AVX-512 F/BW/BF16 (its avx GEMV, norms, softmax and exchanges are AVX-512
intrinsics) and, for --gemv amx, AMX; it reads batch row 0 only (`l2r_layer DIR STEPS`, the
knobs as environment variables: L2R_CPUS, L2R_GEMV, L2R_BCAST, L2R_BARRIER, L2R_NOBCAST).

Both run the same dump (row 0, B = 1), the same CPUs, GEMV path, exchange mode and barrier;
each reports step p50/p99 over its steps minus the first 10 %. Ratio = ours / original (goal:
<= 1.0).

usage: layer_vs_original.py BUILD_DIR --original PATH --dump DIR [--cpus 0,1]
                            [--gemv avx512|amx] [--steps N] [--modes direct,rep,...]
Prints JSON lines, then a markdown table. Bad input: one line, exit 2."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ORIG_GEMV = {"avx512": "avx", "amx": "amx"}
MODES = ("direct", "rep", "repcld", "repnt", "fid")


def fail(msg: str) -> None:
    print(f"layer_vs_original: error: {msg}", file=sys.stderr)
    sys.exit(2)


def ours(a, mode: str, bar: str, nobcast: bool) -> dict:
    cmd = [str(Path(a.build) / "layer"), "--dump", a.dump, "--cpus", a.cpus, "--gemv", a.gemv,
           "--steps", str(a.steps), "--xchg", mode, "--barrier", bar]
    proc = subprocess.run(cmd + (["--nobcast"] if nobcast else []), capture_output=True,
                          text=True, timeout=900)
    if proc.returncode != 0:
        fail(f"{' '.join(cmd)}: exit {proc.returncode}: {proc.stderr.strip()}")
    recs = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.strip()]
    val = {r["name"]: r["value"] for r in recs if r.get("type") == "metric"}
    return {"p50": val["step_p50"], "p99": val["step_p99"]}


def original(a, mode: str, bar: str, nobcast: bool) -> dict:
    env = dict(os.environ, L2R_CPUS=a.cpus, L2R_GEMV=ORIG_GEMV[a.gemv], L2R_BCAST=mode,
               L2R_BARRIER=bar, L2R_NOBCAST="1" if nobcast else "0")
    proc = subprocess.run([a.original, a.dump, str(a.steps)], capture_output=True, text=True,
                          timeout=900, env=env)
    if proc.returncode != 0:
        fail(f"{a.original} {a.dump} {a.steps} (L2R_BCAST={mode}): exit {proc.returncode}: "
             f"{proc.stderr.strip()[-300:]}")
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith("{")), None)
    if line is None:
        fail(f"{a.original}: no JSON line on stdout")
    step = json.loads(line)["step_us"]
    return {"p50": step["p50"], "p99": step["p99"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--original", required=True, help="l2r_layer binary, built by you")
    ap.add_argument("--dump", required=True)
    ap.add_argument("--cpus", default="0,1")
    ap.add_argument("--gemv", default="avx512", choices=sorted(ORIG_GEMV))
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--modes", default=",".join(MODES))
    a = ap.parse_args()
    if not os.access(a.original, os.X_OK):
        fail(f"--original {a.original}: not an executable file")
    if not (Path(a.dump) / "manifest.txt").is_file():
        fail(f"--dump {a.dump}: no manifest.txt (make one with orchestrate layer-dump)")
    if not (Path(a.build) / "layer").is_file():
        fail(f"{a.build}/layer: not built (make -C native BUILD=...)")
    modes = a.modes.split(",")
    bad = [m for m in modes if m not in MODES]
    if bad:
        fail(f"--modes: unknown {bad[0]!r}, expected some of {','.join(MODES)}")
    rows = []
    cases = [("direct", "diss", True)] + [(m, b, False) for m in modes for b in ("diss", "hier")]
    for mode, bar, nob in cases:
        o, r = ours(a, mode, bar, nob), original(a, mode, bar, nob)
        rows.append({"mode": "nobcast" if nob else mode, "barrier": bar, "gemv": a.gemv,
                     "cpus": a.cpus, "ours_p50_us": o["p50"], "ours_p99_us": o["p99"],
                     "orig_p50_us": r["p50"], "orig_p99_us": r["p99"],
                     "ratio_p50": o["p50"] / r["p50"]})
    for r in rows:
        print(json.dumps(r))
    print("\n| mode / barrier | ours p50 / p99 | original p50 / p99 | ours / original (p50) |\n"
          "|---|---|---|---|")
    for r in rows:
        print(f"| {r['mode']}/{r['barrier']} | {r['ours_p50_us']:.1f} / {r['ours_p99_us']:.1f} us"
              f" | {r['orig_p50_us']:.1f} / {r['orig_p99_us']:.1f} us | {r['ratio_p50']:.2f} |")


if __name__ == "__main__":
    main()
