"""The layer stage's AVX-512 weight layouts side by side: `--gemv avx512` (row-major rows, the
published AVX path), `avx512-vnni` (AMX's 16-row VNNI blocks, rows padded to whole blocks) and
`avx2`, on worker 0's slice of a 90-worker layer; then `gemv`'s GB/s for the two AVX-512
kernels on one L2-sized matrix.

1. `layer --slice 0/90` on E2B L0 and L4 at 2K, B = 1 and 16: per weight phase the GEMV p50
   (`phase_gemv_p50`) and the bytes it read (`phase_weight_bytes`). The kernels run interleaved
   (kernel innermost, --repeats rounds) so a loaded host's drift lands on all three; the table
   gives the median p50 per kernel and the ratios to avx512's.
2. `gemv --rows R --cols C` (default 256 x 1536 = 768 KiB, L2-resident on a 1 MiB L2) with
   `avx512-bf16-rows` and `avx512-bf16`, interleaved the same way.

usage: layer_avx512_layouts.py BUILD_DIR [--cache DIR] [--cpu 0] [--steps N] [--repeats N]
                               [--rows R] [--cols C]
Prints JSON lines, then markdown tables."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

KERNELS = ("avx512", "avx512-vnni", "avx2")
GEMV = {"avx512": "avx512-bf16-rows", "avx512-vnni": "avx512-bf16"}
PHASES = ("qkv", "o", "gateup", "down", "ple_gate", "ple_proj")
SHAPES = ("gemma4-e2b-l0", "gemma4-e2b-l4")


def run_json(cmd: list[str]) -> list[dict]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: exit {proc.returncode}: {proc.stderr.strip()[-500:]}")
    return [json.loads(ln) for ln in proc.stdout.splitlines() if ln.strip()]


def by_phase(recs: list[dict], name: str) -> dict[str, float]:
    return {r["phase"]: float(r["value"]) for r in recs if r.get("name") == name}


def slice_rows(a) -> list[dict]:
    orchestrate = str(Path(sys.executable).parent / "orchestrate")
    layer = str(Path(a.build) / "layer")
    out = []
    for shape in SHAPES:
        for batch in (1, 16):
            p50s: dict[str, list[dict[str, float]]] = {k: [] for k in KERNELS}
            nbytes: dict[str, dict[str, float]] = {}
            for _ in range(a.repeats):
                for k in KERNELS:
                    recs = run_json(
                        [
                            orchestrate,
                            "layer-stage",
                            "--shape",
                            shape,
                            "--context",
                            "2048",
                            "--batch",
                            "16",
                            "--cache",
                            a.cache,
                            "--",
                            layer,
                            "--cpus",
                            a.cpu,
                            "--slice=0/90",
                            f"--gemv={k}",
                            f"--batch={batch}",
                            f"--steps={a.steps}",
                        ]
                    )
                    p50s[k].append(by_phase(recs, "phase_gemv_p50"))
                    nbytes[k] = by_phase(recs, "phase_weight_bytes")
            for ph in PHASES:
                row = {"part": "slice", "shape": shape, "batch": batch, "phase": ph}
                for k in KERNELS:
                    row[f"{k}_us"] = statistics.median(r[ph] for r in p50s[k])
                    row[f"{k}_bytes"] = nbytes[k][ph]
                print(json.dumps(row), flush=True)
                out.append(row)
    return out


def gemv_rows(a) -> list[dict]:
    gemv = str(Path(a.build) / "gemv")
    out = []
    for batch in (1, 4, 16):
        bw: dict[str, list[float]] = {k: [] for k in GEMV}
        for _ in range(a.repeats):
            for k, kern in GEMV.items():
                recs = run_json(
                    [
                        gemv,
                        "--kernel",
                        kern,
                        "--rows",
                        str(a.rows),
                        "--cols",
                        str(a.cols),
                        "--batch",
                        str(batch),
                        "--cpus",
                        a.cpu,
                        "--steps",
                        "3000",
                    ]
                )
                bw[k].append(next(float(r["value"]) for r in recs if r.get("name") == "weight_bw"))
        row = {
            "part": "gemv",
            "rows": a.rows,
            "cols": a.cols,
            "batch": batch,
            **{f"{k}_gbs": statistics.median(v) for k, v in bw.items()},
        }
        print(json.dumps(row), flush=True)
        out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build")
    ap.add_argument("--cache", default="/tmp/ld", help="layer-stage's dump cache")
    ap.add_argument("--cpu", default="0")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--cols", type=int, default=1536)
    a = ap.parse_args()
    sl = slice_rows(a)
    gm = gemv_rows(a)
    print(
        "\n| shape | B | phase | avx512 (rows) | avx512-vnni | avx2 | vnni / rows | avx2 / rows |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in sl:
        cell = {k: f"{r[f'{k}_us']:.2f} us, {int(r[f'{k}_bytes']):,} B" for k in KERNELS}
        print(
            f"| {r['shape'].removeprefix('gemma4-')} | {r['batch']} | {r['phase']} | "
            f"{cell['avx512']} | {cell['avx512-vnni']} | {cell['avx2']} | "
            f"{r['avx512-vnni_us'] / r['avx512_us']:.2f} | {r['avx2_us'] / r['avx512_us']:.2f} |"
        )
    print("\n| gemv R x C | B | avx512-bf16-rows | avx512-bf16 (VNNI blocks) | rows / blocks |")
    print("|---|---|---|---|---|")
    for r in gm:
        print(
            f"| {r['rows']} x {r['cols']} | {r['batch']} | {r['avx512_gbs']:.1f} GB/s | "
            f"{r['avx512-vnni_gbs']:.1f} GB/s | {r['avx512_gbs'] / r['avx512-vnni_gbs']:.2f} |"
        )


if __name__ == "__main__":
    main()
