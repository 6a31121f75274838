"""socketlab.layer: dumps, the FP32/BF16 reference, and its check against transformers.

The dump is the contract with native/layer (docs/layer.md): these tests write dumps through
the real CLI, read them back, plant errors the reader/validator must catch, and check the
numpy reference against transformers' Gemma4TextDecoderLayer at every op boundary.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from socketlab.layer.bf16 import from_bits, round_f32, to_bits
from socketlab.layer.check import REL_RMS_FLOOR, gate, open_dump, recompute
from socketlab.layer.dump import Dump
from socketlab.layer.generate import build_layer
from socketlab.layer.history import hidden_states, kv_rows
from socketlab.layer.reference import BOUNDARIES, boundaries_for
from socketlab.layer.shapes import load_shape


@pytest.fixture(autouse=True)
def _builtin_sys_intern(monkeypatch):
    """ansible-core, once imported in-process by other tests, replaces sys.intern with a callable
    object; torch._dynamo (imported by transformers' Gemma-4 module) accepts only a function
    there and fails to import. Give these tests the builtin back."""
    original = getattr(type(sys.intern), "unpatched_implementation", None)
    if original is not None:
        monkeypatch.setattr(sys, "intern", original)


META_KEYS = (
    "layer",
    "ctx",
    "layer_type",
    "hidden",
    "heads",
    "kv_heads",
    "head_dim",
    "window",
    "cache_len",
    "eps",
    "inter",
    "ple",
    "moe",
    "kv_eq",
    "tp",
    "rank",
    "full_heads",
    "full_kv_heads",
    "full_inter",
    "token",
    "bf16_ref_err",
    "generator",
    "shape",
    "seed",
    "batch_row",
    "attn_scale",
)
WEIGHTS = (
    "input_layernorm",
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "self_attn.q_norm",
    "self_attn.k_norm",
    "post_attention_layernorm",
    "pre_feedforward_layernorm",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
    "post_feedforward_layernorm",
    "per_layer_input_gate",
    "per_layer_projection",
    "post_per_layer_input_norm",
)


def orchestrate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "socketlab.cli", *args], capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def tiny_dump(tmp_path_factory) -> Path:
    """tiny.yaml (window 32) at 100 tokens of context, 3 batch rows, through the CLI."""
    out = tmp_path_factory.mktemp("tiny") / "dump"
    r = orchestrate(
        "layer-dump", "tiny", "--context", "100", "--batch", "3", "--seed", "7", "--out", str(out)
    )
    assert r.returncode == 0, r.stderr
    return out


def test_bf16_rounding_is_nearest_even():
    # 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: ties go to the even one (1);
    # 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: even is 1 + 2^-6
    x = np.array([1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8, 1.0 + 2**-8 + 2**-20, -2.5], np.float32)
    want = np.array([1.0, 1.0, 1.0 + 2**-6, 1.0 + 2**-7, -2.5], np.float32)
    assert np.array_equal(round_f32(x), want)
    assert to_bits(np.array([1.0], np.float32))[0] == 0x3F80
    assert from_bits(np.array([0xC020], np.uint16))[0] == -2.5


def test_dump_has_every_tensor_of_the_contract(tiny_dump):
    d = Dump(tiny_dump)
    for w in WEIGHTS:
        assert d.entries[f"w.{w}.weight"][0] == "bf16", w
    for b in BOUNDARIES:
        assert d.entries[f"ref.{b}"][0] == "f32", b
    s = load_shape("tiny")
    assert d.entries["kcache"] == ("bf16", (s.kv_heads, s.window - 1, s.head_dim))
    assert d.entries["vcache"] == ("bf16", (s.kv_heads, s.window - 1, s.head_dim))
    for name, dims in (
        ("layer_scalar", (1,)),
        ("x_in", (s.hidden,)),
        ("per_layer_input", (s.ple,)),
        ("cos", (s.head_dim,)),
        ("sin", (s.head_dim,)),
    ):
        assert d.entries[name] == ("f32", dims), name
    assert set(META_KEYS) <= set(d.meta)
    assert d.meta["layer_type"] == "sliding_attention" and d.meta["cache_len"] == s.window - 1
    assert d.meta["attn_scale"] == 1.0 and d.meta["generator"].startswith("socketlab.layer ")
    # l2r_layer.c finds meta keys as `"key": ` (json indent form)
    assert '"hidden": 256' in (tiny_dump / "meta.json").read_text()
    lines = (tiny_dump / "manifest.txt").read_text().splitlines()
    assert "w.self_attn.q_proj.weight bf16 256 256" in lines and "kcache bf16 2 31 64" in lines


def test_batch_rows_are_distinct_complete_dumps(tiny_dump):
    dumps = open_dump(str(tiny_dump))
    assert [d.meta["batch_row"] for d in dumps] == [0, 1, 2]
    for d in dumps[1:]:
        assert os.path.islink(d.path / "w.mlp.up_proj.weight.bf16")
        assert np.array_equal(d.raw("w.mlp.up_proj.weight"), dumps[0].raw("w.mlp.up_proj.weight"))
        for name in ("x_in", "per_layer_input", "kcache", "vcache", "ref.out"):
            assert not np.array_equal(d.raw(name), dumps[0].raw(name)), name
        assert d.meta["bf16_ref_err"] != dumps[0].meta["bf16_ref_err"]


def test_dump_round_trips_the_generated_layer(tiny_dump):
    """Same seed -> the same layer; every tensor read back equals what was generated."""
    s = load_shape("tiny")
    layer = build_layer(s, 100, 3, 7)
    for i, d in enumerate(open_dump(str(tiny_dump))):
        assert np.array_equal(d.f32("x_in"), layer.rows.x_in[i])
        assert np.array_equal(d.f32("kcache"), round_f32(layer.rows.kcache[i]))
        for b in BOUNDARIES:
            assert np.array_equal(d.f32(f"ref.{b}"), layer.f32[b][i]), b
        assert d.meta["bf16_ref_err"] == json.loads(json.dumps(layer.bar(i)))
    for w in WEIGHTS:
        assert np.array_equal(Dump(tiny_dump).f32(f"w.{w}.weight"), layer.weights[f"{w}.weight"])
    other = build_layer(s, 100, 1, 8)
    assert not np.array_equal(
        other.weights["mlp.up_proj.weight"], layer.weights["mlp.up_proj.weight"]
    )


def test_bf16_bars_are_positive_small_and_the_output_cosine_holds(tiny_dump):
    for d in open_dump(str(tiny_dump)):
        bars = d.meta["bf16_ref_err"]
        assert list(bars) == list(BOUNDARIES)
        assert bars["xn"]["rel_rms"] == 0.0  # no BF16 rounding before the first norm
        for b in BOUNDARIES[1:]:
            assert 1e-4 < bars[b]["rel_rms"] < 1e-2, (b, bars[b])
        assert bars["out"]["cos"] >= 0.99999


def test_kv_cache_is_the_tail_of_the_whole_history(tiny_dump):
    """The sliding layer's cache is the last window-1 rows of all C positions' K/V (computed only
    for those rows by the generator; here for every position and sliced)."""
    s = load_shape("tiny")
    d = Dump(tiny_dump)
    # the stage's layer inputs are the dump's BF16 weights, which are the generator's exactly
    w = {n[2:]: d.f32(n) for n in d.entries if n.startswith("w.")}
    k, v = kv_rows(s, w, hidden_states(s, 7, 0, 0, 100), np.arange(100))
    assert np.array_equal(round_f32(k[:, -(s.window - 1) :]), d.f32("kcache"))
    assert np.array_equal(round_f32(v[:, -(s.window - 1) :]), d.f32("vcache"))


def test_full_layer_keeps_the_whole_context(tmp_path):
    r = orchestrate("layer-dump", "tiny-full", "--context", "40", "--out", str(tmp_path / "f"))
    assert r.returncode == 0, r.stderr
    d = Dump(tmp_path / "f")
    assert d.meta["cache_len"] == 40 and d.meta["window"] is None
    assert d.entries["kcache"] == ("bf16", (2, 40, 128))
    # proportional RoPE: only a quarter of each head rotates; the rest has cos 1, sin 0
    cos, sin = d.f32("cos"), d.f32("sin")
    assert np.all(cos[16:64] == 1.0) and np.all(sin[16:64] == 0.0) and np.any(sin[:16] != 0)


def test_layer_check_passes_a_good_dump(tiny_dump):
    r = orchestrate("layer-check", str(tiny_dump))
    assert r.returncode == 0, r.stdout + r.stderr
    rows = {line.split()[0]: line.split() for line in r.stdout.splitlines()[2:]}
    assert set(rows) == set(BOUNDARIES)
    # the BF16 stage recomputed from the dump reproduces its own bar
    for b in BOUNDARIES[1:]:
        assert rows[b][-1] == "ok" and 0.99 < float(rows[b][-2]) < 1.01, rows[b]


def test_gate_floor_for_zero_bars(tiny_dump):
    d = Dump(tiny_dump)
    ref = d.f32("ref.xn")
    ok = gate({"xn": ref * np.float32(1 + 1e-7)}, d)[0]
    bad = gate({"xn": ref * np.float32(1 + 1e-5)}, d)[0]
    assert ok.ok and ok.limit == REL_RMS_FLOOR and not bad.ok


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst, symlinks=True)
    return dst


def _edit(path: Path, name: str, fn) -> None:
    d = Dump(path)
    dtype, _ = d.entries[name]
    f = path / f"{name}.{dtype}"
    a = d.raw(name).copy()
    fn(a)
    if f.is_symlink():
        f.unlink()
    a.tofile(f)


@pytest.mark.parametrize(
    "plant, boundary",
    [
        # one row of q_proj perturbed: q is the first boundary off
        ("w.self_attn.q_proj.weight", "q"),
        ("w.mlp.down_proj.weight", "down"),
        ("x_in", "xn"),
        ("kcache", "attn"),
    ],
)
def test_planted_errors_fail_the_gate_and_name_the_boundary(tiny_dump, tmp_path, plant, boundary):
    d = _copy(tiny_dump, tmp_path / "d")

    def perturb(a):
        if a.dtype == np.uint16:  # bf16 bits: bump the exponent of a row (x2 or /2)
            flat = a.reshape(a.shape[0], -1) if a.ndim > 1 else a.reshape(1, -1)
            flat[0] = flat[0] ^ np.uint16(0x0080)
        else:
            a[:8] += 1.0

    _edit(d, plant, perturb)
    results = recompute(open_dump(str(d)))
    failing = [g.boundary for g in results[0] if not g.ok]
    assert failing and failing[0] == boundary, failing
    r = orchestrate("layer-check", str(d))
    assert r.returncode == 1
    assert f"gate FAILED at row 0 boundary {boundary}:" in r.stderr


def test_planted_error_in_a_batch_row_names_the_row(tiny_dump, tmp_path):
    d = _copy(tiny_dump, tmp_path / "d")
    _edit(d / "row2", "ref.out", lambda a: a.__setitem__(slice(0, 4), a[:4] + 0.5))
    r = orchestrate("layer-check", str(d))
    assert r.returncode == 1 and "gate FAILED at row 2 boundary out:" in r.stderr


def _manifest_edit(d: Path, fn) -> None:
    m = d / "manifest.txt"
    m.write_text("\n".join(fn(m.read_text().splitlines())) + "\n")


@pytest.mark.parametrize(
    "break_it, message",
    [
        (
            lambda d: _manifest_edit(
                d, lambda ls: [x for x in ls if not x.startswith("w.mlp.up_proj")]
            ),
            r"manifest.txt: w.mlp.up_proj.weight: missing; expected w.mlp.up_proj.weight bf16 768 "
            r"256",
        ),
        (
            lambda d: _manifest_edit(
                d, lambda ls: [x.replace("ref.q f32 256", "ref.q f32 255") for x in ls]
            ),
            r"manifest.txt: ref.q: f32 \[255\], expected f32 \[256\]",
        ),
        (
            lambda d: (d / "ref.out.f32").write_bytes((d / "ref.out.f32").read_bytes()[:100]),
            r"ref.out.f32: 100 bytes, expected 1024 \(f32 \[256\]\); truncated or wrong shape",
        ),
        (
            lambda d: (d / "cos.f32").unlink(),
            r"cos.f32: missing; the manifest lists cos f32 \[64\]",
        ),
        (lambda d: (d / "row1" / "x_in.f32").unlink(), r"row1/x_in.f32: missing"),
        (
            lambda d: __import__("shutil").rmtree(d / "row2"),
            r"meta.json: batch: 3, but 2 row dump\(s\) found; expected .*/row1 \.\. row2",
        ),
        (
            lambda d: _manifest_edit(d, lambda ls: [*ls, "extra f64 3"]),
            r"manifest.txt:\d+: extra: dtype 'f64', expected bf16 or f32",
        ),
        (lambda d: (d / "meta.json").write_text("{"), r"meta.json: not valid JSON"),
        (
            lambda d: (d / "meta.json").write_text(
                json.dumps({**json.loads((d / "meta.json").read_text()), "hidden": "x"})
            ),
            r"meta.json: hidden: expected a non-negative integer, got 'x'",
        ),
    ],
)
def test_broken_dump_is_one_line_exit_2(tiny_dump, tmp_path, break_it, message):
    d = _copy(tiny_dump, tmp_path / "d")
    break_it(d)
    r = orchestrate("layer-check", str(d))
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("orchestrate: error: "), r.stderr
    import re

    assert re.search(message, lines[0]), lines[0]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--context", "0"], "--context: expected a positive number of tokens, got 0"),
        (["--context", "8", "--batch", "0"], "--batch: expected 1..64, got 0"),
        (["--context", "8", "--seed", "-1"], "--seed: expected a non-negative integer, got -1"),
        (["--context", "8", "--layer", "3"], "--checkpoint and --layer: expected both or neither"),
        (["--context", "x"], "argument --context: invalid int value: 'x'"),
    ],
)
def test_bad_cli_args_are_one_line_exit_2(tmp_path, args, message):
    r = orchestrate("layer-dump", "tiny", *args, "--out", str(tmp_path / "d"))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.stderr
    assert not (tmp_path / "d").exists()


def test_e2b_l0_at_2k_context_generates(tmp_path):
    """The full-size sliding layer at 2K: cache of window-1 rows, bars in range (no timing
    asserted; the generation time is in docs/layer.md)."""
    r = orchestrate(
        "layer-dump",
        "gemma4-e2b-l0",
        "--context",
        "2048",
        "--batch",
        "2",
        "--out",
        str(tmp_path / "e2b"),
    )
    assert r.returncode == 0, r.stderr
    dumps = open_dump(str(tmp_path / "e2b"))
    assert len(dumps) == 2 and dumps[0].entries["kcache"] == ("bf16", (1, 511, 256))
    assert (
        sum(os.path.getsize(tmp_path / "e2b" / f"w.{w}.weight.bf16") for w in WEIGHTS) > 69 * 2**20
    )
    assert dumps[1].meta["bf16_ref_err"]["out"]["cos"] >= 0.99999


# --- the numpy reference against transformers' Gemma4TextDecoderLayer -----------------------

HF_TOL = 1e-5  #: rel RMS at every boundary (issue 12)
HF_CONTEXT = 1024  #: > E2B's 512-token window: the sliding layer must drop the oldest rows


def _hf_config(shape):
    from transformers.models.gemma4 import Gemma4TextConfig

    # Two layers (HF forces the last one to full attention): 0 sliding, 1 full; the layer
    # under test is the one of the shape's kind, the other only fills the config.
    rope = {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {
            "rope_type": "proportional",
            "partial_rotary_factor": 0.25,
            "rope_theta": 1000000.0,
        },
    }
    kind = shape.layer_type
    rope[kind] = {"rope_type": shape.rope_type, "rope_theta": shape.rope_theta}
    if shape.rope_type == "proportional":
        rope[kind]["partial_rotary_factor"] = shape.partial_rotary_factor
    sliding = shape.attention == "sliding"
    cfg = Gemma4TextConfig(
        vocab_size=256,
        vocab_size_per_layer_input=256,
        hidden_size=shape.hidden,
        intermediate_size=shape.inter,
        num_hidden_layers=2,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        head_dim=shape.head_dim if sliding else 256,
        global_head_dim=512 if sliding else shape.head_dim,
        sliding_window=shape.window if sliding else 512,
        layer_types=["sliding_attention", "full_attention"],
        rope_parameters=rope,
        hidden_size_per_layer_input=shape.ple,
        rms_norm_eps=shape.eps,
        num_kv_shared_layers=0,
        attention_k_eq_v=shape.kv_eq,
        num_global_key_value_heads=shape.kv_heads if shape.kv_eq else None,
        max_position_embeddings=4 * HF_CONTEXT,
        enable_moe_block=shape.moe,
        **(
            {
                "num_experts": shape.experts,
                "top_k_experts": shape.top_k,
                "moe_intermediate_size": shape.moe_inter,
            }
            if shape.moe
            else {}
        ),
    )
    cfg._attn_implementation = "eager"
    return cfg, 0 if sliding else 1


def hf_check(name: str, context: int, seed: int = 3) -> dict[str, float]:
    """rel RMS of the numpy FP32 reference against HF's layer at every boundary, plus the
    inputs both sides computed themselves (RoPE cos/sin, the KV history)."""
    import torch
    from transformers import DynamicCache
    from transformers.models.gemma4.modeling_gemma4 import (
        Gemma4TextDecoderLayer,
        Gemma4TextRotaryEmbedding,
        apply_rotary_pos_emb,
    )

    from socketlab.layer.reference import err

    torch.set_grad_enabled(False)
    # transformers renamed the layer's `past_key_values` argument to `cache` (5.2x)
    params = inspect.signature(Gemma4TextDecoderLayer.forward).parameters
    cache_kw = "cache" if "cache" in params else "past_key_values"
    shape = load_shape(name)
    ours = build_layer(shape, context, 1, seed)
    cfg, idx = _hf_config(shape)
    hf = Gemma4TextDecoderLayer(cfg, idx).float().eval()
    state = {k: torch.from_numpy(v.copy()) for k, v in ours.weights.items()}
    missing, unexpected = hf.load_state_dict(state, strict=False)
    assert not missing and not unexpected, (missing, unexpected)  # same tensors, same names
    rotary = Gemma4TextRotaryEmbedding(cfg)
    ple = torch.zeros(1, context, shape.ple) if shape.ple else None

    def rope(positions):
        x = torch.zeros(1, len(positions), shape.hidden)
        return rotary(x, torch.tensor([positions]), shape.layer_type)

    # Prefill HF's own cache with the same history hidden states at positions 0..C-1: HF
    # projects, norms and ropes them, and its sliding cache keeps what it keeps.
    cache = DynamicCache(config=cfg)
    xh = torch.from_numpy(hidden_states(shape, seed, 0, 0, context))[None]
    hf(
        xh,
        per_layer_input=ple,
        shared_kv_states={},
        position_embeddings=rope(list(range(context))),
        attention_mask=None,
        position_ids=torch.arange(context)[None],
        **{cache_kw: cache},
    )
    k_hist = cache.layers[idx].keys[0].clone()
    v_hist = cache.layers[idx].values[0].clone()

    cap: dict[str, torch.Tensor] = {}

    def out_hook(key):
        return lambda m, a, o: cap.__setitem__(key, (o[0] if isinstance(o, tuple) else o).clone())

    def in_hook(key):
        return lambda m, a: cap.__setitem__(key, a[0].clone())

    attn = hf.self_attn
    outs = [
        ("xn", hf.input_layernorm),
        ("q", attn.q_proj),
        ("k", attn.k_proj),
        ("q_normed", attn.q_norm),
        ("o", attn.o_proj),
        ("xn2", hf.pre_feedforward_layernorm),
        ("gate", hf.mlp.gate_proj),
        ("up", hf.mlp.up_proj),
        ("down", hf.mlp.down_proj),
    ]
    ins = [("attn", attn.o_proj), ("h1", hf.pre_feedforward_layernorm), ("act", hf.mlp.down_proj)]
    if not shape.kv_eq:
        outs.append(("v", attn.v_proj))
    if shape.ple:
        outs += [("pg", hf.per_layer_input_gate), ("pp", hf.per_layer_projection)]
        ins += [("h2", hf.per_layer_input_gate), ("pact", hf.per_layer_projection)]
    if shape.moe:  # ref_layer.py's MoE hooks: the router's logits and weights, xn3, the experts
        outs += [
            ("rs", hf.router.proj),
            ("xn3", hf.pre_feedforward_layernorm_2),
            ("moe", hf.experts),
        ]
        hf.router.register_forward_hook(
            lambda m, a, o: (
                cap.__setitem__("rw", o[1].clone()) or cap.__setitem__("router_idx", o[2].clone())
            )
        )
    for key, mod in outs:
        mod.register_forward_hook(out_hook(key))
    for key, mod in ins:
        mod.register_forward_pre_hook(in_hook(key))
    cos, sin = rope([context])
    x = torch.from_numpy(ours.rows.x_in[0].copy())[None, None]
    pli = torch.from_numpy(ours.rows.per_layer_input[0].copy())[None, None] if shape.ple else None
    cap["out"] = hf(
        x,
        per_layer_input=pli,
        shared_kv_states={},
        position_embeddings=(cos, sin),
        attention_mask=None,
        position_ids=torch.tensor([[context]]),
        **{cache_kw: cache},
    ).clone()
    cap["qn"] = apply_rotary_pos_emb(cap.pop("q_normed"), cos, sin, unsqueeze_dim=2)
    # the new token's row as HF cached it: k-normed + roped, v-normed
    cap["kn"] = cache.layers[idx].keys[0, :, -1]
    cap["vn"] = cache.layers[idx].values[0, :, -1]
    if shape.kv_eq:
        cap["v"] = cap["k"]  # attention_k_eq_v: V is the raw K projection
    if shape.moe:
        if not shape.ple:  # the layer's output is h2 x layer_scalar
            cap["h2"] = cap["out"] / torch.from_numpy(ours.weights["layer_scalar"])
        assert cap["router_idx"].numpy().ravel().tolist() == ours.rows.router_idx[0].tolist()

    table = {
        b: err(ours.f32[b][0], cap[b].double().numpy().ravel())["rel_rms"]
        for b in boundaries_for(shape)
    }
    table["input cos"] = err(ours.rows.cos, cos.double().numpy().ravel())["rel_rms"]
    table["input sin"] = err(ours.rows.sin, sin.double().numpy().ravel())["rel_rms"]
    assert k_hist.shape == ours.rows.kcache[0].shape, (k_hist.shape, ours.rows.kcache[0].shape)
    table["input kcache"] = err(ours.rows.kcache[0], k_hist.double().numpy())["rel_rms"]
    table["input vcache"] = err(ours.rows.vcache[0], v_hist.double().numpy())["rel_rms"]
    return table


@pytest.mark.parametrize("name", ["gemma4-e2b-l0", "gemma4-e2b-l4", "tiny-moe"])
def test_reference_matches_transformers_gemma4_layer(name, capsys):
    """Every op boundary of the numpy FP32 reference within 1e-5 rel RMS of transformers'
    Gemma4TextDecoderLayer (FP32, eager attention), over a 1024-token history (longer than the
    sliding window), with the same weights. The table goes to the test output."""
    import transformers

    table = hf_check(name, HF_CONTEXT)
    shape = load_shape(name)
    with capsys.disabled():
        print(
            f"\n{name} ({shape.layer_type}, context {HF_CONTEXT}, cache rows "
            f"{shape.cache_len(HF_CONTEXT)}) vs transformers {transformers.__version__} "
            "Gemma4TextDecoderLayer, FP32 eager:"
        )
        print("| boundary | rel RMS |\n|---|---|")
        for b, v in table.items():
            print(f"| {b} | {v:.2e} |")
    bad = {b: v for b, v in table.items() if not v <= HF_TOL}
    assert not bad, bad


def _tiny_checkpoint(path: Path, drop: str | None = None) -> Path:
    """A two-layer Gemma-4 text checkpoint written by transformers/safetensors (BF16, the
    multimodal layout: model.language_model.layers.N.*), matching tiny.yaml / tiny-full.yaml."""
    from tests.support.tiny_checkpoint import tiny_checkpoint

    return tiny_checkpoint(path, drop)


def test_checkpoint_layer_gives_its_real_weights(tmp_path):
    ckpt = _tiny_checkpoint(tmp_path / "ckpt")
    out = tmp_path / "d"
    r = orchestrate(
        "layer-dump",
        "tiny-full",
        "--context",
        "40",
        "--checkpoint",
        str(ckpt),
        "--layer",
        "1",
        "--out",
        str(out),
    )
    assert r.returncode == 0, r.stderr
    import torch
    from safetensors.torch import load_file as load_torch

    want = load_torch(str(ckpt / "model.safetensors"))
    d = Dump(out)
    assert d.meta["weights"] == "checkpoint" and d.meta["hf"] == str(ckpt) and d.meta["layer"] == 1
    for w in WEIGHTS:
        ref = want[f"model.language_model.layers.1.{w}.weight"].view(torch.int16).numpy()
        assert np.array_equal(d.raw(f"w.{w}.weight").view(np.int16), ref), w
    assert d.f32("layer_scalar")[0] == 0.75
    assert orchestrate("layer-check", str(out)).returncode == 0


@pytest.mark.parametrize(
    "shape, layer, drop, message",
    [
        (
            "tiny-full",
            0,
            None,
            r"config.json: layer 0: attention 'sliding', but .*tiny-full.yaml says 'full'",
        ),
        (
            "tiny",
            0,
            "model.language_model.layers.0.mlp.down_proj.weight",
            r"\(layer 0\): mlp.down_proj.weight: missing; expected a tensor of shape \[256, 768\]",
        ),
        ("tiny", 2, None, r"config.json: --layer: expected 0\.\.1, got 2"),
    ],
)
def test_bad_checkpoint_is_one_line_exit_2(tmp_path, shape, layer, drop, message):
    import re

    ckpt = _tiny_checkpoint(tmp_path / "ckpt", drop)
    r = orchestrate(
        "layer-dump",
        shape,
        "--context",
        "8",
        "--checkpoint",
        str(ckpt),
        "--layer",
        str(layer),
        "--out",
        str(tmp_path / "d"),
    )
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and re.search(message, lines[0]), r.stderr
