"""native/layer: the real-layer stage on dumps from `orchestrate layer-dump`, built with gcc and
clang-16. Every run must pass the stage's own gate (rel RMS <= 1.5 x the BF16 reference's error
at every op boundary, out cosine >= 0.99999, first and last step identical; the BF16
reference's error is the larger of the bar and its spread over other valid BF16 realizations,
socketlab.layer.spread); planted errors must fail it naming the boundary; bad input is one line
and exit 2."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import hostclass
from tests.support.layer_run import (
    CPUS,
    SHAPES,
    TIMEOUT,
    layer_dump,
    make,
    orchestrate,
    records,
    run,
)

COMPILERS = {"gcc": "gcc", "clang": "clang-16"}
MODES = ("direct", "rep", "repcld", "repnt", "fid")
SIMDE_H = Path("/usr/include/simde/x86/avx512.h")


cpu_flags = hostclass.proc_cpu_flags  # this machine's /proc/cpuinfo flags


FLAGS = cpu_flags()
HAS_AMX = hostclass.has(FLAGS, "amx")
HAS_AVX512_BF16 = hostclass.has(FLAGS, "avx512_bf16")
HAS_AVX512 = hostclass.has(FLAGS, "avx512")


@pytest.fixture(scope="module", params=sorted(COMPILERS))
def build(request, tmp_path_factory) -> Path:
    cc = COMPILERS[request.param]
    if shutil.which(cc) is None:
        pytest.fail(f"{cc} is not installed (scripts/system-deps.sh installs it)")
    out = tmp_path_factory.mktemp(f"layer-{request.param}")
    # layer_avx512_emu needs SIMDe's headers; without them the emu512 fixture says so
    emu = [f"{out}/layer_avx512_emu"] if SIMDE_H.exists() else []
    proc = make(out, cc, f"{out}/layer", f"{out}/layer_amx_emu", *emu)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "warning" not in proc.stderr.lower(), proc.stderr[-4000:]
    return out


@pytest.fixture(scope="module")
def emu512(build) -> Path:
    """layer_avx512_emu: the AVX-512 path on SIMDe (test-only), in the same build dir."""
    if not SIMDE_H.exists():
        pytest.fail(
            f"{SIMDE_H} missing: libsimde-dev is not installed (scripts/system-deps.sh installs it)"
        )
    return build / "layer_avx512_emu"


@pytest.fixture(scope="module")
def near_tie(tmp_path_factory) -> Path:
    """tiny-full at 512 tokens, B=16, with near-tie attention and a bf16-exact KV history.

    q_norm's weights x 0.03 make the logits' spread ~0.07 (the generator's: ~2.5), so every
    probability exp(s - max) lies in (0.8, 1], where bf16's spacing is 2^-8; the KV history is
    rounded to bf16 before both references are computed (as a BF16 KV cache holds it). The BF16
    reference's attention error is then only what rounding q and the new token's row costs
    (~2.4e-4 rel RMS, the bar), while one bf16 per probability in the PV product costs ~1.3e-3."""
    from socketlab.layer.bf16 import round_f32
    from socketlab.layer.generate import build_layer, write_layer
    from socketlab.layer.reference import layer_ref
    from socketlab.layer.shapes import load_shape
    from socketlab.layer.weights import random_weights

    shape = load_shape(SHAPES / "tiny-full.yaml")
    w = random_weights(shape, 3)
    w["self_attn.q_norm.weight"] = round_f32(w["self_attn.q_norm.weight"] * 0.03)
    layer = build_layer(shape, 512, 16, 3, weights=w)
    rows = dataclasses.replace(
        layer.rows,
        kcache=[round_f32(k) for k in layer.rows.kcache],
        vcache=[round_f32(v) for v in layer.rows.vcache],
    )
    layer = dataclasses.replace(
        layer,
        rows=rows,
        f32=layer_ref(shape, w, rows, bf16=False),
        bf16=layer_ref(shape, w, rows, bf16=True),
    )
    out = tmp_path_factory.mktemp("near-tie") / "d"
    write_layer(layer, out)
    return out


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return layer_dump("tiny", 100, 16, tmp_path_factory.mktemp("tiny") / "d")


@pytest.fixture(scope="module")
def tiny_s1(tmp_path_factory) -> Path:
    """tiny, seed 1, B=16: the dump of issue 12's gate failure (--gemv avx512, row 13 at pp)."""
    return layer_dump("tiny", 100, 16, tmp_path_factory.mktemp("tiny-s1") / "d", seed=1)


@pytest.fixture(scope="module")
def e2b(tmp_path_factory) -> Path:
    return layer_dump("gemma4-e2b-l0", 2048, 1, tmp_path_factory.mktemp("e2b") / "d")


def assert_gate_passed(proc: subprocess.CompletedProcess, batch: int) -> dict:
    assert proc.returncode == 0, proc.stderr[-2000:]
    meta, metrics = records(proc)
    assert meta["batch"] == batch and meta["numerics_checked"] is True
    gate = [m for m in metrics if m["name"] == "gate_rel_rms"]
    assert len(gate) == 20  # xn q qn k v kn vn attn o h1 xn2 gate up act down h2 pg pact pp out
    for m in gate:
        assert m["pass"] is True, m
        assert m["repeat_max_abs"] == 0, m  # every step recomputes the same token
        # 1.5 x the BF16 reference's error: its bar or, where larger, its spread (spread.py)
        assert m["limit"] == pytest.approx(
            max(1.5 * max(m["bf16_bar"], m["bf16_spread"]), 1e-6), rel=1e-5
        ), m
        assert m["value"] <= m["limit"], m
        assert 0 <= m["row"] < batch
    names = {m["name"] for m in metrics}
    assert {
        "step_p50",
        "step_p95",
        "step_p99",
        "step_max",
        "phase_compute",
        "phase_barrier",
        "weight_bytes_per_worker",
        "kv_bytes_per_step",
    } <= names
    return meta


def run_tiny(
    binary: Path,
    tiny: Path,
    batch: int,
    workers: int,
    mode: str,
    *,
    steps: int,
    tile_kib: int,
    gemv: str | None = None,
) -> subprocess.CompletedProcess:
    """binary (--gemv first where given) on tiny: batch rows on 1 or 2 workers in exchange mode
    mode, steps steps, tile_kib KiB KV tiles."""
    first = {"gemv": gemv} if gemv else {}
    return run(
        binary,
        **first,
        dump=tiny,
        batch=batch,
        cpus=CPUS[workers],
        xchg=mode,
        steps=steps,
        kv_tile_kib=tile_kib,
    )


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("batch", [1, 4, 16])
@pytest.mark.parametrize("mode", MODES)
def test_portable_every_mode_passes_gate(build, tiny, workers, batch, mode):
    proc = run_tiny(build / "layer", tiny, batch, workers, mode, steps=12, tile_kib=4)
    meta = assert_gate_passed(proc, batch)
    assert meta["xchg"] == mode and meta["gemv"] == "avx2"


@pytest.mark.parametrize(
    "variant", [("--barrier", "hier"), ("--nobcast",), ("--gemv", "scalar"), ("--page", "4k")]
)
def test_portable_variants_pass_gate(build, tiny, variant):
    proc = run(build / "layer", *variant, dump=tiny, batch=4, cpus=CPUS[2], steps=12)
    assert_gate_passed(proc, 4)


def emulated_gate(binary: Path, gemv: str, tiny: Path, workers: int, batch: int) -> dict:
    """An emulated --gemv path on tiny (fid on 2 workers, direct on 1; 3 steps, 8 KiB KV tiles)
    through the gate; its meta record."""
    mode = "fid" if workers == 2 else "direct"
    proc = run_tiny(binary, tiny, batch, workers, mode, steps=3, tile_kib=8, gemv=gemv)
    return assert_gate_passed(proc, batch)


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("batch", [1, 4, 16])
def test_amx_emulated_passes_gate(build, tiny, workers, batch):
    meta = emulated_gate(build / "layer_amx_emu", "amx", tiny, workers, batch)
    assert meta["amx_emulated"] is True and meta["pv_split"] is True and meta["row_unit"] == 16


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize(
    "gemv,batch",
    [("avx512", 1), ("avx512", 4), ("avx512", 16), ("avx512-vnni", 1), ("avx512-vnni", 16)],
)
def test_avx512_emulated_passes_gate(emu512, tiny, workers, gemv, batch):
    """The --gemv avx512 path (native/gemv's VDPBF16PS kernel, VNNI-packed KV) and avx512-vnni
    (the blocked kernel on AMX's 16-row VNNI layout, kept for comparison) on SIMDe: the same gate
    on every host, whether or not the CPU has AVX-512 (test_avx512_path_or_exit_3 runs the real
    one)."""
    meta = emulated_gate(emu512, gemv, tiny, workers, batch)
    assert meta["avx512_emulated"] is True and meta["pv_split"] is True
    assert meta["gemv"] == gemv and meta["row_unit"] == 4


# worker 0 of 90 on E2B L0, bytes per weight phase: row-major kernels stream their rows (4-row
# units: q 24, k/v 4, o 20, gate/up 72, down 20, ple gate 4, ple proj 20 rows); the VNNI-block
# ones pad every matrix's rows to 16 (q 32, k/v 16, o 32, gate/up 80, down 32, ple 16/32)
E2B_SLICE0_ROWS = {
    "qkv": 98_304,
    "o": 81_920,
    "gateup": 442_368,
    "down": 245_760,
    "ple_gate": 12_288,
    "ple_proj": 10_240,
}
E2B_SLICE0_VNNI = {
    "qkv": 196_608,
    "o": 131_072,
    "gateup": 491_520,
    "down": 393_216,
    "ple_gate": 49_152,
    "ple_proj": 16_384,
}


def slice0_bytes(binary: Path, dump: Path, kernel: str) -> dict:
    proc = run(binary, dump=dump, slice="0/90", cpus="0", gemv=kernel, steps=2)
    assert proc.returncode == 0, proc.stderr
    meta, metrics = records(proc)
    assert meta["gemv"] == kernel
    return {m["phase"]: m["value"] for m in metrics if m["name"] == "phase_weight_bytes"}


def test_avx512_streams_its_rows_bytes_vnni_pads(build, emu512, e2b):
    """--gemv avx512 (row-major, the published AVX path) reads exactly avx2's bytes; avx512-vnni
    reads the 16-row padded ones (1.43x on this slice). On SIMDe: every host."""
    rows = slice0_bytes(emu512, e2b, "avx512")
    assert rows == E2B_SLICE0_ROWS == slice0_bytes(build / "layer", e2b, "avx2")
    assert slice0_bytes(emu512, e2b, "avx512-vnni") == E2B_SLICE0_VNNI
    assert sum(E2B_SLICE0_VNNI.values()) / sum(rows.values()) == pytest.approx(1.434, abs=1e-3)


@pytest.mark.parametrize("path", ["amx", "avx512"])
@pytest.mark.parametrize("batch", [1, 16])
def test_unsplit_pv_fails_gate_on_near_tie_attention(build, emu512, near_tie, path, batch):
    """P rounded to one bf16 in the PV product fails the gate at attn (the first boundary it
    touches), on every row count, while the split P (hi + lo) passes the same dump: see the
    near_tie fixture for why the error is ~5x the bar there. (On the generator's default dumps
    the BF16 bar is dominated by the scores' and the FP32 history's rounding, so the unsplit
    error adds only a few percent at attn and shows up downstream on some rows only.)"""
    binary = build / "layer_amx_emu" if path == "amx" else emu512
    args = ["--gemv", path, "--dump", str(near_tie), "--batch", str(batch), "--steps", "2"]
    split = run(binary, *args)
    assert_gate_passed(split, batch)
    proc = run(binary, *args, "--pv-unsplit")
    assert proc.returncode == 1, proc.stderr
    assert "gate failed at boundary attn:" in proc.stderr, proc.stderr
    _, metrics = records(proc)
    attn = next(m for m in metrics if m["name"] == "gate_rel_rms" and m["boundary"] == "attn")
    assert attn["ratio_to_bar"] > 3, attn  # not a marginal miss of the 1.5 x bar


def test_fid_store_is_reported(build, tiny):
    """Host-dependent: fid's line store is one 64-byte non-temporal store where the CPU has
    AVX-512 ("nt64"), else payload then tail tag with release ("plain"); meta says which."""
    want = "nt64" if HAS_AVX512 else "plain"
    print(f"branch: CPU {'has' if HAS_AVX512 else 'lacks'} AVX-512, expecting fid_store {want}")
    proc = run(build / "layer", dump=tiny, cpus=CPUS[2], xchg="fid", steps=4)
    meta = assert_gate_passed(proc, 1)
    assert meta["fid_store"] == want
    proc = run(build / "layer", "--dump", str(tiny), "--steps", "4")
    assert "fid_store" not in records(proc)[0]


@pytest.mark.parametrize("flag,boundary", [("perturb-row", "q"), ("drop-combine", "attn")])
def test_planted_errors_fail_gate_naming_boundary(build, tiny, flag, boundary):
    proc = run(build / "layer", dump=tiny, cpus=CPUS[2], steps=4, debug=flag)
    assert proc.returncode == 1
    assert f"gate failed at boundary {boundary}:" in proc.stderr, proc.stderr


def test_perturbed_weight_file_fails_gate(build, tiny, tmp_path):
    """One weight row changed in the dump itself (not the reference): the gate names o."""
    d = tmp_path / "d"
    shutil.copytree(tiny, d, symlinks=False, ignore=shutil.ignore_patterns("row*"))
    w = d / "w.self_attn.o_proj.weight.bf16"
    raw = bytearray(w.read_bytes())
    cols = 4 * 64
    for k in range(cols):  # row 5: every element's exponent bumped (x2)
        i = 2 * (5 * cols + k) + 1
        raw[i] = (raw[i] + 1) & 0x7F | raw[i] & 0x80
    w.write_bytes(bytes(raw))
    proc = run(build / "layer", "--dump", str(d), "--steps", "4")
    assert proc.returncode == 1
    assert "gate failed at boundary o:" in proc.stderr, proc.stderr


def test_avx512_path_or_exit_3(build, tiny):
    """Host-dependent: real AVX-512 BF16 where the CPU has it, else exit 3 naming the reason."""
    proc = run(build / "layer", gemv="avx512", dump=tiny, batch=4, cpus=CPUS[2], steps=6)
    if HAS_AVX512_BF16:
        print("branch: CPU has AVX-512 BF16, the real path ran")
        assert_gate_passed(proc, 4)
    else:
        print("branch: CPU lacks AVX-512 BF16, expecting exit 3")
        assert proc.returncode == 3 and "not available on this host" in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("batch", [1, 4, 16])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kernel", ["avx512", "avx512-vnni"])
def test_avx512_every_mode_passes_gate_or_exit_3(build, tiny, workers, batch, mode, kernel):
    """Host-dependent: the real VDPBF16PS paths (row-major and VNNI-blocked; fid with one 64-byte
    non-temporal store per line) in every exchange mode where the CPU has AVX-512 BF16, else
    exit 3."""
    proc = run_tiny(build / "layer", tiny, batch, workers, mode, steps=6, tile_kib=8, gemv=kernel)
    if not HAS_AVX512_BF16:
        assert proc.returncode == 3 and "not available on this host" in proc.stderr
        return
    meta = assert_gate_passed(proc, batch)
    assert meta["avx512_emulated"] is False and meta["xchg"] == mode
    if mode == "fid":
        assert meta["fid_store"] == "nt64"


def strip_spread(src: Path, dst: Path) -> Path:
    """A copy of a dump without bf16_ref_spread in any row's meta (as ref_layer.py writes it)."""
    shutil.copytree(src, dst, symlinks=True)
    for meta in [dst / "meta.json", *dst.glob("row*/meta.json")]:
        m = json.loads(meta.read_text())
        del m["bf16_ref_spread"]
        meta.write_text(json.dumps(m, indent=1))
    return dst


def check_issue12_rows(proc: subprocess.CompletedProcess) -> None:
    """The run passes, and its pp boundary is the case of issue 12: row 13 lands above 1.5 x its
    one-realization bar (the old limit) and within 1.5 x the spread."""
    assert_gate_passed(proc, 16)
    pp = next(m for m in records(proc)[1] if m["name"] == "gate_rel_rms" and m["boundary"] == "pp")
    print(
        f"pp: row {pp['row']} ratio to bar {pp['ratio_to_bar']:.3f}, spread / bar "
        f"{pp['bf16_spread'] / pp['bf16_bar']:.3f}"
    )
    assert pp["row"] == 13 and pp["value"] > 1.5 * pp["bf16_bar"], pp


def test_avx512_small_vector_rows_pass_gate(emu512, tiny_s1, tmp_path):
    """Issue 12: VDPBF16PS sums in another order and the packed attention takes q and P as
    bf16 hi + lo, so a few values sit on the other side of a BF16 rounding midpoint than in the
    reference; on tiny's 64-wide per-layer input a few elements carry most of the error, and one
    flip moved pp to 1.69 x the bar. Every GEMV is exact to FP32 against its own inputs (see
    docs/layer.md), so it is a valid realization: the gate holds it to 1.5 x the spread of the
    dump's other valid realizations (here 1.69 x the bar: the hi + lo realizations land on the
    same flip). On SIMDe (every host; same numbers as the real VDPBF16PS path); without the
    spread the old limit fails it, as the issue reported."""
    args = ["--gemv", "avx512", "--dump", str(tiny_s1), "--batch", "16", "--steps", "3"]
    check_issue12_rows(run(emu512, *args))
    old = strip_spread(tiny_s1, tmp_path / "old")
    proc = run(emu512, *args[:3], str(old), *args[4:])
    assert proc.returncode == 1 and "gate failed at boundary pp:" in proc.stderr, proc.stderr


def test_avx512_small_vector_rows_pass_gate_or_exit_3(build, tiny_s1):
    """Host-dependent: the same on the real VDPBF16PS path where the CPU has AVX-512 BF16 (1 and
    2 workers), else exit 3 naming the reason."""
    for cpus in ("0", CPUS[2]):
        proc = run(build / "layer", gemv="avx512", dump=tiny_s1, batch=16, cpus=cpus, steps=3)
        if not HAS_AVX512_BF16:
            print("branch: CPU lacks AVX-512 BF16, expecting exit 3")
            assert proc.returncode == 3 and "not available on this host" in proc.stderr
            assert len(proc.stderr.strip().splitlines()) == 1
            return
        print(f"branch: CPU has AVX-512 BF16, the real path ran on CPUs {cpus}")
        if cpus == "0":
            check_issue12_rows(proc)
        else:  # 2 workers split the positions differently: another realization, also valid
            assert_gate_passed(proc, 16)


def test_valid_bf16_realizations_pass_and_bad_ones_fail(tiny_s1, e2b):
    """The spread's premise, in the reference alone (no native code): BF16-mode realizations
    with summation orders the generator never drew (half with hi + lo attention) pass every row's
    gate, some of them above 1.5 x the one-realization bar; a planted error (one q_proj row + 1,
    the stage's --debug perturb-row) still fails at q; and on E2B's 1536..6144-wide vectors the
    spread is within 5% of the bar (only the 256-wide per-layer input differs more), so the
    limit barely moves there."""
    import numpy as np

    from socketlab.layer.check import gate, load_rows, open_dump
    from socketlab.layer.reference import layer_ref

    dumps = open_dump(str(tiny_s1))
    shape, w, rows = load_rows(dumps)
    above_old = 0
    for k in range(4):
        got = layer_ref(
            shape,
            w,
            rows,
            bf16=True,
            order=np.random.default_rng([12345, k]),
            split_attn=bool(k % 2),
        )
        for i, d in enumerate(dumps):
            lines = gate({b: got[b][i] for b in got}, d)
            assert all(g.ok for g in lines), [g for g in lines if not g.ok]
            above_old += sum(g.rel_rms > 1.5 * g.bar > 0 for g in lines)
    assert above_old > 0  # the old limit would have failed some valid realization
    w["self_attn.q_proj.weight"] = w["self_attn.q_proj.weight"].copy()
    w["self_attn.q_proj.weight"][7] += 1
    got = layer_ref(shape, w, rows, bf16=True, order=np.random.default_rng([12345, 0]))
    bad = [g for g in gate({b: got[b][0] for b in got}, dumps[0]) if not g.ok]
    assert bad and bad[0].boundary == "q" and bad[0].rel_rms > 100 * bad[0].limit, bad
    meta = open_dump(str(e2b))[0].meta
    for b, bar in meta["bf16_ref_err"].items():
        sp = meta["bf16_ref_spread"]["rel_rms_max"][b]
        assert sp <= (1.5 if b in ("pg", "pact", "pp") else 1.05) * max(bar["rel_rms"], 1e-9), b


@pytest.mark.parametrize("kernel", ["avx2", "amx"])
def test_gelu_isas_agree_bit_for_bit(build, tiny, kernel):
    """gelu (native/layer/gelu.c: x / (1 + exp(-2u)), no branch, no table) gives the same bits on
    its scalar, AVX2 and AVX-512 paths: every gate record of a B=16 run is identical whichever
    runs, and all pass. Host-dependent: --gelu avx512 runs where the CPU has AVX-512, else exit 3;
    auto picks the widest there is."""
    binary = build / ("layer_amx_emu" if kernel == "amx" else "layer")
    args = ["--gemv", kernel, "--dump", str(tiny), "--batch", "16", "--steps", "2"]
    want_auto = "avx512" if HAS_AVX512 else "avx2"
    print(f"branch: CPU {'has' if HAS_AVX512 else 'lacks'} AVX-512, auto gelu is {want_auto}")
    gates = {}
    for isa in ("scalar", "avx2", "avx512", "auto"):
        proc = run(binary, *args, "--gelu", isa)
        if isa == "avx512" and not HAS_AVX512:
            assert proc.returncode == 3 and "--gelu avx512" in proc.stderr, proc.stderr
            continue
        meta = assert_gate_passed(proc, 16)
        assert meta["gelu"] == (want_auto if isa == "auto" else isa)
        gates[isa] = [
            {k: m[k] for k in ("boundary", "value", "max_abs", "cosine", "row")}
            for m in records(proc)[1]
            if m["name"] == "gate_rel_rms"
        ]
    assert all(g == gates["scalar"] for g in gates.values())


def test_real_amx_path_or_exit_3(build, tiny):
    """Host-dependent: the real (not emulated) AMX path where the CPU has AMX, else exit 3."""
    proc = run(build / "layer", gemv="amx", dump=tiny, batch=16, cpus=CPUS[2], steps=6)
    if HAS_AMX:
        print("branch: CPU has AMX, the real path ran")
        assert records(proc)[0]["amx_emulated"] is False
        assert_gate_passed(proc, 16)
    else:
        print("branch: CPU lacks AMX, expecting exit 3")
        assert proc.returncode == 3 and "not available on this host" in proc.stderr


def hidden(binary: Path, hide: str, *args: object) -> subprocess.CompletedProcess:
    return hostclass.run_hidden(binary, hide, *args, timeout=TIMEOUT)


def spin_expected(flags: set[str]) -> list[tuple[str, str, str]]:
    """(binary, --gemv, what --spin auto gives on a host with these CPU flags: a mode or "exit 3").

    auto keeps awake the unit the kernel runs on: amx with real AMX, fma512 with the AVX-512
    kernels (and emulated AMX, whose other phases are AVX-512 where the host has it), else
    pause; a kernel whose unit the host lacks exits 3 before any spin applies."""
    bf16 = "fma512" if hostclass.has(flags, "avx512_bf16") else "exit 3"
    return [
        ("layer", "avx2", "pause"),
        ("layer", "avx512", bf16),
        ("layer", "avx512-vnni", bf16),
        ("layer", "amx", "amx" if hostclass.has(flags, "amx") else "exit 3"),
        ("layer_amx_emu", "amx", "fma512" if hostclass.has(flags, "avx512") else "pause"),
    ]


@pytest.mark.parametrize("host", hostclass.ISA_HOSTS)
def test_spin_auto_follows_kernel_and_host(build, tiny, host):
    """--spin auto (native/common/spin.c): the poll that keeps the kernel's unit awake, on this
    machine and, through SL_CPU_HIDE, as on each recorded host."""
    flags, hide = hostclass.as_host(host)
    for binary, gemv, want in spin_expected(flags):
        args = ["--gemv", gemv, "--dump", tiny, "--batch", 4, "--cpus", CPUS[2], "--steps", 4]
        proc = hidden(build / binary, hide, *args)
        if want == "exit 3":
            hostclass.assert_unsupported(proc, (binary, gemv))
            continue
        meta = assert_gate_passed(proc, 4)
        assert meta["spin"] == want and meta["gemv"] == gemv, (binary, gemv)


@pytest.mark.parametrize("host", hostclass.ISA_HOSTS)
def test_spin_modes_leave_numerics_alone(build, tiny, host):
    """Every --spin mode the host runs gives the same gate records bit for bit (fid and direct
    with the dissemination barrier, 2 workers, B = 16): a poll's FMA or tile product must not
    reach a result. The kernel is amx where AMX runs (then amx's TDPBF16PS on C0 between GEMVs
    is compared too), else avx512, else avx2; fma512 needs AVX-512. Each ISA host's branch runs
    here through SL_CPU_HIDE."""
    flags, hide = hostclass.as_host(host)
    amx, avx512 = hostclass.has(flags, "amx"), hostclass.has(flags, "avx512")
    kernel = "amx" if amx else "avx512" if hostclass.has(flags, "avx512_bf16") else "avx2"
    modes = ["pause"] + (["fma512"] if avx512 else []) + (["amx"] if amx else [])
    print(f"--gemv {kernel}, spin modes {modes}")
    for xchg in ("fid", "direct"):
        gates = {}
        for mode in modes:
            args = ["--dump", tiny, "--batch", 16, "--cpus", CPUS[2], "--steps", 6]
            proc = hidden(
                build / "layer", hide, *args, "--gemv", kernel, "--xchg", xchg, "--spin", mode
            )
            assert assert_gate_passed(proc, 16)["spin"] == mode
            gates[mode] = [
                {k: m[k] for k in ("boundary", "value", "max_abs", "cosine", "row")}
                for m in records(proc)[1]
                if m["name"] == "gate_rel_rms"
            ]
        assert all(gates[m] == gates["pause"] for m in modes), xchg


def test_spin_bad_input_is_one_line(build, tiny):
    """A spin the host can't run is exit 3 naming it (SL_CPU_HIDE takes AVX-512 away on any
    host); amx without the AMX kernel, an unknown mode or an unknown hidden feature is exit 2."""
    cases = [
        ("avx512", ["--spin", "fma512"], 3, "not available on this host: --spin fma512"),
        ("", ["--gemv", "avx2", "--spin", "amx"], 2, "--spin amx: only with --gemv amx"),
        ("", ["--spin", "warm"], 2, "--spin"),
        ("avx512,bogus", [], 2, "SL_CPU_HIDE: unknown feature 'bogus'"),
    ]
    for hide, args, rc, msg in cases:
        proc = hidden(build / "layer", hide, "--dump", tiny, "--steps", 4, *args)
        assert proc.returncode == rc and msg in proc.stderr, (args, proc.stderr)
        assert proc.stderr.count("\n") == 1 and not proc.stdout


def test_step_times_file_matches_the_reported_quantiles(build, tiny, tmp_path):
    """--step-times FILE: every step's time per worker (warm-up included), from which the
    reported step p50 / p99 follow (per step the slowest worker, the first 10% dropped, linear
    interpolation). A run whose gate fails still writes them, as it prints its metrics; an
    unwritable path is exit 2 before the run, and a run that never starts writes no file."""
    import numpy as np

    out = tmp_path / "steps.tsv"
    proc = run(build / "layer", dump=tiny, batch=2, cpus=CPUS[2], steps=40, step_times=out)
    assert_gate_passed(proc, 2)
    lines = out.read_text().splitlines()
    workers = 2 if "," in CPUS[2] else 1
    assert lines[0].split("\t") == ["step"] + [f"w{i}_us" for i in range(workers)]
    rows = np.array([[float(x) for x in ln.split("\t")] for ln in lines[1:]])
    assert rows.shape == (40, 1 + workers) and (rows[:, 0] == np.arange(40)).all()
    assert (rows[:, 1:] > 0).all()
    slowest = rows[4:, 1:].max(axis=1)
    value = {m["name"]: m["value"] for m in records(proc)[1]}
    for q, name in ((50, "step_p50"), (99, "step_p99")):
        assert np.percentile(slowest, q) == pytest.approx(value[name], rel=1e-4, abs=2e-3)
    bad = run(build / "layer", dump=tiny, steps=4, step_times=tmp_path / "no" / "x.tsv")
    assert bad.returncode == 2 and "--step-times" in bad.stderr and bad.stderr.count("\n") == 1
    failed = run(build / "layer", "--debug", "perturb-row", dump=tiny, steps=4, step_times=out)
    assert failed.returncode == 1 and len(out.read_text().splitlines()) == 1 + 4
    never = tmp_path / "never.tsv"
    run(build / "layer", dump=tmp_path / "nodump", steps=4, step_times=never)
    assert not never.exists()


def test_e2b_l0_2k_passes_gate(build, e2b):
    proc = run(build / "layer", dump=e2b, cpus=CPUS[2], steps=6, xchg="repnt")
    meta = assert_gate_passed(proc, 1)
    assert meta["hidden"] == 1536 and meta["cache_len"] == 511
    proc = run(build / "layer_amx_emu", gemv="amx", dump=e2b, cpus=CPUS[2], steps=2)
    assert_gate_passed(proc, 1)


def test_slice_mode_reports_one_worker_of_90(build, e2b):
    proc = run(build / "layer", dump=e2b, slice="0/90", cpus="0", steps=50)
    assert proc.returncode == 0, proc.stderr
    meta, metrics = records(proc)
    assert meta["slice"] is True and meta["slice_of"] == 90 and meta["workers"] == 90
    assert meta["numerics_checked"] is False and "slice mode" in meta["numerics"]
    phases = {m["phase"]: m["value"] for m in metrics if m["name"] == "phase_gemv"}
    assert phases["gateup"] > 0 and phases["down"] > 0
    by = {m["phase"]: m["value"] for m in metrics if m["name"] == "phase_weight_bytes"}
    # worker 0 of 90 owns 18 of gate's 1536 4-row units (72 rows) of gate and of up
    assert by["gateup"] == 2 * 72 * 1536 * 2
    assert not [m for m in metrics if m["name"] == "gate_rel_rms"]


def test_ctx_repeat_is_timing_only(build, tiny):
    proc = run(build / "layer", "--dump", str(tiny), "--ctx-repeat", "4", "--steps", "6")
    assert proc.returncode == 0, proc.stderr
    meta, _ = records(proc)
    assert meta["numerics_checked"] is False and "ctx-repeat" in meta["numerics"]


def one_line_exit_2(proc: subprocess.CompletedProcess, *words: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for w in words:
        assert w in lines[0], lines[0]


def broken_copy(tiny: Path, tmp_path: Path) -> Path:
    d = tmp_path / "bad"
    shutil.copytree(tiny, d, ignore=shutil.ignore_patterns("row*"))
    return d


def test_bad_dump_missing_tensor(build, tiny, tmp_path):
    d = broken_copy(tiny, tmp_path)
    man = d / "manifest.txt"
    man.write_text(
        "".join(ln + "\n" for ln in man.read_text().splitlines() if not ln.startswith("ref.down "))
    )
    one_line_exit_2(run(build / "layer", "--dump", str(d)), "ref.down", "missing")


def test_bad_dump_wrong_shape(build, tiny, tmp_path):
    d = broken_copy(tiny, tmp_path)
    man = d / "manifest.txt"
    man.write_text(
        man.read_text().replace(
            "w.mlp.up_proj.weight bf16 768 256", "w.mlp.up_proj.weight bf16 767 256"
        )
    )
    one_line_exit_2(run(build / "layer", "--dump", str(d)), "w.mlp.up_proj.weight", "768 256")


def test_bad_dump_truncated_file(build, tiny, tmp_path):
    d = broken_copy(tiny, tmp_path)
    f = d / "kcache.bf16"
    f.write_bytes(f.read_bytes()[:-10])
    one_line_exit_2(run(build / "layer", "--dump", str(d)), "kcache.bf16", "truncated")


def test_bad_dump_spread(build, tiny, tmp_path):
    """bf16_ref_spread is optional, but if present it must be whole: the stage and layer-check
    name the missing boundary (one line, exit 2)."""
    d = broken_copy(tiny, tmp_path)
    meta = json.loads((d / "meta.json").read_text())
    del meta["bf16_ref_spread"]["rel_rms_max"]["pp"]
    meta["batch"] = 1  # broken_copy keeps row 0 only
    (d / "meta.json").write_text(json.dumps(meta, indent=1))
    one_line_exit_2(run(build / "layer", "--dump", str(d)), "bf16_ref_spread.rel_rms_max.pp")
    one_line_exit_2(
        orchestrate("layer-check", d, "--no-recompute", timeout=TIMEOUT),
        "bf16_ref_spread.rel_rms_max.pp",
    )


def test_bad_input_flags(build, tiny, tmp_path):
    b = build / "layer"
    one_line_exit_2(run(b, "--dump", str(tiny), "--slice", "0/250"), "250 workers", "units")
    one_line_exit_2(run(b, "--dump", str(tiny), "--ctx", "32"), "--ctx 32", "cache_len = 31")
    one_line_exit_2(run(b, "--dump", str(tiny), "--xchg", "bogus"), "--xchg")
    one_line_exit_2(run(b, "--dump", str(tiny), "--gelu", "sse"), "--gelu")
    one_line_exit_2(run(b, "--dump", str(tiny), "--frobnicate"), "--frobnicate")
    one_line_exit_2(run(b, "--dump", str(tmp_path / "nope")), "manifest.txt")
    one_line_exit_2(run(b, "--dump", str(tiny), "--gemv", "avx2", "--pv-unsplit"), "--pv-unsplit")
    one_line_exit_2(run(b, "--dump", str(tiny / "row1"), "--batch", "2"), "row1")
