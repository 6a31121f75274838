"""A tensor-parallel socket slice of a dense layer (ref_layer.py's `tp` ranks, P6).

Rank r of TP = S holds whole q heads [h0, h1) = [r nh/S, (r + 1) nh/S), the KV heads they use
(a KV head shared by several ranks is replicated on each), a block of FFN rows [f0, f1) =
[r I/S, (r + 1) I/S), and the matching columns of o_proj and down_proj: its o and down are
partial sums. What the other ranks add (`o_rest`, `down_rest`, FP32) is added where the
cross-socket all-reduce lands; everything after it (h1, xn2, h2, the PLE block, out) is the
whole layer's.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from socketlab.layer.errors import LayerError
from socketlab.layer.shapes import Shape


@dataclasses.dataclass(frozen=True)
class Slice:
    tp: int
    rank: int
    h0: int  #: q heads [h0, h1)
    h1: int
    k0: int  #: KV heads [k0, k1)
    k1: int
    f0: int  #: FFN rows [f0, f1)
    f1: int


def tp_slice(shape: Shape, tp: int, rank: int) -> Slice:
    """Rank `rank` of `tp`; LayerError (one line) where the layer can't be split so."""
    if tp < 1 or not 0 <= rank < tp:
        raise LayerError(f"--tp {tp} --rank {rank}: expected tp >= 1 and 0 <= rank < tp")
    if shape.moe and tp > 1:
        raise LayerError(
            f"{shape.name}: --tp {tp}: a MoE layer splits into head and expert "
            "sockets, not tensor-parallel ranks (ref_layer.py: dense layers only)"
        )
    nh, g = shape.heads, shape.groups
    if nh % tp or shape.inter % tp:
        raise LayerError(
            f"{shape.name}: --tp {tp}: heads {nh} and inter {shape.inter} must be "
            "multiples of it (whole heads, equal FFN blocks)"
        )
    nr = nh // tp
    h0, h1 = rank * nr, (rank + 1) * nr
    k0, k1 = h0 // g, (h1 - 1) // g + 1
    if not (nr == (k1 - k0) * g or (k1 - k0 == 1 and g % nr == 0)):
        raise LayerError(
            f"{shape.name}: --tp {tp}: {nr} q heads per rank split a group of {g} "
            "q heads per KV head; expected whole groups or one shared KV head"
        )
    fr = shape.inter // tp
    return Slice(tp, rank, h0, h1, k0, k1, rank * fr, (rank + 1) * fr)


def slice_shape(shape: Shape, s: Slice) -> Shape:
    return dataclasses.replace(
        shape,
        heads=s.h1 - s.h0,
        kv_heads=s.k1 - s.k0,
        inter=s.f1 - s.f0,
        name=f"{shape.name}-tp{s.tp}r{s.rank}",
    )


def slice_weights(shape: Shape, w: dict[str, np.ndarray], s: Slice) -> dict[str, np.ndarray]:
    hd = shape.head_dim
    q, kv, f = slice(s.h0 * hd, s.h1 * hd), slice(s.k0 * hd, s.k1 * hd), slice(s.f0, s.f1)
    cut = {"self_attn.q_proj.weight": (q, None), "self_attn.k_proj.weight": (kv, None),
           "self_attn.v_proj.weight": (kv, None), "self_attn.o_proj.weight": (None, q),
           "mlp.gate_proj.weight": (f, None), "mlp.up_proj.weight": (f, None),
           "mlp.down_proj.weight": (None, f)}  # fmt: skip
    out = dict(w)
    for name, (rows, cols) in cut.items():
        if name in w:
            out[name] = np.ascontiguousarray(w[name][rows or slice(None)][:, cols or slice(None)])
    return out


def rests(
    shape: Shape, w: dict[str, np.ndarray], f32: dict[str, np.ndarray], s: Slice
) -> tuple[np.ndarray, np.ndarray]:
    """(o_rest, down_rest) [B, hidden]: the whole layer's FP32 o and down less this rank's
    partial sums of them (FP32, from the whole layer's attention and activation)."""
    hd = shape.head_dim
    q, f = slice(s.h0 * hd, s.h1 * hd), slice(s.f0, s.f1)
    o_part = f32["attn"][:, q] @ w["self_attn.o_proj.weight"][:, q].T
    down_part = f32["act"][:, f] @ w["mlp.down_proj.weight"][:, f].T
    return ((f32["o"] - o_part).astype(np.float32), (f32["down"] - down_part).astype(np.float32))
