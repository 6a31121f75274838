"""Our layer stage (native/layer) and the original campaign's l2r_layer side by side on one dump.

The original (repository infervisor/plow, runtime/cpu/bench/l2r/l2r_layer.c) is never part of
this repository: build it yourself on the host that runs it and pass the binary with
--original. It needs AVX-512 F/BW/BF16 (its avx GEMV, norms, softmax and exchanges are AVX-512
intrinsics) and, for --gemv amx, AMX; it reads batch row 0 only (`l2r_layer DIR STEPS`, the
knobs as environment variables: L2R_CPUS, L2R_GEMV, L2R_BCAST, L2R_BARRIER, L2R_NOBCAST).

Both run the same dump (row 0, B = 1), the same CPUs, GEMV path, exchange mode and barrier;
each reports step p50/p99 over its steps minus the first 10 %. On a shared host the two sides
run interleaved, ours then the original, --repeats times per case (A B A B ...); a case's figure
is the median of each side's p50 / p99 over the repeats and the medians of the per-pair ratios
ours / original for p50 and p99 (goal: <= 1.0). The load average is printed before and after.
--also "FLAGS" runs ours a second time in each pair with those extra flags (A A' B ...), e.g.
--also "--spin pause" for a before/after of one option in the same run.

usage: layer_vs_original.py BUILD_DIR --original PATH --dump DIR [--cpus 0,1]
                            [--gemv avx512|amx] [--steps N] [--repeats N] [--modes direct,...]
                            [--also FLAGS]
Prints JSON lines, then a markdown table. Bad input: one line, exit 2."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

ORIG_GEMV = {"avx512": "avx", "amx": "amx"}
MODES = ("direct", "rep", "repcld", "repnt", "fid")
# cases the original can't run, and why (ours runs them)
ORIG_CANNOT = {
    ("fid", "hier"): "hangs: its hier barrier waits for node_count x epoch arrivals, and fid "
    "advances the epoch at all 8 phases but waits at 1",
}


def fail(msg: str) -> None:
    print(f"layer_vs_original: error: {msg}", file=sys.stderr)
    sys.exit(2)


def ours(a, mode: str, bar: str, nobcast: bool, extra: list[str] = ()) -> dict:
    cmd = [
        str(Path(a.build) / "layer"),
        "--dump",
        a.dump,
        "--cpus",
        a.cpus,
        "--gemv",
        a.gemv,
        "--steps",
        str(a.steps),
        "--xchg",
        mode,
        "--barrier",
        bar,
    ]
    cmd += (["--nobcast"] if nobcast else []) + list(extra)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        fail(f"{' '.join(cmd)}: exit {proc.returncode}: {proc.stderr.strip()}")
    recs = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.strip()]
    val = {r["name"]: r["value"] for r in recs if r.get("type") == "metric"}
    return {"p50": val["step_p50"], "p99": val["step_p99"]}


def original(a, mode: str, bar: str, nobcast: bool) -> dict:
    env = dict(
        os.environ,
        L2R_CPUS=a.cpus,
        L2R_GEMV=ORIG_GEMV[a.gemv],
        L2R_BCAST=mode,
        L2R_BARRIER=bar,
        L2R_NOBCAST="1" if nobcast else "0",
    )
    try:
        proc = subprocess.run(
            [a.original, a.dump, str(a.steps)], capture_output=True, text=True, timeout=900, env=env
        )
    except subprocess.TimeoutExpired:
        fail(
            f"{a.original} {a.dump} {a.steps} (L2R_BCAST={mode} L2R_BARRIER={bar}): no result "
            "in 900 s"
        )
    if proc.returncode != 0:
        fail(
            f"{a.original} {a.dump} {a.steps} (L2R_BCAST={mode}): exit {proc.returncode}: "
            f"{proc.stderr.strip()[-300:]}"
        )
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
    ap.add_argument("--repeats", type=int, default=3, help="interleaved pairs per case")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--also", default="", help="extra flags for a second run of ours per pair")
    a = ap.parse_args()
    if not os.access(a.original, os.X_OK):
        fail(f"--original {a.original}: not an executable file")
    if not (Path(a.dump) / "manifest.txt").is_file():
        fail(f"--dump {a.dump}: no manifest.txt (make one with orchestrate layer-dump)")
    if not (Path(a.build) / "layer").is_file():
        fail(f"{a.build}/layer: not built (make -C native BUILD=...)")
    if a.repeats < 1 or a.steps < 10:
        fail(f"--repeats {a.repeats} / --steps {a.steps}: expected >= 1 / >= 10")
    modes = a.modes.split(",")
    bad = [m for m in modes if m not in MODES]
    if bad:
        fail(f"--modes: unknown {bad[0]!r}, expected some of {','.join(MODES)}")
    also = shlex.split(a.also)
    rows = []
    load0 = os.getloadavg()
    cases = [("direct", "diss", True)] + [(m, b, False) for m in modes for b in ("diss", "hier")]
    med = statistics.median
    for mode, bar, nob in cases:
        cannot = ORIG_CANNOT.get((mode, bar))
        pairs, alts = [], []
        for _ in range(a.repeats):
            o = ours(a, mode, bar, nob)
            if also:
                alts.append(ours(a, mode, bar, nob, also))
            pairs.append((o, None if cannot else original(a, mode, bar, nob)))
        row = {
            "mode": "nobcast" if nob else mode,
            "barrier": bar,
            "gemv": a.gemv,
            "cpus": a.cpus,
            "dump": a.dump,
            "repeats": a.repeats,
            "ours_p50_us": med(o["p50"] for o, _ in pairs),
            "ours_p99_us": med(o["p99"] for o, _ in pairs),
        }
        if also:
            row.update(
                {
                    "also": a.also,
                    "also_p50_us": med(o["p50"] for o in alts),
                    "also_p99_us": med(o["p99"] for o in alts),
                }
            )
        if cannot:
            row["original"] = cannot
        else:
            row.update(
                {
                    "orig_p50_us": med(r["p50"] for _, r in pairs),
                    "orig_p99_us": med(r["p99"] for _, r in pairs),
                    "ratio_p50": med(o["p50"] / r["p50"] for o, r in pairs),
                    "ratios_p50": [round(o["p50"] / r["p50"], 3) for o, r in pairs],
                    "ratio_p99": med(o["p99"] / r["p99"] for o, r in pairs),
                    "ratios_p99": [round(o["p99"] / r["p99"], 3) for o, r in pairs],
                }
            )
        rows.append(row)
        print(json.dumps(row), flush=True)
    load1 = os.getloadavg()
    print(json.dumps({"loadavg_before": load0, "loadavg_after": load1}))
    alt_head = f" ours with {a.also} p50 / p99 |" if also else ""
    print(
        f"\n| mode / barrier | ours p50 / p99 |{alt_head} original p50 / p99 | ours / original"
        " (p50, p99: medians of pairs) |\n|---|---|" + ("---|" if also else "") + "---|---|"
    )
    for r in rows:
        orig, ratio = (
            (
                f"{r['orig_p50_us']:.1f} / {r['orig_p99_us']:.1f} us",
                f"{r['ratio_p50']:.2f}, {r['ratio_p99']:.2f}",
            )
            if "ratio_p50" in r
            else (r["original"], "-")
        )
        alt = f" {r['also_p50_us']:.1f} / {r['also_p99_us']:.1f} us |" if also else ""
        print(
            f"| {r['mode']}/{r['barrier']} | {r['ours_p50_us']:.1f} / {r['ours_p99_us']:.1f} us"
            f" |{alt} {orig} | {ratio} |"
        )


if __name__ == "__main__":
    main()
