"""The layer's math in numpy float32: one decode step of a Gemma-4 text decoder layer.

Follows transformers' Gemma4TextDecoderLayer (checked against it in
tests/test_layer_reference.py) and names the op boundaries as ref_layer.py did:
xn q qn k v kn vn attn o h1 xn2 gate up act down h2 pg pact pp out; a MoE layer (26B-A4B) adds
rs rw xn3 moe after down: the router's logits and the top-k weights, the experts' input norm and
their weighted sum (ref_layer.py's MoE branch, HF's Gemma4TextRouter / Gemma4TextExperts).

BF16 mode is what a BF16 kernel computes: BF16 weights (the weights here are BF16-exact
already), every GEMV input rounded to BF16, BF16 KV (history rows and the new row), FP32
accumulation. Its distance from FP32 at each boundary is the bar the stage is held to.
Rows are batched through the GEMVs (one matrix product per op); attention runs per row over
that row's own history.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from socketlab.layer.bf16 import round_f32
from socketlab.layer.rope import rotate
from socketlab.layer.shapes import Shape

BOUNDARIES = (
    "xn",
    "q",
    "qn",
    "k",
    "v",
    "kn",
    "vn",
    "attn",
    "o",
    "h1",
    "xn2",
    "gate",
    "up",
    "act",
    "down",
    "h2",
    "pg",
    "pact",
    "pp",
    "out",
)
#: the MoE block's boundaries, after down (ref_layer.py's order)
MOE_BOUNDARIES = ("rs", "rw", "xn3", "moe")
_PLE_BOUNDARIES = ("pg", "pact", "pp")
#: Gemma-4's score scale: q and k are RMS-normed, so there is no 1/sqrt(head_dim).
ATTN_SCALE = 1.0
_GELU_C = np.float32(np.sqrt(2.0 / np.pi))


@dataclasses.dataclass
class Rows:
    """The decode step's inputs for B batch rows."""

    x_in: np.ndarray  #: [B, hidden]
    per_layer_input: np.ndarray | None  #: [B, ple]
    kcache: list[np.ndarray]  #: per row [kv_heads, T, head_dim], k-normed and roped
    vcache: list[np.ndarray]  #: per row [kv_heads, T, head_dim], v-normed
    cos: np.ndarray  #: [head_dim], the decode position's RoPE
    sin: np.ndarray
    #: [B, top_k] MoE: the experts each row uses, pinned (ref_layer.py pins HF's choice so a
    #: near-tie can't flip it between the references); None: the computation's own top-k
    router_idx: np.ndarray | None = None
    #: [B, hidden] a tensor-parallel slice: the other ranks' share of o and of down (FP32),
    #: added where the cross-socket all-reduce lands (ref_layer.py's o_rest / down_rest); the
    #: slice's own o and down boundaries are its partial sums. None: a whole layer
    o_rest: np.ndarray | None = None
    down_rest: np.ndarray | None = None


def boundaries_for(shape: Shape) -> tuple[str, ...]:
    out = [b for b in BOUNDARIES if shape.ple or b not in _PLE_BOUNDARIES]
    if shape.moe:
        i = out.index("down") + 1
        out[i:i] = MOE_BOUNDARIES
    return tuple(out)


def top_k(rs: np.ndarray, k: int) -> np.ndarray:
    """[B, k] the k largest logits' experts per row, largest first (torch.topk's order)."""
    return np.argsort(-rs, axis=-1, kind="stable")[:, :k]


def routing_kl(rs_ref: np.ndarray, rs: np.ndarray) -> np.ndarray:
    """[B] KL(softmax(rs_ref) || softmax(rs)) in nats: how far a computation's routing
    distribution lies from the reference's (float64)."""

    def logp(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, np.float64)
        m = x.max(axis=-1, keepdims=True)
        return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))

    lp, lq = logp(rs_ref), logp(rs)
    return (np.exp(lp) * (lp - lq)).sum(axis=-1)


def rms(x: np.ndarray, w: np.ndarray | None, eps: float) -> np.ndarray:
    """x * (mean(x^2) + eps)^-1/2 [* w] over the last axis, float32 (Gemma4RMSNorm)."""
    x = x.astype(np.float32, copy=False)
    ms = np.mean(x * x, axis=-1, keepdims=True, dtype=np.float32) + np.float32(eps)
    y = x * np.power(ms, np.float32(-0.5))
    return (y * w if w is not None else y).astype(np.float32, copy=False)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """gelu_pytorch_tanh in float32."""
    x = x.astype(np.float32, copy=False)
    inner = _GELU_C * (x + np.float32(0.044715) * x * x * x)
    return (np.float32(0.5) * x * (np.float32(1.0) + np.tanh(inner))).astype(np.float32)


def softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True, dtype=np.float32)).astype(np.float32)


def _split_bf16(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x as hi + lo, both bf16 (as float32): what the packed kernels feed the bf16 products."""
    hi = round_f32(x)
    return hi, round_f32(x - hi)


def _chunks(n: int, order: np.random.Generator) -> list[slice]:
    """[0, n) cut at 1..7 random points, the pieces in a random order: a reduction summed as a
    K-split kernel sums it (views, no copies: cheap on E2B's weights)."""
    k = min(n - 1, int(order.integers(1, 8)))
    edges = [0, *np.sort(order.choice(np.arange(1, n), size=k, replace=False)).tolist(), n]
    pieces = [slice(a, b) for a, b in itertools.pairwise(edges)]
    return [pieces[i] for i in order.permutation(len(pieces))]


def _dot(a: np.ndarray, bt: np.ndarray, order: np.random.Generator | None) -> np.ndarray:
    """a @ bt.T (float32), the shared axis summed in numpy's order or in chunks (see _chunks)."""
    if order is None:
        return a @ bt.T
    acc = None
    for c in _chunks(a.shape[-1], order):
        part = a[..., c] @ bt[:, c].T
        acc = part if acc is None else acc + part
    return acc


def _attend(
    qg: np.ndarray, k: np.ndarray, v: np.ndarray, split: bool, order: np.random.Generator | None
) -> np.ndarray:
    """softmax(qg k^T) v for one KV head's q heads. split: the packed kernels' form (q and the
    unnormalised probabilities as bf16 hi + lo pairs, the sum of exps divided at the end);
    order: the positions summed in chunks (split-K over positions)."""
    if not split and order is None:
        return softmax((qg @ k.T) * np.float32(ATTN_SCALE)) @ v
    if split:
        qh, ql = _split_bf16(qg)
        s = ((qh @ k.T) + (ql @ k.T)) * np.float32(ATTN_SCALE)
    else:
        s = (qg @ k.T) * np.float32(ATTN_SCALE)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    pieces = _chunks(e.shape[-1], order) if order is not None else [slice(None)]
    total = sum(e[:, c].sum(axis=-1, keepdims=True, dtype=np.float32) for c in pieces)
    p = e if split else e / total
    o = None
    for c in pieces:
        if split:
            ph, pl = _split_bf16(p[:, c])
            part = (ph @ v[c]) + (pl @ v[c])
        else:
            part = p[:, c] @ v[c]
        o = part if o is None else o + part
    return (o / total if split else o).astype(np.float32, copy=False)


def layer_ref(
    shape: Shape,
    w: dict[str, np.ndarray],
    rows: Rows,
    bf16: bool,
    *,
    order: np.random.Generator | None = None,
    split_attn: bool = False,
) -> dict[str, np.ndarray]:
    """Boundary name -> [B, n] float32 for every boundary of the shape.

    order, split_attn: another equally valid realization of the same math (socketlab.layer.spread):
    every GEMV's reduction and every attention's positions summed in chunks in an order drawn
    from `order`, and/or the attention in the packed kernels' hi + lo form. Neither changes what
    is rounded to BF16, only how the FP32 sums run."""
    r = round_f32 if bf16 else (lambda t: t)
    eps, hd, nh, kvh = shape.eps, shape.head_dim, shape.heads, shape.kv_heads

    def lin(x: np.ndarray, name: str) -> np.ndarray:
        return _dot(r(x), w[name], order).astype(np.float32, copy=False)

    b: dict[str, np.ndarray] = {}
    x = rows.x_in.astype(np.float32)
    nb = x.shape[0]
    b["xn"] = rms(x, w["input_layernorm.weight"], eps)
    b["q"] = lin(b["xn"], "self_attn.q_proj.weight")
    q = rotate(
        rms(b["q"].reshape(nb, nh, hd), w["self_attn.q_norm.weight"], eps), rows.cos, rows.sin
    )
    b["qn"] = q.reshape(nb, -1)
    b["k"] = lin(b["xn"], "self_attn.k_proj.weight")
    # attention_k_eq_v: V is the raw K projection (normed without scale like any V)
    b["v"] = b["k"] if shape.kv_eq else lin(b["xn"], "self_attn.v_proj.weight")
    kn = rotate(
        rms(b["k"].reshape(nb, kvh, hd), w["self_attn.k_norm.weight"], eps), rows.cos, rows.sin
    )
    vn = rms(b["v"].reshape(nb, kvh, hd), None, eps)
    b["kn"], b["vn"] = kn.reshape(nb, -1), vn.reshape(nb, -1)
    g = nh // kvh
    attn = np.empty((nb, nh, hd), np.float32)
    for i in range(nb):
        # prior rows + the new token's row, as the stage writes it (BF16 in BF16 mode)
        K = np.concatenate([r(rows.kcache[i]), r(kn[i])[:, None, :]], axis=1)
        V = np.concatenate([r(rows.vcache[i]), r(vn[i])[:, None, :]], axis=1)
        for kh in range(kvh):
            qg = q[i, kh * g : (kh + 1) * g]  # the q heads sharing this KV head
            attn[i, kh * g : (kh + 1) * g] = _attend(qg, K[kh], V[kh], split_attn, order)
    b["attn"] = attn.reshape(nb, -1)
    b["o"] = lin(b["attn"], "self_attn.o_proj.weight")
    o = b["o"] if rows.o_rest is None else b["o"] + rows.o_rest  # the all-reduce, if a slice
    h1 = x + rms(o, w["post_attention_layernorm.weight"], eps)
    b["h1"] = h1
    b["xn2"] = rms(h1, w["pre_feedforward_layernorm.weight"], eps)
    b["gate"] = lin(b["xn2"], "mlp.gate_proj.weight")
    b["up"] = lin(b["xn2"], "mlp.up_proj.weight")
    b["act"] = gelu_tanh(b["gate"]) * b["up"]
    b["down"] = lin(b["act"], "mlp.down_proj.weight")
    ffn = b["down"] if rows.down_rest is None else b["down"] + rows.down_rest
    if shape.moe:
        moe = _moe_block(shape, w, rows, h1, b, r, order)
        ffn = rms(ffn, w["post_feedforward_layernorm_1.weight"], eps) + rms(
            moe, w["post_feedforward_layernorm_2.weight"], eps
        )
    h2 = h1 + rms(ffn, w["post_feedforward_layernorm.weight"], eps)
    b["h2"] = h2
    scalar = w["layer_scalar"].astype(np.float32)
    if not shape.ple:
        b["out"] = h2 * scalar
        return b
    b["pg"] = lin(h2, "per_layer_input_gate.weight")
    b["pact"] = gelu_tanh(b["pg"]) * rows.per_layer_input.astype(np.float32)
    b["pp"] = lin(b["pact"], "per_layer_projection.weight")
    b["out"] = ((h2 + rms(b["pp"], w["post_per_layer_input_norm.weight"], eps)) * scalar).astype(
        np.float32
    )
    return b


def _moe_block(
    shape: Shape,
    w: dict[str, np.ndarray],
    rows: Rows,
    h1: np.ndarray,
    b: dict[str, np.ndarray],
    r,
    order: np.random.Generator | None,
) -> np.ndarray:
    """26B-A4B's experts beside the dense MLP, on h1 (ref_layer.py; HF Gemma4TextRouter /
    Gemma4TextExperts): the router's logits rs on rms(h1) x scale / sqrt(hidden), softmax
    (FP32), the top-k experts (pinned: rows.router_idx) renormalised and times their
    per_expert_scale (rw); each picked expert's gate/up on xn3 = rms(h1, pre_ff_2), gelu x up,
    its down rows, weighted and summed (moe). BF16 mode rounds every GEMV input (the router's
    input, xn3, each expert's activation). Fills b's rs rw xn3 moe; returns moe."""
    eps, nb, ei = shape.eps, h1.shape[0], shape.moe_inter
    rn = rms(h1, None, eps) * w["router.scale"] * np.float32(shape.hidden**-0.5)
    b["rs"] = _dot(r(rn), w["router.proj.weight"], order).astype(np.float32, copy=False)
    p = softmax(b["rs"])
    idx = top_k(b["rs"], shape.top_k) if rows.router_idx is None else rows.router_idx
    picked = np.take_along_axis(p, idx, axis=-1)
    b["rw"] = (
        picked
        / picked.sum(axis=-1, keepdims=True, dtype=np.float32)
        * w["router.per_expert_scale"][idx]
    ).astype(np.float32)
    b["xn3"] = rms(h1, w["pre_feedforward_layernorm_2.weight"], eps)
    gu_w, dn_w = w["experts.gate_up_proj"], w["experts.down_proj"]
    moe = np.zeros_like(h1)
    for i in range(nb):
        for j, e in enumerate(idx[i].tolist()):
            gu = _dot(r(b["xn3"][i : i + 1]), gu_w[e], order)[0]
            a = gelu_tanh(gu[:ei]) * gu[ei:]
            moe[i] += _dot(r(a[None]), dn_w[e], order)[0] * b["rw"][i, j]
    b["moe"] = moe
    return moe


def err(a: np.ndarray, ref: np.ndarray) -> dict[str, float]:
    """max_abs, rms, rel_rms, cos of a against ref (float64), as ref_layer.py's err."""
    a, ref = np.asarray(a, np.float64).ravel(), np.asarray(ref, np.float64).ravel()
    d = a - ref
    rms_d, rms_r = float(np.sqrt(np.mean(d * d))), float(np.sqrt(np.mean(ref * ref)))
    na, nr = float(np.linalg.norm(a)), float(np.linalg.norm(ref))
    return {
        "max_abs": float(np.max(np.abs(d))) if d.size else 0.0,
        "rms": rms_d,
        "rel_rms": rms_d / rms_r if rms_r else (0.0 if rms_d == 0 else float("inf")),
        "cos": float(a @ ref / (na * nr)) if na and nr else (1.0 if na == nr else 0.0),
    }
