#!/usr/bin/env python3
"""How much the interference probe moves between back-to-back readings on one CPU.

    python bench/probe_spread.py [--cpu 1] [--n 30] [--gap 0] [--ladder native/build/cc/ladder]

Runs `ladder --probe` N times (one process each, as the runner does; ``--gap`` seconds apart)
and prints per unit the median, min and max rate and min / median: the spread a quiet host shows
is what the `below` fraction of a spec's `probe:` must stay under (docs/report.md,
Interference). It also prints the best rate per unit as experiments/probe/quiet.yaml's `units:`
line, for recording a core class's quiet reference (readings spread over minutes, `--gap`, so
one quiet moment is not mistaken for the class). Each run is started and waited for by its
PID; nothing else runs here.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", default="1")
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--size", default="1M")
    ap.add_argument("--gap", type=float, default=0.0, help="seconds between runs")
    ap.add_argument("--ladder", type=Path, default=REPO / "native" / "build" / "cc" / "ladder")
    args = ap.parse_args(argv)
    if not args.ladder.exists():
        print(f"probe_spread: {args.ladder} not built (make -C native)", file=sys.stderr)
        return 2
    rates: dict[str, list[float]] = {}
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    took = []
    for i in range(args.n):
        if i and args.gap > 0:
            time.sleep(args.gap)
        t0 = time.monotonic()
        out = subprocess.run(
            [str(args.ladder), "--probe", "--cpus", args.cpu, "--size", args.size],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        took.append(time.monotonic() - t0)
        for line in out.stdout.splitlines():
            rec = json.loads(line)
            if rec.get("name") == "probe":
                rates.setdefault(rec["probe"], []).append(rec["value"])
    print(
        f"ladder --probe --cpus {args.cpu} --size {args.size}, {args.n} runs from {started}; "
        f"one run {statistics.median(took):.2f} s (median)"
    )
    print("| unit | median GB/s | min | max | min / median | max / median |")
    print("|---|---:|---:|---:|---:|---:|")
    for unit, vals in rates.items():
        med = statistics.median(vals)
        print(
            f"| {unit} | {med:.1f} | {min(vals):.1f} | {max(vals):.1f} | "
            f"{min(vals) / med:.2f} | {max(vals) / med:.2f} |"
        )
    best = ", ".join(f"{unit}: {max(vals):.1f}" for unit, vals in sorted(rates.items()))
    print(f"quiet.yaml: units: {{{best}}}  # best of {args.n}, GB/s per CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
