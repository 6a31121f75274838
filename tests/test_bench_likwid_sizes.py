"""bench/native_vs_likwid.py's choices, without running the benchmark: the kernel pair for a CPU's
flags and working sets every tool accepts, on the recorded Granite Rapids guest's cache geometry
(480 MiB L3, where 8 x L3 was refused by likwid-bench) and on faked ones. The size limit itself
is checked against the installed likwid-bench."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench" / "native_vs_likwid.py"
GNR = REPO / "tests" / "published" / "recorded" / "gnr-kvm-2vcpu"  # copy of shared/recorded/
MIB = 1 << 20


def _load():
    spec = importlib.util.spec_from_file_location("native_vs_likwid", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


nvl = _load()


def fake_listing(cpu: int, sizes: dict[str, str]) -> str:
    """A cache.txt-format listing: L1d, L1i, L2, L3 with the given sizes (keys L1, L2, L3)."""
    base = f"/sys/devices/system/cpu/cpu{cpu}/cache"
    rows = [
        ("index0", "1", "Data", sizes["L1"]),
        ("index1", "1", "Instruction", "64K"),
        ("index2", "2", "Unified", sizes["L2"]),
        ("index3", "3", "Unified", sizes["L3"]),
    ]
    return "\n".join(
        f"{base}/{i}/{attr} {value}"
        for i, level, kind, size in rows
        for attr, value in (("level", level), ("type", kind), ("size", size))
    )


def test_recorded_granite_rapids_guest_gets_sizes_likwid_accepts():
    """The guest of the issue: L1d 48 KiB, L2 2 MiB, L3 480 MiB, AVX-512. 8 x L3 = 3.75 GiB is
    over likwid-bench 5.2.2's limit, so DRAM is capped at 2,046 MiB = 4.26 x L3 (>= 4 x L3)."""
    cache = nvl.caches(nvl.parse_cache_listing((GNR / "cache.txt").read_text()), 0)
    assert cache == {"L1": 48 << 10, "L2": 2 * MIB, "L3": 480 * MIB}
    flags = nvl.cpu_flags((GNR / "lscpu.txt").read_text())
    facts = json.loads((GNR / "host_facts.json").read_text())
    assert flags == set(facts["cpuinfo"]["flags"].split())
    kernels = nvl.pick_kernels(flags)
    assert (kernels["ladder"], kernels["likwid"]) == ("avx512-read", "load_avx512")
    plan = nvl.plan_sizes(cache, None)
    assert [plan[t]["bytes"] for t in ("L1", "L2", "L3")] == [24576, 1 * MIB, 120 * MIB]
    dram = plan["DRAM"]
    assert 8 * cache["L3"] > nvl.LIKWID_MAX_BYTES  # the refused 3.75 GiB
    assert dram["bytes"] == 2046 * MIB <= nvl.LIKWID_MAX_BYTES
    assert dram["bytes"] >= 4 * cache["L3"] and dram["bytes"] % (2 * MIB) == 0
    assert "likwid-bench's size parser" in dram["why"] and "4.26 x L3 (>= 4 x L3)" in dram["why"]


@pytest.mark.parametrize(
    "l3,mem,want_bytes,why",
    [
        ("32768K", None, 256 * MIB, "8 x L3"),  # this machine's shape: nothing to cap
        ("491520K", 1 << 30, 512 * MIB, "1/2 of MemAvailable"),  # small guest: memory binds first
        ("1048576K", None, 2046 * MIB, "below 4 x L3"),  # 1 GiB L3: the parser binds, < 4 x L3
    ],
)
def test_faked_geometries(l3, mem, want_bytes, why):
    files = nvl.parse_cache_listing(fake_listing(3, {"L1": "32K", "L2": "512K", "L3": l3}))
    cache = nvl.caches(files, 3)
    plan = nvl.plan_sizes(cache, mem)
    assert plan["DRAM"]["bytes"] == want_bytes and why in plan["DRAM"]["why"], plan["DRAM"]
    assert plan["L1"]["bytes"] == 16384 and plan["L2"]["bytes"] == 256 << 10
    assert all(0 < e["bytes"] <= nvl.LIKWID_MAX_BYTES for e in plan.values())


def test_kernel_pair_follows_the_flags():
    avx2 = nvl.pick_kernels({"sse2", "avx", "avx2", "fma"})
    assert (avx2["ladder"], avx2["likwid"]) == ("avx2-read", "load_avx")
    assert "not avx512-read (CPU lacks avx512bw+avx512f)" in avx2["why"]
    zmm = nvl.pick_kernels({"avx2", "avx512f", "avx512bw"})
    assert zmm["ladder"] == "avx512-read" and zmm["why"] == "CPU has avx512f+avx512bw"


def test_missing_geometry_and_no_vector_isa_are_one_line_errors(capsys):
    broken = "\n".join(
        ln
        for ln in fake_listing(0, {"L1": "32K", "L2": "1M", "L3": "32M"}).splitlines()
        if "index3" not in ln
    )
    with pytest.raises(SystemExit) as exc:
        nvl.caches(nvl.parse_cache_listing(broken), 0)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "lacks ['L3']" in err
    with pytest.raises(SystemExit) as exc:
        nvl.pick_kernels({"sse2"})
    assert exc.value.code == 2 and "neither AVX-512 F/BW nor AVX2" in capsys.readouterr().err


def test_plan_only_on_this_host_names_kernels_and_sizes():
    """Host-dependent (prints its branch): the plan printed for this machine, nothing run."""
    proc = subprocess.run(
        ["python3", str(SCRIPT), "--plan-only", "--cpu", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    print(proc.stdout)
    first = proc.stdout.splitlines()[0]
    assert first.startswith("Kernels: ladder ") and "likwid-bench load_avx" in first
    sizes = [ln for ln in proc.stdout.splitlines() if ln.startswith("Size ")]
    assert [ln.split(":")[0] for ln in sizes] == ["Size L1", "Size L2", "Size L3", "Size DRAM"]


def test_installed_likwid_bench_takes_the_cap_and_refuses_one_more_byte():
    """The limit is the installed tool's: one byte over it is refused at once ("Stream size
    cannot be read"); the largest set plan_sizes can choose runs (scalar `load`, 1 iteration,
    2 GiB touched once: about 6 s here)."""
    if not subprocess.run(["sh", "-c", "command -v likwid-bench"], capture_output=True).stdout:
        pytest.fail("likwid-bench is not installed (scripts/system-deps.sh installs it)")

    def bench(size: int) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["likwid-bench", "-t", "load", "-w", f"S0:{size}B:1", "-i", "1"],
            capture_output=True,
            text=True,
            timeout=120,
        )

    over = bench(nvl.LIKWID_MAX_BYTES + 1)
    assert over.returncode != 0 and "Stream size cannot be read" in over.stderr + over.stdout
    largest = nvl.floor_to(nvl.LIKWID_MAX_BYTES, nvl.SET_ALIGN)
    ok = bench(largest)
    assert ok.returncode == 0, ok.stderr
    assert f"Size (Byte):\t\t{largest}" in ok.stdout
