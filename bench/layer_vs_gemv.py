"""The real-layer stage (native/layer) against the `gemv` binary, and its exchange modes.

1. GEMV phases on an L2-resident slice: `layer --slice 0/90` on the E2B L0 2K dump (one worker's
   share of the 90-worker layer) reports per-phase GEMV time and the bytes it read; the `gemv`
   binary runs the same slice (rows x cols) with the same kernel. Ratio = stage GB/s / gemv GB/s.
   `gemv` has only the AVX-512 / AMX kernels: with the portable kernel there is nothing to compare
   against, and the row says so.
2. Exchange modes on all listed CPUs: step p50 with the all-gather (each mode) and without it
   (--nobcast); sync + broadcast cost = step p50 - no-all-gather step p50 (as the seed's P3).

usage: layer_vs_gemv.py BUILD_DIR [--kernel avx2|avx512|amx] [--cpus 0,1] [--steps N]
Prints JSON lines, then a markdown table."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GEMV_KERNEL = {"avx512": "avx512-bf16", "amx": "amx-bf16"}
PHASE_MATS = {"gateup": [("inter", "hidden"), ("inter", "hidden")], "down": [("hidden", "inter")]}


def run_json(cmd: list[str]) -> list[dict]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: exit {proc.returncode}: {proc.stderr.strip()}")
    return [json.loads(ln) for ln in proc.stdout.splitlines() if ln.strip()]


def metric(recs: list[dict], name: str, **dims) -> float:
    for r in recs:
        if r.get("name") == name and all(r.get(k) == v for k, v in dims.items()):
            return float(r["value"])
    raise KeyError(name)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--kernel", default="avx2")
    ap.add_argument("--cpus", default="0,1")
    ap.add_argument("--steps", type=int, default=400)
    a = ap.parse_args()
    layer = str(Path(a.build) / "layer")
    out = Path(tempfile.mkdtemp(prefix="layer-bench-"))
    dump = out / "e2b"
    subprocess.run([str(Path(sys.executable).parent / "orchestrate"), "layer-dump",
                    str(REPO / "experiments/shapes/gemma4-e2b-l0.yaml"), "--context", "2048",
                    "--batch", "1", "--seed", "1", "--out", str(dump)],
                   check=True, capture_output=True, timeout=600)
    rows: list[dict] = []
    sl = run_json([layer, "--dump", str(dump), "--slice", "0/90", "--cpus", a.cpus.split(",")[0],
                   "--gemv", a.kernel, "--steps", str(a.steps)])
    meta = sl[0]
    for phase in ("gateup", "down"):
        us = metric(sl, "phase_gemv", phase=phase)
        nbytes = metric(sl, "phase_weight_bytes", phase=phase)
        row = {"part": "gemv", "phase": phase, "kernel": a.kernel, "stage_us": us,
               "stage_gbs": nbytes / (us * 1e3), "bytes": nbytes}
        gk = GEMV_KERNEL.get(a.kernel)
        if gk:
            mats = PHASE_MATS[phase]
            r = int(nbytes / len(mats) / (2 * meta[mats[0][1]]))
            g = run_json([str(Path(a.build) / "gemv"), "--kernel", gk, "--rows", str(r),
                          "--cols", str(meta[mats[0][1]]), "--cpus", a.cpus.split(",")[0],
                          "--steps", "2000"])
            row["gemv_gbs"] = metric(g, "weight_bw")
            row["ratio"] = row["stage_gbs"] / row["gemv_gbs"]
        else:
            row["gemv_gbs"] = None
            row["note"] = f"gemv has no {a.kernel} kernel: not comparable"
        rows.append(row)
    base = run_json([layer, "--dump", str(dump), "--cpus", a.cpus, "--gemv", a.kernel,
                     "--steps", str(a.steps), "--nobcast"])
    nob = metric(base, "step_p50")
    rows.append({"part": "step", "mode": "nobcast", "step_p50_us": nob})
    for mode in ("direct", "rep", "repcld", "repnt", "fid"):
        for bar in ("diss", "hier"):
            r = run_json([layer, "--dump", str(dump), "--cpus", a.cpus, "--gemv", a.kernel,
                          "--steps", str(a.steps), "--xchg", mode, "--barrier", bar])
            p50 = metric(r, "step_p50")
            rows.append({"part": "step", "mode": mode, "barrier": bar, "step_p50_us": p50,
                         "step_p99_us": metric(r, "step_p99"), "sync_bcast_us": p50 - nob})
    for r in rows:
        print(json.dumps(r))
    print("\n| part | phase / mode | stage | gemv | ratio or sync+bcast |\n|---|---|---|---|---|")
    for r in rows:
        if r["part"] == "gemv":
            gemv = f"{r['gemv_gbs']:.1f} GB/s" if r["gemv_gbs"] else r["note"]
            ratio = f"{r['ratio']:.2f}" if "ratio" in r else "-"
            print(f"| GEMV {r['kernel']} | {r['phase']} | {r['stage_us']:.2f} us = "
                  f"{r['stage_gbs']:.1f} GB/s | {gemv} | {ratio} |")
        elif r["mode"] == "nobcast":
            print(f"| step | no all-gather | p50 {r['step_p50_us']:.1f} us | | |")
        else:
            print(f"| step | {r['mode']}/{r['barrier']} | p50 {r['step_p50_us']:.1f} us, p99 "
                  f"{r['step_p99_us']:.1f} us | | {r['sync_bcast_us']:+.1f} us |")


if __name__ == "__main__":
    main()
