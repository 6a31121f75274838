"""native/driver/pseudo_lock_sram: the module builds with Kbuild against the distribution's
kernel headers with W=1 and no warnings, and its pure parts (way layout from CPUID 0x10,
parameter validation, lockable capacity, budget) and ABI header are checked in userspace,
compiled from the same headers. No test loads the module: this machine cannot."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DRIVER = REPO / "native" / "driver" / "pseudo_lock_sram"
COMPILERS = {"gcc": "gcc", "clang": "clang-16"}
MIB = 1 << 20
# Xeon 6975P-C (the published host): CPUID 0x10 sub-leaf 0 EBX bits 1-2 (L3 and L2 CAT), 16-bit
# CBMs (EAX = 15), I/O-shared L3 ways 14-15; 2 MiB L2 per core, 480 MiB L3, 3 SNC nodes
GNR = {
    "res_ebx": 0x6,
    "l3_eax": 15,
    "l3_ebx": 0xC000,
    "l2_eax": 15,
    "l2_bytes": 2 * MIB,
    "l3_bytes": 480 * MIB,
    "nodes": 3,
}


def kernel_headers() -> Path | None:
    """The newest Debian linux-headers-*-amd64 tree (apt linux-headers-amd64)."""
    trees = sorted(Path("/usr/src").glob("linux-headers-*-amd64"))
    return trees[-1] if trees else None


@pytest.fixture(scope="module", params=sorted(COMPILERS))
def layout_check(request, tmp_path_factory) -> Path:
    cc = COMPILERS[request.param]
    if shutil.which(cc) is None:
        pytest.fail(f"{cc} is not installed (scripts/system-deps.sh installs it)")
    out = tmp_path_factory.mktemp(f"driver-{request.param}") / "layout_check"
    proc = subprocess.run(
        [
            cc,
            "-std=c11",
            "-O2",
            "-Wall",
            "-Wextra",
            "-Werror",
            f"-I{DRIVER}",
            str(DRIVER / "layout_check.c"),
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return out


def layout(
    binary: Path, l2_ways: int, l3_ways: int, l3_io: int = 0, *budget: int, **cpuid: int
) -> dict:
    v = {**GNR, **cpuid}
    args = [
        str(a)
        for a in (
            v["res_ebx"],
            v["l3_eax"],
            v["l3_ebx"],
            v["l2_eax"],
            l2_ways,
            l3_ways,
            l3_io,
            v["l2_bytes"],
            v["l3_bytes"],
            v["nodes"],
            *budget,
        )
    ]
    proc = subprocess.run(
        [str(binary), "budget" if budget else "layout", *args],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def ioc(direction: int, nr: int, size: int) -> int:
    """asm-generic _IOC: dir << 30 | size << 16 | type << 8 | nr (type 'P')"""
    return direction << 30 | size << 16 | ord("P") << 8 | nr


def test_abi_sizes_and_ioctl_numbers(layout_check):
    """§6.5: CAPS 10 _IOR, LOCK 11 _IOWR, UNLOCK 12 _IOW u32, MEASURE 13 _IOWR, RELOAD 14 _IOW
    u32, WORKER 15 _IOW; struct sizes from the field lists (u32 x6 + u64 x2; u64 x2 + s32 + u32
    x3; u32 x2 + u64 x8; s32 + u32)."""
    abi = json.loads(
        subprocess.run(
            [str(layout_check), "abi"], capture_output=True, text=True, check=True
        ).stdout
    )
    sizes = {
        "pl_caps": 6 * 4 + 2 * 8,
        "pl_lock_req": 2 * 8 + 4 * 4,
        "pl_measure": 2 * 4 + 8 * 8,
        "pl_clos_req": 8,
    }
    assert abi["version"] == 3 and abi["sizes"] == sizes
    read, write = 2, 1
    assert abi["ioctls"] == {
        "CAPS": ioc(read, 10, sizes["pl_caps"]),
        "LOCK": ioc(read | write, 11, sizes["pl_lock_req"]),
        "UNLOCK": ioc(write, 12, 4),
        "MEASURE": ioc(read | write, 13, sizes["pl_measure"]),
        "RELOAD": ioc(write, 14, 4),
        "WORKER": ioc(write, 15, sizes["pl_clos_req"]),
    }


@pytest.mark.parametrize(("ways", "published"), [(12, 1_376_256), (14, 1_605_632)])
def test_lockable_l2_matches_the_published_capacity(layout_check, ways, published):
    """§5.4: 12 ways (0xfff) 1,376,256 B/core, 14 ways (0x3fff) 1,605,632 B/core."""
    got = layout(layout_check, ways, 0)
    assert got["error"] == "ok"
    assert got["l2_lock"] == (1 << ways) - 1 and got["l2_norm"] == 0xFFFF & ~((1 << ways) - 1)
    assert got["l2_lock_bytes_per_core"] == published
    assert got["l3_lock"] == 0 and got["l3_norm"] == 0xFFFF  # l3_ways=0: L3 untouched


def test_l3_capacity_and_class_of_service_masks(layout_check):
    """§6.3/§6.4: 14 L3 ways = 122.5 MiB per SNC node of three; CLOS 0 normal/normal, 1 L2
    fill (L2 locked), 2 L3 fill and 3 worker (L3 locked, L2 normal)."""
    got = layout(layout_check, 14, 14)
    assert got["l3_lock_bytes_per_node"] == int(122.5 * MIB)
    lock, norm = 0x3FFF, 0xC000
    assert got["clos_l2"] == [norm, lock, norm, norm]
    assert got["clos_l3"] == [norm, norm, lock, lock]
    assert got["l3_overlaps_io"] is False


@pytest.mark.parametrize(
    ("l2_ways", "l3_ways", "io", "error"),
    [
        (16, 0, 0, "l2_ways"),
        (-1, 0, 0, "l2_ways"),
        (12, 16, 0, "l3_ways"),
        (12, 15, 0, "l3_io"),
        (12, 0, 2, "io_flag"),
    ],
)
def test_bad_parameters_are_rejected_with_einval(layout_check, l2_ways, l3_ways, io, error):
    got = layout(layout_check, l2_ways, l3_ways, io)
    assert got["error"] == error and got["errno"] == -22


def test_io_ways_overlap_needs_the_flag(layout_check):
    """l3_ways=15 reaches way 14 (I/O-shared): refused, accepted with l3_io_ways=1."""
    assert layout(layout_check, 12, 15, 0)["error"] == "l3_io"
    got = layout(layout_check, 12, 15, 1)
    assert got["error"] == "ok" and got["l3_overlaps_io"] is True


def test_cpu_without_l2_cat_is_enodev(layout_check):
    got = layout(layout_check, 12, 0, res_ebx=0x2)  # L3 CAT only
    assert got["error"] == "no_cat" and got["errno"] == -19


def test_masks_follow_the_cbm_length_cpuid_reports(layout_check):
    """A 12-bit L2 CBM (EAX = 11) and 11-bit L3: masks and capacity scale with it."""
    got = layout(
        layout_check,
        8,
        4,
        l2_eax=11,
        l3_eax=10,
        l3_ebx=0x600,
        l2_bytes=MIB + MIB // 4,
        l3_bytes=60 * MIB,
        nodes=1,
    )
    assert got["l2_full"] == 0xFFF and got["l3_full"] == 0x7FF and got["l3_shared"] == 0x600
    assert got["l2_lock_bytes_per_core"] == (MIB + MIB // 4) // 12 * 8 * 7 // 8
    assert layout(layout_check, 12, 4, l2_eax=11)["error"] == "l2_ways"


@pytest.mark.parametrize(
    ("level", "used", "length", "want"),
    [
        (2, 0, 1_605_632, 0),
        (2, 0, 1_605_633, -28),
        (2, 1_000_000, 700_000, -28),
        (3, 0, int(122.5 * MIB), 0),
        (3, 4096, int(122.5 * MIB), -28),
    ],
)
def test_budget_is_enospc_past_the_lockable_bytes(layout_check, level, used, length, want):
    assert layout(layout_check, 14, 14, 0, level, used, length)["budget"] == want


def test_budget_without_reserved_ways_is_eopnotsupp(layout_check):
    assert layout(layout_check, 12, 0, 0, 3, 0, 4096)["budget"] == -95


def test_module_builds_against_distribution_headers_without_warnings(tmp_path):
    """Kbuild with W=1 against /usr/src/linux-headers-*-amd64 (Debian linux-headers-amd64,
    scripts/system-deps.sh): a .ko, no warning, GPL licence, the three parameters."""
    kdir = kernel_headers()
    if kdir is None:
        pytest.skip("no /usr/src/linux-headers-*-amd64 (apt-get install linux-headers-amd64)")
    build = tmp_path / "pseudo_lock_sram"
    shutil.copytree(DRIVER, build)
    proc = subprocess.run(
        ["make", "-C", str(build), f"KDIR={kdir}", "W=1"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    print(f"built against {kdir}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "warning" not in (proc.stdout + proc.stderr).lower(), proc.stderr[-3000:]
    ko = build / "pseudo_lock_sram.ko"
    info = subprocess.run(
        ["objcopy", "-O", "binary", "--only-section=.modinfo", str(ko), "/dev/stdout"],
        capture_output=True,
        timeout=60,
    ).stdout
    fields = [f.decode() for f in info.split(b"\0") if f]
    assert "license=GPL" in fields
    assert {f.split(":")[0] for f in fields if f.startswith("parmtype=")} == {
        "parmtype=l2_ways",
        "parmtype=l3_ways",
        "parmtype=l3_io_ways",
    }


CHECKPATCH = REPO / ".cache" / "checkpatch"  # scripts/fetch-checkpatch.sh (make test runs it)
KERNEL_SOURCES = ("pseudo_lock_sram.c", "pl_abi.h", "pl_layout.h")


def checkpatch(*files: Path) -> subprocess.CompletedProcess:
    tool = CHECKPATCH / "checkpatch.pl"
    if not tool.is_file():
        why = (
            (CHECKPATCH / "unavailable").read_text().strip()
            if (CHECKPATCH / "unavailable").is_file()
            else "not fetched"
        )
        pytest.skip(f"checkpatch.pl not available: {why} (bash scripts/fetch-checkpatch.sh)")
    # run outside the checkout: in a git tree checkpatch caches its CamelCase list there
    return subprocess.run(
        ["perl", str(tool), "--no-tree", "--show-types", "-f", *map(str, files)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tempfile.gettempdir(),
    )


def test_module_sources_pass_the_kernels_checkpatch():
    """The kernel's own style checker (scripts/checkpatch.pl of the distribution's kernel
    source) on the module and its headers: no error, no warning. (--strict adds 5 checks that
    stay: user-visible format strings over 100 columns, which kernel style does not split, and
    _Static_assert / uint32_t in the headers userspace compiles too.)"""
    proc = checkpatch(*(DRIVER / f for f in KERNEL_SOURCES))
    print(proc.stdout)
    totals = [ln for ln in proc.stdout.splitlines() if ln.startswith("total:")]
    assert len(totals) == len(KERNEL_SOURCES), proc.stdout + proc.stderr
    assert all(ln.startswith("total: 0 errors, 0 warnings") for ln in totals), proc.stdout


def test_checkpatch_flags_a_planted_style_error(tmp_path):
    """The same run fails on a copy with a space-indented line and a bare mb()."""
    bad = tmp_path / "pseudo_lock_sram.c"
    text = (DRIVER / "pseudo_lock_sram.c").read_text()
    bad.write_text(
        text.replace("\tlocal_irq_save(flags);", "        mb();\n\tlocal_irq_save(flags);", 1)
    )
    out = checkpatch(bad).stdout
    assert "CODE_INDENT" in out and "MEMORY_BARRIER" in out, out


RESCTRL_PATCH = (
    Path(__file__).resolve().parents[1] / "native/driver/resctrl-pseudo-lock-xeon-6.1.patch"
)
XEON_MODELS = ("SAPPHIRERAPIDS_X", "EMERALDRAPIDS_X", "GRANITERAPIDS_X", "GRANITERAPIDS_D")


def test_resctrl_patch_is_well_formed_and_adds_the_xeon_models(tmp_path):
    """The kernel patch for users who rebuild (docs/residency.md: checked against Debian's
    linux-source-6.1, which CI does not download): one file, every model in all three switches
    (prefetch bits, L2 and L3 residency events), and hunks GNU patch accepts: each hunk's
    original side, laid end to end, is a file the patch must apply to (bad line counts fail)."""
    if shutil.which("patch") is None:
        pytest.skip("GNU patch is not installed")
    text = RESCTRL_PATCH.read_text()
    files = [ln.split()[1] for ln in text.splitlines() if ln.startswith("+++ ")]
    assert files == ["b/arch/x86/kernel/cpu/resctrl/pseudo_lock.c"]
    for model in XEON_MODELS:
        assert text.count(f"+\tcase INTEL_FAM6_{model}:") == 3, model
    diff = text.split("\n--- a/", 1)[1]  # the header above it is prose
    assert "kvzalloc" not in diff  # regions stay physically contiguous kmalloc memory
    original = [ln[1:] for ln in diff.splitlines()[2:] if ln[:1] in (" ", "-")]
    target = tmp_path / "arch/x86/kernel/cpu/resctrl/pseudo_lock.c"
    target.parent.mkdir(parents=True)
    target.write_text("\n".join(original) + "\n")
    proc = subprocess.run(
        ["patch", "-p1", "--dry-run", "-F0", "-i", str(RESCTRL_PATCH)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and "FAILED" not in proc.stdout, proc.stdout + proc.stderr
