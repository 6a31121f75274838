"""Side by side on one pinned core: `ladder avx512-read` vs `likwid-bench -t load_avx512`.

Runs both tools interleaved (alternating order every repetition) at working sets in L1, L2, L3
and DRAM (half of L1d, half of L2, a quarter of L3, 8 x L3, from --cpu's sysfs cache sizes),
plus `gemv avx512-bf16` from an L2-resident slice (half of L2) against ladder's read of the same
bytes, and ladder's 4k-vs-THP comparison at half, one and two times the L2 size. Prints a
markdown report with the machine it ran on (the figures in docs/benchmarks.md come from it) and
optionally writes the raw numbers as JSON.

    .venv/bin/python bench/native_vs_likwid.py --cpu 0 --reps 5 --out /tmp/native_vs_likwid.json

likwid-bench pins its single thread to the first hardware thread of domain S0; --cpu must be
that CPU (checked from likwid's own output) so both tools run on the same core. Both tools run
under SCHED_FIFO (`chrt -f`, --rt-priority, 0 = off) for the same ~0.4 s per sample (ladder
--seconds, likwid -i from a calibration run), short enough to stay inside the kernel's RT budget
(950 ms per second), so time-sharing with other work on a busy box does not pick the winner.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TIMEOUT = 300
SAMPLE_S = 0.4
RT: list[str] = []  # chrt prefix, set in main()


def sh(argv: list[str], rt: bool = True) -> str:
    argv = (RT if rt else []) + argv
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT)
    if proc.returncode != 0:
        sys.exit(f"native_vs_likwid: {' '.join(argv)} failed ({proc.returncode}): "
                 f"{proc.stderr.strip()[-300:]}")
    return proc.stdout


def caches(cpu: int) -> dict[str, int]:
    """Data/unified cache sizes in bytes seen by `cpu`, keyed L1, L2, L3 (sysfs)."""
    out: dict[str, int] = {}
    for index in sorted(Path(f"/sys/devices/system/cpu/cpu{cpu}/cache").glob("index*")):
        if (index / "type").read_text().strip() == "Instruction":
            continue
        size = (index / "size").read_text().strip()
        scale = {"K": 1 << 10, "M": 1 << 20}.get(size[-1], 1)
        out[f"L{(index / 'level').read_text().strip()}"] = int(size.rstrip("KM")) * scale
    missing = {"L1", "L2", "L3"} - out.keys()
    if missing:
        sys.exit(f"native_vs_likwid: /sys/devices/system/cpu/cpu{cpu}/cache lacks {sorted(missing)}")
    return out


def machine(cpu: int, cache: dict[str, int]) -> str:
    """One line naming the CPU (vendor family/model), its caches, kernel and likwid version."""
    info: dict[str, str] = {}
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        key, _, value = line.partition(":")
        info.setdefault(key.strip(), value.strip())
    sizes = ", ".join(f"{k} {v >> 10} KiB" for k, v in sorted(cache.items()))
    version = sh(["likwid-bench", "-v"], rt=False).strip().split()[-1]
    return (f"{info.get('model name', '?')} (family {info.get('cpu family', '?')} model "
            f"{info.get('model', '?')}), {len(online())} online CPUs, cpu {cpu}: {sizes}; "
            f"kernel {platform.release()}; likwid-bench {version}")


def online() -> list[int]:
    cpus: list[int] = []
    for part in Path("/sys/devices/system/cpu/online").read_text().strip().split(","):
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def records(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def ladder(build: Path, cpu: int, size: int, page: str = "4k", seconds: float = SAMPLE_S) -> dict:
    out = records(sh([str(build / "ladder"), "--kernel", "avx512-read", "--size", str(size),
                      "--cpus", str(cpu), "--seconds", str(seconds), "--reps", "1",
                      "--page", page]))
    bw = next(r["value"] for r in out if r.get("name") == "bw_total" and r.get("stat") == "rep")
    return {"gbs": bw, "page_size": out[0]["page_size"], "thp_fraction": out[0]["thp_fraction"]}


ITERS: dict[int, int] = {}


def likwid(size: int) -> tuple[float, int, int]:
    """GB/s (1e9 B/s), bytes actually used, hwthread it ran on; ~SAMPLE_S seconds per run."""
    if size not in ITERS:  # calibrate the iteration count once per size
        text = sh(["likwid-bench", "-t", "load_avx512", "-w", f"S0:{size}B:1", "-i", "10"])
        secs = float(re.search(r"^Time:\s+([\d.e+-]+)", text, re.M).group(1))
        ITERS[size] = max(10, int(10 * SAMPLE_S / max(secs, 1e-6)))
    text = sh(["likwid-bench", "-t", "load_avx512", "-w", f"S0:{size}B:1", "-i", str(ITERS[size])])
    mbs = float(re.search(r"^MByte/s:\s+([\d.]+)", text, re.M).group(1))
    used = int(re.search(r"^Size \(Byte\):\s+(\d+)", text, re.M).group(1))
    hw = int(re.search(r"running on hwthread (\d+)", text).group(1))
    return mbs / 1000.0, used, hw


def gemv(build: Path, cpu: int, rows: int, cols: int) -> dict:
    out = records(sh([str(build / "gemv"), "--kernel", "avx512-bf16", "--rows", str(rows),
                      "--cols", str(cols), "--batch", "1", "--cpus", str(cpu), "--steps", "20000",
                      "--warmup", "500"]))
    return {r["name"]: r["value"] for r in out[1:]}


def summary(values: list[float]) -> dict:
    return {"best": max(values), "median": statistics.median(values), "min": min(values),
            "all": values}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", type=int, default=0, help="core for both tools (likwid's S0 first)")
    ap.add_argument("--reps", type=int, default=5, help="alternating repetitions per point")
    ap.add_argument("--cc", default="gcc", help="compiler for native/ (gcc or clang-16)")
    ap.add_argument("--out", type=Path, help="write raw results as JSON here")
    ap.add_argument("--rt-priority", type=int, default=10,
                    help="run both tools under chrt -f PRIO (0 = normal scheduling)")
    args = ap.parse_args()
    if args.rt_priority:
        RT[:] = ["chrt", "-f", str(args.rt_priority)]
    if not shutil.which("likwid-bench"):
        sys.exit("native_vs_likwid: likwid-bench not found (apt-get install likwid)")
    build = REPO / "native" / "build" / f"bench-{Path(args.cc).name}"
    sh(["make", "-C", str(REPO / "native"), f"BUILD={build}", f"CC={args.cc}", "-j2"], rt=False)
    meta = records(sh([str(build / "ladder"), "--kernel", "avx512-read", "--size", "16K",
                       "--cpus", str(args.cpu), "--seconds", "0.01", "--reps", "1"]))[0]
    cache = caches(args.cpu)
    tiers = {"L1": cache["L1"] // 2, "L2": cache["L2"] // 2, "L3": cache["L3"] // 4,
             "DRAM": cache["L3"] * 8}

    result: dict = {"cpu": args.cpu, "reps": args.reps, "rt_priority": args.rt_priority,
                    "sample_s": SAMPLE_S, "compiler": meta["compiler"],
                    "flags": meta["flags"], "machine": machine(args.cpu, cache),
                    "tiers": {}, "gemv": {}, "thp": {}}
    # 1. ladder vs likwid, interleaved, order alternating per repetition
    for tier, size in tiers.items():
        ours: list[float] = []
        theirs: list[float] = []
        for rep in range(args.reps):
            order = ("ours", "likwid") if rep % 2 == 0 else ("likwid", "ours")
            for tool in order:
                if tool == "ours":
                    ours.append(ladder(build, args.cpu, size)["gbs"])
                else:
                    gbs, used, hw = likwid(size)
                    if hw != args.cpu:
                        sys.exit(f"native_vs_likwid: likwid ran on hwthread {hw}, not --cpu "
                                 f"{args.cpu}; pass --cpu {hw}")
                    theirs.append(gbs)
        o, t = summary(ours), summary(theirs)
        result["tiers"][tier] = {"bytes": size, "ladder": o, "likwid": t,
                                 "ratio_best": o["best"] / t["best"],
                                 "ratio_median": o["median"] / t["median"]}
    # 2. gemv from an L2-resident slice vs ladder's L2 read on the same core
    cols = 1024
    rows = cache["L2"] // 2 // (cols * 2) // 16 * 16  # half of L2 in bf16 weights, whole tiles
    gemv_bw: list[float] = []
    l2_read: list[float] = []
    for _ in range(args.reps):
        gemv_bw.append(gemv(build, args.cpu, rows, cols)["weight_bw"])
        l2_read.append(ladder(build, args.cpu, rows * cols * 2)["gbs"])
    g, r = summary(gemv_bw), summary(l2_read)
    result["gemv"] = {"rows": rows, "cols": cols, "weight_bytes": rows * cols * 2,
                      "gemv_weight_bw": g, "ladder_l2_read": r,
                      "ratio_median": g["median"] / r["median"]}
    # 3. 4k vs THP at the L2 size, half of it and twice it
    for size in (cache["L2"] // 2, cache["L2"], cache["L2"] * 2):
        runs: dict[str, list[dict]] = {"4k": [], "thp": []}
        for rep in range(args.reps):
            for page in (("4k", "thp") if rep % 2 == 0 else ("thp", "4k")):
                runs[page].append(ladder(build, args.cpu, size, page=page))
        entry = {}
        for page, rs in runs.items():
            entry[page] = summary([x["gbs"] for x in rs])
            entry[page]["page_size"] = min(x["page_size"] for x in rs)
        entry["ratio_median_thp_over_4k"] = entry["thp"]["median"] / entry["4k"]["median"]
        entry["noise_4k"] = (entry["4k"]["best"] - entry["4k"]["min"]) / entry["4k"]["median"]
        result["thp"][str(size)] = entry

    print(f"# ladder vs likwid-bench on cpu {args.cpu} ({meta['compiler']}, {meta['flags']}), "
          f"{args.reps} alternating reps of ~{SAMPLE_S} s, SCHED_FIFO {args.rt_priority or 'off'}, "
          f"GB/s = 1e9 B/s\n\nMachine: {result['machine']}\n")
    print("| tier | bytes | ladder best | ladder median | likwid best | likwid median "
          "| ratio best | ratio median |")
    print("|---|---|---|---|---|---|---|---|")
    for tier, e in result["tiers"].items():
        print(f"| {tier} | {e['bytes']} | {e['ladder']['best']:.1f} | {e['ladder']['median']:.1f} "
              f"| {e['likwid']['best']:.1f} | {e['likwid']['median']:.1f} "
              f"| {e['ratio_best']:.3f} | {e['ratio_median']:.3f} |")
    e = result["gemv"]
    print(f"\ngemv avx512-bf16 {rows}x{cols} batch 1 weight GB/s median "
          f"{e['gemv_weight_bw']['median']:.1f} (best {e['gemv_weight_bw']['best']:.1f}) vs "
          f"ladder L2 read {e['ladder_l2_read']['median']:.1f}: ratio {e['ratio_median']:.3f}\n")
    print("| bytes per core | 4k median (page) | thp median (page) | thp/4k | 4k spread |")
    print("|---|---|---|---|---|")
    for size, e in result["thp"].items():
        print(f"| {size} | {e['4k']['median']:.1f} ({e['4k']['page_size']}) "
              f"| {e['thp']['median']:.1f} ({e['thp']['page_size']}) "
              f"| {e['ratio_median_thp_over_4k']:.3f} | {e['noise_4k']:.3f} |")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
