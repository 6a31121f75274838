"""A realistic KV history: the layer's own K/V of seeded random hidden states at their positions.

Position p's hidden state is N(0, RESIDUAL_RMS^2) from its own seed stream
(seed, history, row, p // CHUNK),
so a sliding layer computes only the rows it keeps, and a check can rebuild the whole history
(every position 0..C-1) and prefill a reference model with it.
"""

from __future__ import annotations

import numpy as np

from socketlab.layer.reference import rms
from socketlab.layer.rope import cos_sin, rotate
from socketlab.layer.shapes import Shape
from socketlab.layer.weights import RESIDUAL_RMS, TAG_HISTORY, rng_for

CHUNK = 1024  #: positions per seed stream (and per projection batch)


def hidden_states(shape: Shape, seed: int, row: int, start: int, stop: int) -> np.ndarray:
    """The history's layer inputs for positions [start, stop): [stop - start, hidden] float32."""
    out = np.empty((stop - start, shape.hidden), np.float32)
    for c in range(start // CHUNK, (stop + CHUNK - 1) // CHUNK if stop > start else 0):
        block = rng_for(seed, TAG_HISTORY, row, c).standard_normal(
            (CHUNK, shape.hidden), dtype=np.float32
        )
        block *= np.float32(RESIDUAL_RMS)
        a, z = max(start, c * CHUNK), min(stop, (c + 1) * CHUNK)
        out[a - start : z - start] = block[a - c * CHUNK : z - c * CHUNK]
    return out


def kv_rows(
    shape: Shape, w: dict[str, np.ndarray], xh: np.ndarray, positions: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """K (k-normed, roped) and V (v-normed) of hidden states xh at positions:
    [kv_heads, T, head_dim] each, float32."""
    eps, kvh, hd = shape.eps, shape.kv_heads, shape.head_dim
    xn = rms(xh, w["input_layernorm.weight"], eps)
    k = (xn @ w["self_attn.k_proj.weight"].T).astype(np.float32)
    v = k if shape.kv_eq else (xn @ w["self_attn.v_proj.weight"].T).astype(np.float32)
    t = xh.shape[0]
    cos, sin = cos_sin(shape, positions)
    kn = rotate(
        rms(k.reshape(t, kvh, hd), w["self_attn.k_norm.weight"], eps), cos[:, None], sin[:, None]
    )
    vn = rms(v.reshape(t, kvh, hd), None, eps)
    return np.ascontiguousarray(kn.transpose(1, 0, 2)), np.ascontiguousarray(vn.transpose(1, 0, 2))


def history(
    shape: Shape, w: dict[str, np.ndarray], seed: int, row: int, context: int
) -> tuple[np.ndarray, np.ndarray]:
    """The cache the decode token at position `context` attends to (before its own row):
    positions context - cache_len .. context - 1, [kv_heads, cache_len, head_dim] each."""
    first = context - shape.cache_len(context)
    ks, vs = [], []
    for a in range(first, context, CHUNK):
        z = min(context, a + CHUNK)
        k, v = kv_rows(shape, w, hidden_states(shape, seed, row, a, z), np.arange(a, z))
        ks.append(k)
        vs.append(v)
    if not ks:
        empty = np.zeros((shape.kv_heads, 0, shape.head_dim), np.float32)
        return empty, empty.copy()
    return np.concatenate(ks, axis=1), np.concatenate(vs, axis=1)
