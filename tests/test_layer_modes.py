"""native/layer's modes of issue 27: the KV policies (P4: rotated KV copies for paths A/B/C,
one tile of all positions, PREFETCHNTA, early staging, attention only, sliding layers under
them), and the 26B-A4B MoE block (router, pinned top-k renormalised with per-expert scales,
the experts, the two FFN norms) with attention_k_eq_v and no per-layer input. Every mode that
computes the layer passes the stage's gate at B = 1 and 16 on 1 and 2 workers, on the portable
path and the packed-KV path (AMX emulated: any host); a planted error in each mode fails it;
copies are checked copy by copy. One gcc build (tests/test_layer_stage.py builds both
compilers); tiny shapes, a few steps."""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.support.layer_run import CPUS, REPO, layer_dump, make, orchestrate, records, run

#: (batch, workers) every mode is gated at
SHAPES_RUN = [(1, 1), (1, 2), (16, 1), (16, 2)]
#: the KV modes that compute the layer, as native/layer flags
MODES = {
    "copies": ["--kv-copies", "3"],
    "cold": ["--kv-cold-mib", "8"],  # path A: copies of the whole layer's KV >= 8 MiB
    "one-tile": ["--kv-tile-kib", "0"],
    "nta": ["--prefetch-hint", "nta", "--prefetch-dist", "8", "--kv-tile-kib", "16"],
    "staging": ["--kv-stage-kib", "16", "--prefetch-hint", "t2", "--prefetch-dist", "0"],
    "path-c": ["--kv-copies", "3", "--prefetch-dist", "8", "--prefetch-hint", "t0"],
}


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> Path:
    if shutil.which("gcc") is None:
        pytest.fail("gcc is not installed (scripts/system-deps.sh installs it)")
    out = tmp_path_factory.mktemp("layer-kv")
    proc = make(out, "gcc", f"{out}/layer", f"{out}/layer_amx_emu")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return out


@pytest.fixture(scope="module")
def full(tmp_path_factory) -> Path:
    """tiny-full (a full-attention layer) at 256 positions, 16 rows."""
    return layer_dump("tiny-full", 256, 16, tmp_path_factory.mktemp("kv-full") / "d", "--quiet")


@pytest.fixture(scope="module")
def sliding(tmp_path_factory) -> Path:
    """tiny (sliding, window 32) at 100 positions: the cache holds the window's last 31 rows."""
    return layer_dump("tiny", 100, 16, tmp_path_factory.mktemp("kv-sliding") / "d", "--quiet")


def gated(proc: subprocess.CompletedProcess, batch: int) -> tuple[dict, list[dict]]:
    assert proc.returncode == 0, proc.stderr[-2000:]
    meta, metrics = records(proc)
    assert meta["batch"] == batch and meta["numerics_checked"] is True
    gate = [m for m in metrics if m["name"] == "gate_rel_rms"]
    assert len(gate) == 20 and all(m["pass"] and m["repeat_max_abs"] == 0 for m in gate), gate
    copies = [m for m in metrics if m["name"] == "gate_kv_copies"]
    if meta["kv_copies"] > 1:  # every copy read in the run, checked against the last step
        assert len(copies) == 1 and copies[0]["pass"] is True and copies[0]["max_abs"] == 0
        assert copies[0]["value"] == min(meta["kv_copies"], meta["steps"])
    else:
        assert not copies
    return meta, metrics


def kernels(build: Path) -> list[tuple[Path, str]]:
    """The portable path (row-major KV) and the packed-KV path (VNNI K / V tiles, split P)."""
    return [(build / "layer", "avx2"), (build / "layer_amx_emu", "amx")]


def every_run(
    build: Path, dump: Path, steps: int, *extra: str, shapes: Iterable[tuple[int, int]] = SHAPES_RUN
) -> Iterator[tuple[str, int, subprocess.CompletedProcess]]:
    """dump on each of kernels() at each (batch, workers) of shapes, extra flags last: (kernel,
    batch, the run) for each, run as the loop reaches it."""
    for binary, kernel in kernels(build):
        for batch, workers in shapes:
            flags = {"dump": dump, "gemv": kernel, "batch": batch, "cpus": CPUS[workers]}
            yield kernel, batch, run(binary, *extra, **flags, steps=steps)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_kv_mode_passes_gate(build, full, mode):
    for kernel, batch, proc in every_run(build, full, 5, *MODES[mode]):
        meta, _ = gated(proc, batch)
        assert meta["gemv"] == kernel


def test_sliding_layer_under_the_kv_policy_passes_gate(build, sliding):
    """A sliding layer (the window bounds its KV) with cold copies and T0 prefetch: path C."""
    for _, batch, proc in every_run(build, sliding, 4, "--kv-cold-mib", "1"):
        meta, _ = gated(proc, batch)
        assert meta["layer_type"] == "sliding_attention" and meta["kv_copies"] > 1


def test_cold_mib_rotates_at_least_that_much(build, full):
    """--kv-cold-mib M: ceil(M MiB / the whole layer's KV per step) copies, as p4_run.sh."""
    proc = run(build / "layer", dump=full, batch=4, cpus=CPUS[2], steps=3, kv_cold_mib=8)
    meta, metrics = gated(proc, 4)
    kv = next(m["value"] for m in metrics if m["name"] == "kv_bytes_per_step")
    assert meta["kv_copies"] == math.ceil(8 * 2**20 / kv)
    assert meta["kv_rotated_bytes"] >= 8 * 2**20 > meta["kv_rotated_bytes"] - kv


@pytest.mark.parametrize(
    "mode,flags,planted,where",
    [
        ("copies", ["--kv-copies", "4"], "corrupt-copy", "kv copy 3"),  # step 3 of 6 reads copy 3
        # 2 copies at B=16: the last step reads the corrupted copy, so step 0 and it differ
        ("cold", ["--kv-cold-mib", "8"], "corrupt-copy", "(kv copy|boundary attn)"),
        ("one-tile", ["--kv-tile-kib", "0"], "drop-combine", "boundary attn"),
        ("nta", ["--prefetch-hint", "nta"], "perturb-row", "boundary q"),
        ("staging", ["--kv-stage-kib", "16", "--prefetch-hint", "t2"], "perturb-row", "boundary q"),
    ],
)
def test_planted_error_in_each_mode_fails_gate(build, full, sliding, mode, flags, planted, where):
    """One K element of the copy the middle step reads off by +1 is caught copy by copy (its
    attention differs from the last step's); the other modes keep the gate's planted errors."""
    for dump in (full, sliding):
        for kernel, _, proc in every_run(
            build, dump, 6, "--debug", planted, *flags, shapes=[(16, 2)]
        ):
            assert proc.returncode == 1, (mode, kernel, proc.stderr)
            assert re.search(f"gate failed at {where}", proc.stderr), proc.stderr
            assert len(proc.stderr.strip().splitlines()) == 1


def test_attn_only_runs_without_numerics(build, full):
    proc = run(
        build / "layer",
        "--attn-only",
        "--kv-copies",
        "2",
        dump=full,
        batch=16,
        cpus=CPUS[2],
        steps=5,
    )
    assert proc.returncode == 0, proc.stderr
    meta, metrics = records(proc)
    assert meta["attn_only"] is True and meta["numerics_checked"] is False
    assert meta["numerics"] == "not checked: --attn-only skips every weight GEMV"
    assert not [m for m in metrics if m["name"].startswith("gate_")]
    gemv = [m for m in metrics if m["name"] == "phase_gemv_p50" and m["phase"] == "gateup"]
    assert gemv and gemv[0]["value"] == 0  # no weight GEMV ran
    assert any(m["name"] == "step_p50" for m in metrics)


@pytest.mark.parametrize(
    "args,message",
    [
        (["--kv-copies", "0"], "--kv-copies"),
        (["--kv-copies", "2", "--kv-cold-mib", "8"], "give one"),
        (["--debug", "corrupt-copy"], "needs --kv-copies >= 2"),
        (["--batch", "16", "--kv-cold-mib", "1", "--debug", "corrupt-copy"], "gives 1 copy"),
        (["--kv-tile-kib", "-1"], "--kv-tile-kib"),
    ],
)
def test_bad_kv_flags_are_one_line_exit_2(build, full, args, message):
    proc = run(build / "layer", "--dump", str(full), "--steps", "3", *args)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_cold_target_is_p4_runs_on_the_published_l3():
    """Path A's target: 3.2 x the host's L3, p4_run.sh's 1,536 MiB on the c8i's 480 MiB; a
    host whose facts name no L3 is one line through the spec's template."""
    sys.path.insert(0, str(REPO / "tests"))
    from published.c8i_fixture import topology_facts

    from socketlab.layer.kvpolicy import cold_mib
    from socketlab.spec.render import ENV, TemplateLimit

    assert cold_mib(topology_facts("c8i-metal-48xl")) == 1536
    assert cold_mib(topology_facts("zen4-kvm-2vcpu")) == 102  # 32 MiB L3
    template = ENV.from_string("--kv-cold-mib={{ facts | kv_cold_mib }}")
    assert template.render(facts=topology_facts("c8i-metal-48xl")) == "--kv-cold-mib=1536"
    with pytest.raises(TemplateLimit, match="report no L3 size"):
        template.render(facts={"caches": {"L2": {"size_bytes": 2 << 20}}})


# ---- the MoE block (tiny-moe: 8 experts, top 2, k_eq_v, no per-layer input) ----


@pytest.fixture(scope="module")
def moe(tmp_path_factory) -> Path:
    return layer_dump("tiny-moe", 64, 16, tmp_path_factory.mktemp("moe") / "d", "--quiet")


def moe_records(metrics: list[dict]) -> dict[str, dict]:
    return {
        m["name"]: m for m in metrics if m["name"] in ("gate_pass", "routing_kl", "routing_flips")
    }


def test_moe_layer_passes_gate(build, moe):
    """Every boundary of the MoE layer (rs rw xn3 moe among them) within the gate; the routing
    distribution as close to FP32 as the BF16 reference's, no pinned expert outside the stage's
    own top-k."""
    for _, batch, proc in every_run(build, moe, 4):
        meta, metrics = records(proc)
        assert proc.returncode == 0, proc.stderr
        gate = {m["boundary"] for m in metrics if m["name"] == "gate_rel_rms"}
        assert {"rs", "rw", "xn3", "moe"} <= gate and not gate & {"pg", "pact", "pp"}
        assert all(m["pass"] for m in metrics if m["name"] == "gate_rel_rms")
        got = moe_records(metrics)
        assert got["gate_pass"]["value"] == 1 and got["routing_flips"]["value"] == 0
        assert got["routing_flips"]["pairs"] == 2 * batch
        assert 0 < got["routing_kl"]["value"] < 2 * got["routing_kl"]["bf16"], got
        phases = {m["phase"] for m in metrics if m["name"] == "phase_compute"}
        assert {"gateup", "down", "expert_down"} <= phases


def test_moe_planted_errors_fail_gate(build, moe, full):
    """A wrong expert for one pick fails at the routing weights (the block's first boundary it
    reaches); a dense layer refuses the MoE planted error (exit 2)."""
    proc = run(build / "layer", dump=moe, batch=16, cpus=CPUS[2], steps=4, debug="swap-expert")
    assert proc.returncode == 1 and "gate failed at boundary rw:" in proc.stderr, proc.stderr
    assert moe_records(records(proc)[1])["gate_pass"]["value"] == 0
    proc = run(build / "layer", "--dump", str(full), "--steps", "3", "--debug", "swap-expert")
    assert proc.returncode == 2 and "dense layer" in proc.stderr


def test_near_tie_moe_unsplit_p_fails_split_passes(build, tmp_path):
    """The routing check's premise on the near-tie variant: P rounded to one bf16 fails the
    gate at attn (and says so in gate_pass before exiting 1); split P passes."""
    dump = tmp_path / "nt"
    dump_args = ["--context", "256", "--batch", "16", "--seed", "1", "--variant", "near-tie"]
    proc = orchestrate("layer-dump", "tiny-moe", *dump_args, "--out", dump, "--quiet")
    assert proc.returncode == 0, proc.stderr
    args = ["--dump", str(dump), "--gemv", "amx", "--batch", "16", "--steps", "3"]
    split = run(build / "layer_amx_emu", *args)
    assert split.returncode == 0, split.stderr
    unsplit = run(build / "layer_amx_emu", *args, "--pv-unsplit")
    assert unsplit.returncode == 1 and "gate failed at boundary attn:" in unsplit.stderr
    got = {name: moe_records(records(p)[1]) for name, p in (("split", split), ("unsplit", unsplit))}
    assert got["split"]["gate_pass"]["value"] == 1 and got["unsplit"]["gate_pass"]["value"] == 0
    assert got["unsplit"]["gate_pass"]["failed_at"] == "attn"


def test_dense_layer_without_ple_and_with_k_eq_v(build, tmp_path):
    """The 12B / 31B form (no per-layer input, V = the raw K projection; the output is h2 x
    scalar after down): generated from tiny-moe's shape without experts, gated."""
    import dataclasses

    from socketlab.layer.generate import build_layer, write_layer
    from socketlab.layer.shapes import load_shape

    shape = dataclasses.replace(
        load_shape("tiny-moe"), experts=0, top_k=0, moe_inter=0, name="tiny-dense-keqv"
    )
    write_layer(build_layer(shape, 64, 16, 3), tmp_path / "d")
    for _, _, proc in every_run(build, tmp_path / "d", 4, shapes=((1, 1), (16, 2))):
        assert proc.returncode == 0, proc.stderr
        _, metrics = records(proc)
        gate = [m for m in metrics if m["name"] == "gate_rel_rms"]
        assert len(gate) == 17 and all(m["pass"] for m in gate)  # no pg pact pp


# ---- tensor-parallel slices (ref_layer.py's tp ranks; socketlab.layer.tp) ----


@pytest.fixture(scope="module")
def tp_ranks(tmp_path_factory) -> list[Path]:
    """Both ranks of tiny (sliding, 4 q / 2 KV heads) split TP2: 2 q heads, 1 KV head, 384 FFN
    rows each, 16 rows."""
    out = tmp_path_factory.mktemp("tp")
    args = ["--context", "100", "--batch", "16", "--seed", "3", "--tp", "2"]
    dirs = []
    for rank in (0, 1):
        d = out / f"r{rank}"
        proc = orchestrate("layer-dump", "tiny", *args, "--rank", rank, "--out", d, "--quiet")
        assert proc.returncode == 0, proc.stderr
        dirs.append(d)
    return dirs


def test_tp_slice_passes_gate(build, tp_ranks):
    for rank, dump in enumerate(tp_ranks):
        for _, batch, proc in every_run(build, dump, 4):
            meta, _ = gated(proc, batch)
            assert (
                meta["tp"],
                meta["rank"],
                meta["heads"],
                meta["kv_heads"],
                meta["inter"],
            ) == (2, rank, 2, 1, 384)


def test_tp_slice_without_the_all_reduce_fails_at_h1(build, tp_ranks):
    proc = run(
        build / "layer", dump=tp_ranks[1], batch=16, cpus=CPUS[2], steps=4, debug="drop-rest"
    )
    assert proc.returncode == 1 and "gate failed at boundary h1:" in proc.stderr, proc.stderr


def test_tp_slice_references_are_the_whole_layers(tp_ranks):
    """A rank's q / attn are the whole layer's heads (exactly / to FP32 rounding); its o and down
    are partial sums,
    and with o_rest / down_rest they give the whole layer's h1, h2 and out (FP32 rounding only);
    layer-check recomputes the slice (its bars at 1.0) and catches a changed o_rest."""
    from socketlab.layer.dump import Dump
    from socketlab.layer.generate import build_layer
    from socketlab.layer.reference import err
    from socketlab.layer.shapes import load_shape

    whole = build_layer(load_shape("tiny"), 100, 16, 3)
    for rank, path in enumerate(tp_ranks):
        d = Dump(path)
        q = slice(rank * 128, (rank + 1) * 128)  # 2 heads x 64
        assert np.array_equal(d.f32("ref.q"), whole.f32["q"][0, q])
        assert err(d.f32("ref.attn"), whole.f32["attn"][0, q])["rel_rms"] < 1e-6  # BLAS order
        assert np.allclose(d.f32("ref.o") + d.f32("o_rest"), whole.f32["o"][0], atol=1e-5)
        for b in ("h1", "h2", "out"):
            assert err(d.f32(f"ref.{b}"), whole.f32[b][0])["rel_rms"] < 1e-6, b
    assert orchestrate("layer-check", tp_ranks[0]).returncode == 0
    rest = tp_ranks[0] / "o_rest.f32"
    saved = rest.read_bytes()
    try:
        a = np.frombuffer(saved, "<f4").copy()
        a[:8] += 1.0
        rest.write_bytes(a.tobytes())
        proc = orchestrate("layer-check", tp_ranks[0])
        assert proc.returncode == 1 and "boundary h1" in proc.stdout + proc.stderr
    finally:
        rest.write_bytes(saved)


def test_bad_tp_split_is_one_line_exit_2(tmp_path):
    for args, message in (
        (["tiny", "--tp", "3"], "heads 4 and inter 768 must be multiples"),
        (["tiny", "--tp", "2", "--rank", "2"], "0 <= rank < tp"),
        (["tiny-moe", "--tp", "2"], "a MoE layer splits into head and expert"),
    ):
        proc = orchestrate(
            "layer-dump", *args, "--context", "8", "--out", tmp_path / "x", timeout=120
        )
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
