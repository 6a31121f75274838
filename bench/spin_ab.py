"""One native binary's --spin modes side by side: step p50/p99 per mode, interleaved.

Every native stage with barrier-coupled workers (layer, gemv, kvstream) takes --spin
auto|pause|fma512|amx (native/common/spin.c): how a waiting worker polls. This runs the same
command once per mode per round, the modes in turn (A B C A B C ...), so a neighbour on a
shared host lands on every mode alike; a mode's figure is the median over the rounds of its
step_p50 and step_p99, and the ratio column is the median of the per-round ratios against the
first mode. The load average is printed before and after.

usage: spin_ab.py [--modes pause,fma512] [--rounds N] -- BINARY ARGS...
e.g.   spin_ab.py --modes pause,fma512 -- native/build/cc/gemv --kernel avx512-bf16 \
           --rows 256 --cpus 0,1 --steps 20000
Prints one JSON line per run, then a markdown table. Bad input: one line, exit 2."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

MODES = ("auto", "pause", "fma512", "amx")


def run_once(cmd: list[str], mode: str) -> dict:
    proc = subprocess.run([*cmd, "--spin", mode], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(
            f"spin_ab: {Path(cmd[0]).name} --spin {mode}: exit {proc.returncode}: {last}"
        )
    meta, values = {}, {}
    for line in proc.stdout.splitlines():
        rec = json.loads(line)
        if rec.get("type") == "meta":
            meta = rec
        elif rec.get("name") in ("step_p50", "step_p99"):
            values[rec["name"]] = rec["value"]
    if "spin" not in meta or len(values) != 2:
        raise SystemExit(f"spin_ab: {cmd[0]}: no meta 'spin' or no step_p50/p99 in its output")
    return {"mode": mode, "ran": meta["spin"], **values}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--modes", default="pause,fma512", help="comma-separated (default pause,fma512)"
    )
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("cmd", nargs=argparse.REMAINDER, help="-- BINARY ARGS...")
    args = ap.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    modes = args.modes.split(",")
    bad = [m for m in modes if m not in MODES]
    if not cmd or not Path(cmd[0]).is_file():
        print(
            f"spin_ab: expected -- BINARY ARGS... after the options, got {cmd[:1]}", file=sys.stderr
        )
        return 2
    if bad or len(modes) < 2 or args.rounds < 1:
        print(
            f"spin_ab: --modes: two or more of {', '.join(MODES)}; --rounds >= 1", file=sys.stderr
        )
        return 2
    print(f"load average before: {os.getloadavg()}", file=sys.stderr)
    runs: dict[str, list[dict]] = {m: [] for m in modes}
    for _ in range(args.rounds):
        for m in modes:
            rec = run_once(cmd, m)
            print(json.dumps(rec))
            runs[m].append(rec)
    print(f"load average after: {os.getloadavg()}", file=sys.stderr)
    base = modes[0]
    print(f"\n{' '.join(cmd)}, {args.rounds} rounds\n")
    print(f"| --spin (ran) | step p50 µs | step p99 µs | p50, p99 ÷ {base} |")
    print("|---|---|---|---|")
    for m in modes:
        med = {k: statistics.median(r[k] for r in runs[m]) for k in ("step_p50", "step_p99")}
        ratio = {
            k: statistics.median(a[k] / b[k] for a, b in zip(runs[m], runs[base], strict=True))
            for k in ("step_p50", "step_p99")
        }
        print(
            f"| {m} ({runs[m][0]['ran']}) | {med['step_p50']:.2f} | {med['step_p99']:.2f} | "
            f"{ratio['step_p50']:.2f}, {ratio['step_p99']:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
