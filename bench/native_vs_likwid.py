"""Side by side on one pinned core: `ladder` read kernel vs the matching `likwid-bench` load test.

The pair follows the CPU: `ladder avx512-read` vs `likwid-bench -t load_avx512` where AVX-512 F/BW
run, else `ladder avx2-read` vs `load_avx` (the script prints which). Runs both tools interleaved
(alternating order every repetition) at working sets in L1, L2, L3 and DRAM (half of L1d, half
of L2, a quarter of L3, and 8 x L3 capped so that every tool accepts it: see plan_sizes(); the
chosen sizes and why are printed), plus `gemv avx512-bf16` from an L2-resident slice (half of
L2) against ladder's read of the same bytes where the CPU has AVX-512 BF16, and ladder's
4k-vs-THP comparison at half, one and two times the L2 size. Prints a markdown report with the
machine it ran on (the figures in docs/benchmarks.md come from it) and optionally writes the raw
numbers as JSON. `--plan-only` prints the kernels and sizes it would use and exits.

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
SYSFS_CPU = Path("/sys/devices/system/cpu")
MIB = 1 << 20
# likwid-bench <= 5.2.2 reads the number of `-w S0:<n>B:1` with str2int(), which returns an int
# and refuses a negative one ("Stream size cannot be read"): n <= 2^31 - 1. Measured with the
# installed 5.2.2: 2147483647B runs, 2147483648B is refused (later likwid parses 64 bits).
LIKWID_MAX_BYTES = (1 << 31) - 1
SET_ALIGN = 2 * MIB  # DRAM sets in whole 2 MiB pages (THP-sized; every kernel block divides it)
MEM_FRACTION = 2  # a DRAM set uses at most 1/2 of MemAvailable (each tool allocates it in turn)
# (CPU flags needed, ladder kernel, likwid-bench test): the first pair the CPU can run is used
KERNEL_PAIRS = (
    (("avx512f", "avx512bw"), "avx512-read", "load_avx512"),
    (("avx2",), "avx2-read", "load_avx"),
)


def die(message: str, code: int = 1) -> None:
    """One line, no traceback: 2 for what the user can fix, 1 for a tool that failed."""
    print(f"native_vs_likwid: error: {message}", file=sys.stderr)
    raise SystemExit(code)


def sh(argv: list[str], rt: bool = True) -> str:
    argv = (RT if rt else []) + argv
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT)
    if proc.returncode != 0:
        die(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()[-300:]}")
    return proc.stdout


def live_cache_files(cpu: int) -> dict[str, str]:
    """cpu's sysfs cache attributes, path -> value (the format of a recorded cache.txt)."""
    files: dict[str, str] = {}
    for attr in sorted((SYSFS_CPU / f"cpu{cpu}" / "cache").glob("index*/*")):
        if attr.is_file() and attr.name in ("level", "type", "size"):
            files[str(attr)] = attr.read_text().strip()
    return files


def parse_cache_listing(text: str) -> dict[str, str]:
    """A recorded listing, one `<sysfs path> <value>` per line (shared/recorded/*/cache.txt)."""
    files: dict[str, str] = {}
    for line in text.splitlines():
        path, _, value = line.strip().partition(" ")
        if path:
            files[path] = value.strip()
    return files


def caches(files: dict[str, str], cpu: int) -> dict[str, int]:
    """Data/unified cache sizes in bytes seen by `cpu`, keyed L1, L2, L3."""
    out: dict[str, int] = {}
    base = f"{SYSFS_CPU}/cpu{cpu}/cache/"
    for index in sorted({p[len(base) :].split("/")[0] for p in files if p.startswith(base)}):
        attr = {k: files.get(f"{base}{index}/{k}", "") for k in ("level", "type", "size")}
        if attr["type"] == "Instruction" or not attr["level"]:
            continue
        size = attr["size"]
        scale = {"K": 1 << 10, "M": 1 << 20}.get(size[-1:], 1)
        out[f"L{attr['level']}"] = int(size.rstrip("KM")) * scale
    missing = {"L1", "L2", "L3"} - out.keys()
    if missing:
        die(f"{base} lacks {sorted(missing)} (--cpu {cpu}: is it online?)", 2)
    return out


def cpu_flags(cpuinfo: str) -> set[str]:
    """The first `flags` line of /proc/cpuinfo (or lscpu's `Flags:` line)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() == "flags":
            return set(value.split())
    return set()


def pick_kernels(flags: set[str]) -> dict[str, str]:
    """The ladder kernel and likwid-bench test that run on this CPU, and why."""
    passed: list[str] = []
    for need, ladder_kernel, likwid_test in KERNEL_PAIRS:
        if set(need) <= flags:
            why = "; ".join([*passed, f"CPU has {'+'.join(need)}"])
            return {"ladder": ladder_kernel, "likwid": likwid_test, "why": why}
        passed.append(f"not {ladder_kernel} (CPU lacks {'+'.join(sorted(set(need) - flags))})")
    die("CPU has neither AVX-512 F/BW nor AVX2: no ladder read kernel runs here", 2)
    raise AssertionError  # unreachable: die() raises


def floor_to(value: int, unit: int) -> int:
    return value // unit * unit


def plan_sizes(cache: dict[str, int], mem_available: int | None) -> dict[str, dict]:
    """Working set per tier: {tier: {"bytes", "why"}}. DRAM wants 8 x L3, capped at what
    likwid-bench parses and at 1/MEM_FRACTION of MemAvailable; the reason names the binding
    cap and whether the set is still >= 4 x L3 (the least that keeps it mostly out of L3)."""
    l3 = cache["L3"]
    plan = {
        "L1": {"bytes": cache["L1"] // 2, "why": "half of L1d"},
        "L2": {"bytes": cache["L2"] // 2, "why": "half of L2"},
        "L3": {"bytes": l3 // 4, "why": "a quarter of L3"},
    }
    want = 8 * l3
    caps = {"likwid-bench's size parser (2^31 - 1 bytes)": floor_to(LIKWID_MAX_BYTES, SET_ALIGN)}
    if mem_available is not None:
        caps[f"1/{MEM_FRACTION} of MemAvailable ({mem_available} B)"] = floor_to(
            mem_available // MEM_FRACTION, SET_ALIGN
        )
    name, cap = min(caps.items(), key=lambda kv: kv[1])
    if want <= cap:
        plan["DRAM"] = {"bytes": want, "why": "8 x L3"}
    else:
        ratio = cap / l3
        why = f"8 x L3 = {want} B is over {name}: capped at {cap} B = {ratio:.2f} x L3"
        why += " (>= 4 x L3)" if cap >= 4 * l3 else " (below 4 x L3: partly L3-resident)"
        plan["DRAM"] = {"bytes": cap, "why": why}
    for tier, entry in plan.items():
        if entry["bytes"] <= 0 or entry["bytes"] > LIKWID_MAX_BYTES:
            die(f"{tier} working set {entry['bytes']} B is not one likwid-bench accepts", 2)
    return plan


def mem_available() -> int | None:
    m = re.search(r"^MemAvailable:\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.M)
    return int(m.group(1)) * 1024 if m else None


def machine(cpu: int, cache: dict[str, int]) -> str:
    """One line naming the CPU (vendor family/model), its caches, kernel and likwid version."""
    info: dict[str, str] = {}
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        key, _, value = line.partition(":")
        info.setdefault(key.strip(), value.strip())
    sizes = ", ".join(f"{k} {v >> 10} KiB" for k, v in sorted(cache.items()))
    version = sh(["likwid-bench", "-v"], rt=False).strip().split()[-1]
    return (
        f"{info.get('model name', '?')} (family {info.get('cpu family', '?')} model "
        f"{info.get('model', '?')}), {len(online())} online CPUs, cpu {cpu}: {sizes}; "
        f"kernel {platform.release()}; likwid-bench {version}"
    )


def online() -> list[int]:
    cpus: list[int] = []
    for part in (SYSFS_CPU / "online").read_text().strip().split(","):
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def records(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def ladder(
    build: Path, kernel: str, cpu: int, size: int, page: str = "4k", seconds: float = SAMPLE_S
) -> dict:
    out = records(
        sh(
            [
                str(build / "ladder"),
                "--kernel",
                kernel,
                "--size",
                str(size),
                "--cpus",
                str(cpu),
                "--seconds",
                str(seconds),
                "--reps",
                "1",
                "--page",
                page,
            ]
        )
    )
    bw = next(r["value"] for r in out if r.get("name") == "bw_total" and r.get("stat") == "rep")
    return {"gbs": bw, "page_size": out[0]["page_size"], "thp_fraction": out[0]["thp_fraction"]}


ITERS: dict[tuple[str, int], int] = {}


def likwid(test: str, size: int) -> tuple[float, int, int]:
    """GB/s (1e9 B/s), bytes actually used, hwthread it ran on; ~SAMPLE_S seconds per run."""
    if (test, size) not in ITERS:  # calibrate the iteration count once per size
        text = sh(["likwid-bench", "-t", test, "-w", f"S0:{size}B:1", "-i", "10"])
        secs = float(re.search(r"^Time:\s+([\d.e+-]+)", text, re.M).group(1))
        ITERS[test, size] = max(10, int(10 * SAMPLE_S / max(secs, 1e-6)))
    text = sh(["likwid-bench", "-t", test, "-w", f"S0:{size}B:1", "-i", str(ITERS[test, size])])
    mbs = float(re.search(r"^MByte/s:\s+([\d.]+)", text, re.M).group(1))
    used = int(re.search(r"^Size \(Byte\):\s+(\d+)", text, re.M).group(1))
    hw = int(re.search(r"running on hwthread (\d+)", text).group(1))
    return mbs / 1000.0, used, hw


def gemv(build: Path, cpu: int, rows: int, cols: int) -> dict:
    out = records(
        sh(
            [
                str(build / "gemv"),
                "--kernel",
                "avx512-bf16",
                "--rows",
                str(rows),
                "--cols",
                str(cols),
                "--batch",
                "1",
                "--cpus",
                str(cpu),
                "--steps",
                "20000",
                "--warmup",
                "500",
            ]
        )
    )
    return {r["name"]: r["value"] for r in out[1:]}


def summary(values: list[float]) -> dict:
    return {
        "best": max(values),
        "median": statistics.median(values),
        "min": min(values),
        "all": values,
    }


def print_plan(kernels: dict[str, str], plan: dict[str, dict], gemv_why: str) -> None:
    print(
        f"Kernels: ladder {kernels['ladder']} vs likwid-bench {kernels['likwid']} "
        f"({kernels['why']}); gemv: {gemv_why}"
    )
    for tier, entry in plan.items():
        print(f"Size {tier}: {entry['bytes']} B ({entry['why']})")
    print()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", type=int, default=0, help="core for both tools (likwid's S0 first)")
    ap.add_argument("--reps", type=int, default=5, help="alternating repetitions per point")
    ap.add_argument("--cc", default="gcc", help="compiler for native/ (gcc or clang-16)")
    ap.add_argument("--out", type=Path, help="write raw results as JSON here")
    ap.add_argument(
        "--rt-priority",
        type=int,
        default=10,
        help="run both tools under chrt -f PRIO (0 = normal scheduling)",
    )
    ap.add_argument(
        "--plan-only",
        action="store_true",
        help="print the kernels and working sets it would use, run nothing",
    )
    args = ap.parse_args()
    if args.reps < 1:
        die(f"--reps {args.reps}: expected at least 1", 2)
    flags = cpu_flags(Path("/proc/cpuinfo").read_text())
    kernels = pick_kernels(flags)
    cache = caches(live_cache_files(args.cpu), args.cpu)
    plan = plan_sizes(cache, mem_available())
    has_bf16 = {"avx512f", "avx512bw", "avx512_bf16"} <= flags
    gemv_why = (
        "avx512-bf16 from half of L2"
        if has_bf16
        else "skipped: CPU lacks AVX-512 BF16 (gemv has no AVX2 kernel)"
    )
    if args.plan_only:
        print_plan(kernels, plan, gemv_why)
        return 0
    if args.rt_priority:
        RT[:] = ["chrt", "-f", str(args.rt_priority)]
    if not shutil.which("likwid-bench"):
        die("likwid-bench not found (apt-get install likwid)", 2)
    build = REPO / "native" / "build" / f"bench-{Path(args.cc).name}"
    sh(["make", "-C", str(REPO / "native"), f"BUILD={build}", f"CC={args.cc}", "-j2"], rt=False)
    kernel = kernels["ladder"]
    meta = records(
        sh(
            [
                str(build / "ladder"),
                "--kernel",
                kernel,
                "--size",
                "16K",
                "--cpus",
                str(args.cpu),
                "--seconds",
                "0.01",
                "--reps",
                "1",
            ]
        )
    )[0]
    print_plan(kernels, plan, gemv_why)

    result: dict = {
        "cpu": args.cpu,
        "reps": args.reps,
        "rt_priority": args.rt_priority,
        "sample_s": SAMPLE_S,
        "compiler": meta["compiler"],
        "flags": meta["flags"],
        "machine": machine(args.cpu, cache),
        "kernels": kernels,
        "plan": plan,
        "tiers": {},
        "gemv": {},
        "thp": {},
    }
    # 1. ladder vs likwid, interleaved, order alternating per repetition
    for tier, entry in plan.items():
        size = entry["bytes"]
        ours: list[float] = []
        theirs: list[float] = []
        used = size
        for rep in range(args.reps):
            order = ("ours", "likwid") if rep % 2 == 0 else ("likwid", "ours")
            for tool in order:
                if tool == "ours":
                    ours.append(ladder(build, kernel, args.cpu, size)["gbs"])
                else:
                    gbs, used, hw = likwid(kernels["likwid"], size)
                    if hw != args.cpu:
                        die(
                            f"likwid ran on hwthread {hw}, not --cpu {args.cpu}; pass --cpu {hw}", 2
                        )
                    theirs.append(gbs)
        o, t = summary(ours), summary(theirs)
        result["tiers"][tier] = {
            "bytes": size,
            "likwid_bytes": used,
            "ladder": o,
            "likwid": t,
            "ratio_best": o["best"] / t["best"],
            "ratio_median": o["median"] / t["median"],
        }
    # 2. gemv from an L2-resident slice vs ladder's L2 read on the same core (AVX-512 BF16 only)
    cols = 1024
    rows = cache["L2"] // 2 // (cols * 2) // 16 * 16  # half of L2 in bf16 weights, whole tiles
    if has_bf16:
        gemv_bw: list[float] = []
        l2_read: list[float] = []
        for _ in range(args.reps):
            gemv_bw.append(gemv(build, args.cpu, rows, cols)["weight_bw"])
            l2_read.append(ladder(build, kernel, args.cpu, rows * cols * 2)["gbs"])
        g, r = summary(gemv_bw), summary(l2_read)
        result["gemv"] = {
            "rows": rows,
            "cols": cols,
            "weight_bytes": rows * cols * 2,
            "gemv_weight_bw": g,
            "ladder_l2_read": r,
            "ratio_median": g["median"] / r["median"],
        }
    # 3. 4k vs THP at the L2 size, half of it and twice it
    for size in (cache["L2"] // 2, cache["L2"], cache["L2"] * 2):
        runs: dict[str, list[dict]] = {"4k": [], "thp": []}
        for rep in range(args.reps):
            for page in ("4k", "thp") if rep % 2 == 0 else ("thp", "4k"):
                runs[page].append(ladder(build, kernel, args.cpu, size, page=page))
        entry = {}
        for page, rs in runs.items():
            entry[page] = summary([x["gbs"] for x in rs])
            entry[page]["page_size"] = min(x["page_size"] for x in rs)
        entry["ratio_median_thp_over_4k"] = entry["thp"]["median"] / entry["4k"]["median"]
        entry["noise_4k"] = (entry["4k"]["best"] - entry["4k"]["min"]) / entry["4k"]["median"]
        result["thp"][str(size)] = entry

    print(
        f"# ladder {kernel} vs likwid-bench {kernels['likwid']} on cpu {args.cpu} "
        f"({meta['compiler']}, {meta['flags']}), {args.reps} alternating reps of ~{SAMPLE_S} s, "
        f"SCHED_FIFO {args.rt_priority or 'off'}, GB/s = 1e9 B/s\n\n"
        f"Machine: {result['machine']}\n"
    )
    print(
        "| tier | bytes | ladder best | ladder median | likwid best | likwid median "
        "| ratio best | ratio median |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for tier, e in result["tiers"].items():
        print(
            f"| {tier} | {e['bytes']} | {e['ladder']['best']:.1f} | {e['ladder']['median']:.1f} "
            f"| {e['likwid']['best']:.1f} | {e['likwid']['median']:.1f} "
            f"| {e['ratio_best']:.3f} | {e['ratio_median']:.3f} |"
        )
    if result["gemv"]:
        e = result["gemv"]
        print(
            f"\ngemv avx512-bf16 {rows}x{cols} batch 1 weight GB/s median "
            f"{e['gemv_weight_bw']['median']:.1f} (best {e['gemv_weight_bw']['best']:.1f}) vs "
            f"ladder L2 read {e['ladder_l2_read']['median']:.1f}: ratio "
            f"{e['ratio_median']:.3f}\n"
        )
    else:
        print(f"\ngemv: {gemv_why}\n")
    print("| bytes per core | 4k median (page) | thp median (page) | thp/4k | 4k spread |")
    print("|---|---|---|---|---|")
    for size, e in result["thp"].items():
        print(
            f"| {size} | {e['4k']['median']:.1f} ({e['4k']['page_size']}) "
            f"| {e['thp']['median']:.1f} ({e['thp']['page_size']}) "
            f"| {e['ratio_median_thp_over_4k']:.3f} | {e['noise_4k']:.3f} |"
        )
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
