"""Build one layer (random or checkpoint weights), its B batch rows, both references, the dump."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

import numpy as np

from socketlab.layer import VERSION
from socketlab.layer.bf16 import round_f32
from socketlab.layer.dump import DumpWriter
from socketlab.layer.errors import LayerError
from socketlab.layer.history import history
from socketlab.layer.reference import (
    ATTN_SCALE,
    Rows,
    boundaries_for,
    err,
    layer_ref,
    routing_kl,
    top_k,
)
from socketlab.layer.rope import cos_sin
from socketlab.layer.shapes import Shape
from socketlab.layer.spread import REALIZATIONS, spread
from socketlab.layer.tp import rests, slice_shape, slice_weights, tp_slice
from socketlab.layer.weights import RESIDUAL_RMS, TAG_INPUTS, random_weights, rng_for

MAX_BATCH = 64
#: Generator variants (`layer-dump --variant`, a spec's layer_dump `variant:`):
#: near-tie makes the BF16 softmax probabilities the attention's dominant error, so rounding P
#: to one bf16 in the PV product (--pv-unsplit) shows against the bar: q_norm's weights x
#: NEAR_TIE_Q (logit spread ~0.07, every exp(s - max) in (0.8, 1], where bf16's spacing is
#: 2^-8), the KV history rounded to bf16 before both references (as a BF16 KV cache holds it),
#: and the residual stream at RMS NEAR_TIE_RESIDUAL (1: the attention branch is half of h1, so
#: its error reaches a MoE router's inputs as much as their own bf16 rounding does)
VARIANTS = ("default", "near-tie")
NEAR_TIE_Q = 0.03
NEAR_TIE_RESIDUAL = 1.0


@dataclasses.dataclass
class Layer:
    """Everything one dump holds, before it is written."""

    shape: Shape
    context: int
    seed: int
    weights: dict[str, np.ndarray]
    rows: Rows
    f32: dict[str, np.ndarray]  #: boundary -> [B, n]
    bf16: dict[str, np.ndarray]
    checkpoint: str | None = None
    variant: str = "default"
    #: a tensor-parallel slice (socketlab.layer.tp): rank of tp, and the whole layer's sizes
    tp: int = 1
    rank: int = 0
    full: Shape | None = None

    @property
    def batch(self) -> int:
        return self.rows.x_in.shape[0]

    def bar(self, row: int) -> dict[str, dict[str, float]]:
        """BF16-mode error vs FP32 per boundary for one batch row: the gate's bar."""
        return {b: err(self.bf16[b][row], self.f32[b][row]) for b in boundaries_for(self.shape)}

    @functools.cached_property
    def spread(self) -> list[dict[str, float]]:
        """Per row, boundary -> the largest rel RMS of REALIZATIONS other valid BF16 computations
        (socketlab.layer.spread); computed on first use, from the rows and weights as they are
        then (a test may replace them after build_layer)."""
        return spread(self.shape, self.weights, self.rows, self.f32, self.seed)


def row_inputs(shape: Shape, seed: int, row: int) -> tuple[np.ndarray, np.ndarray | None]:
    """The decode token's layer input (N(0, RESIDUAL_RMS^2)) and per-layer input (N(0, 1)),
    from the row's own stream."""
    rng = rng_for(seed, TAG_INPUTS, row)
    x = rng.standard_normal(shape.hidden, dtype=np.float32) * np.float32(RESIDUAL_RMS)
    pli = rng.standard_normal(shape.ple, dtype=np.float32) if shape.ple else None
    return x, pli


def build_layer(
    shape: Shape,
    context: int,
    batch: int,
    seed: int,
    weights: dict[str, np.ndarray] | None = None,
    checkpoint: str | None = None,
    variant: str = "default",
    tp: int = 1,
    rank: int = 0,
) -> Layer:
    sl = tp_slice(shape, tp, rank)  # checked before any work
    if variant not in VARIANTS:
        raise LayerError(f"--variant: expected one of {', '.join(VARIANTS)}, got {variant!r}")
    if context < 1:
        raise LayerError(f"--context: expected a positive number of tokens, got {context}")
    if not 1 <= batch <= MAX_BATCH:
        raise LayerError(f"--batch: expected 1..{MAX_BATCH}, got {batch}")
    if seed < 0:
        raise LayerError(f"--seed: expected a non-negative integer, got {seed}")
    w = weights if weights is not None else random_weights(shape, seed)
    near_tie = variant == "near-tie"
    if near_tie:
        w = dict(w)
        for name in ("self_attn.q_norm.weight",):
            w[name] = round_f32(w[name] * np.float32(NEAR_TIE_Q))
    cos, sin = cos_sin(shape, context)  # the decode token sits at position `context`
    xs, plis, kcs, vcs = [], [], [], []
    for i in range(batch):
        x, pli = row_inputs(shape, seed, i)
        kc, vc = history(shape, w, seed, i, context)
        if near_tie:
            x = x * np.float32(NEAR_TIE_RESIDUAL / RESIDUAL_RMS)
            kc, vc = round_f32(kc), round_f32(vc)
        xs.append(x)
        plis.append(pli)
        kcs.append(kc)
        vcs.append(vc)
    rows = Rows(
        x_in=np.stack(xs),
        per_layer_input=np.stack(plis) if shape.ple else None,
        kcache=kcs,
        vcache=vcs,
        cos=cos,
        sin=sin,
    )
    f32 = layer_ref(shape, w, rows, bf16=False)
    if shape.moe:  # the FP32 reference's experts, pinned for every other computation
        rows.router_idx = top_k(f32["rs"], shape.top_k)
    full = shape
    if tp > 1:  # the rank's slice: a smaller layer plus the other ranks' o and down (FP32)
        o_rest, down_rest = rests(shape, w, f32, sl)
        shape, w = slice_shape(shape, sl), slice_weights(shape, w, sl)
        kv = slice(sl.k0, sl.k1)
        rows = dataclasses.replace(
            rows,
            kcache=[k[kv] for k in rows.kcache],
            vcache=[v[kv] for v in rows.vcache],
            o_rest=o_rest,
            down_rest=down_rest,
        )
        f32 = layer_ref(shape, w, rows, bf16=False)
    return Layer(
        shape=shape,
        context=context,
        seed=seed,
        weights=w,
        rows=rows,
        f32=f32,
        bf16=layer_ref(shape, w, rows, bf16=True),
        checkpoint=checkpoint,
        variant=variant,
        tp=tp,
        rank=rank,
        full=full,
    )


def routing_meta(layer: Layer, row: int) -> dict[str, Any]:
    """A MoE row's routing: the pinned experts, and how far the BF16 reference's routing
    distribution lies from FP32's (the bar a stage's routing KL is compared with)."""
    s = layer.shape
    rs32, rs16 = layer.f32["rs"][row : row + 1], layer.bf16["rs"][row : row + 1]
    own = top_k(rs16, s.top_k)[0]
    pinned = layer.rows.router_idx[row]
    return {
        "top_k": [int(e) for e in pinned],
        "kl_bf16": float(routing_kl(rs32, rs16)[0]),
        "flips_bf16": int(len(set(pinned.tolist()) - set(own.tolist()))),
    }


def meta_for(layer: Layer, row: int) -> dict[str, Any]:
    s = layer.shape
    cl = s.cache_len(layer.context)
    # Keys and order as ref_layer.py writes them (l2r_layer.c finds them by `"key": `), then ours.
    return {
        "hf": layer.checkpoint,
        "layer": s.layer,
        "ctx": layer.context,
        "layer_type": s.layer_type,
        "hidden": s.hidden,
        "heads": s.heads,
        "kv_heads": s.kv_heads,
        "head_dim": s.head_dim,
        "window": s.window,
        "cache_len": cl,
        "eps": s.eps,
        "inter": s.inter,
        "ple": s.ple,
        "moe": s.moe,
        "kv_eq": s.kv_eq,
        "tp": layer.tp,
        "rank": layer.rank,
        "full_heads": (layer.full or s).heads,
        "full_kv_heads": (layer.full or s).kv_heads,
        "full_inter": (layer.full or s).inter,
        "token": None,
        "torch": None,
        "hf_check": None,
        "generator": f"socketlab.layer {VERSION}",
        "shape": s.name,
        "seed": layer.seed,
        "batch_row": row,
        "batch": layer.batch,
        "position": layer.context,
        "attn_scale": ATTN_SCALE,
        "rope": {
            "type": s.rope_type,
            "theta": s.rope_theta,
            "partial_rotary_factor": s.partial_rotary_factor,
        },
        "weights": "checkpoint" if layer.checkpoint else "random",
        "variant": layer.variant,
        **(
            {
                "experts": s.experts,
                "top_k": s.top_k,
                "moe_inter": s.moe_inter,
                "routing": routing_meta(layer, row),
            }
            if s.moe
            else {}
        ),
        "bf16_ref_err": layer.bar(row),
        # after bf16_ref_err (l2r_layer.c reads that one; this key is ours): see spread.py
        "bf16_ref_spread": {"realizations": REALIZATIONS, "rel_rms_max": layer.spread[row]},
    }


def write_layer(layer: Layer, out: str | Path) -> list[Path]:
    """Row 0 into `out`, row i into `out/row<i>` (weights symlinked to row 0's).

    Returns the dirs.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise LayerError(f"{out}: --out: exists and is not a directory")
    s = layer.shape
    dirs = []
    for i in range(layer.batch):
        d = out if i == 0 else out / f"row{i}"
        wr = DumpWriter(d)
        link = out if i else None
        # state-dict order of Gemma4TextDecoderLayer (the manifest order is cosmetic)
        order = [n for n, *_ in s.matrices()[:2]] + [n for n, *_ in s.norms()[1:3]]
        names = (
            order + [n for n, *_ in s.matrices()[2:]] + [n for n, _ in s.norms() if n not in order]
        )
        names += [n for n, _ in s.expert_tensors()]
        for name in names:
            wr.tensor("w." + name, layer.weights[name], "bf16", link_to=link)
        wr.tensor("layer_scalar", layer.weights["layer_scalar"].reshape(1), "f32")
        wr.tensor("x_in", layer.rows.x_in[i], "f32")
        if s.ple:
            wr.tensor("per_layer_input", layer.rows.per_layer_input[i], "f32")
        if s.moe:  # as ref_layer.py: the pinned experts as f32
            wr.tensor("router_idx", layer.rows.router_idx[i].astype(np.float32), "f32")
        if layer.tp > 1:  # the other ranks' share, added where the all-reduce lands
            wr.tensor("o_rest", layer.rows.o_rest[i], "f32")
            wr.tensor("down_rest", layer.rows.down_rest[i], "f32")
        wr.tensor("cos", layer.rows.cos, "f32")
        wr.tensor("sin", layer.rows.sin, "f32")
        if layer.rows.kcache[i].shape[1]:
            # rows before the decode token; the stage appends its own row
            wr.tensor("kcache", layer.rows.kcache[i], "bf16")
            wr.tensor("vcache", layer.rows.vcache[i], "bf16")
        for b in boundaries_for(s):
            wr.tensor("ref." + b, layer.f32[b][i], "f32")
        wr.finish(meta_for(layer, i))
        dirs.append(d)
    return dirs
