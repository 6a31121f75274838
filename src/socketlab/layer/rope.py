"""RoPE cos/sin for one position, as transformers' Gemma-4 computes them in float32.

Sliding layers use the default RoPE over the whole head; full layers use "proportional" RoPE:
int(factor * head_dim / 2) frequency pairs rotate (exponents over the whole head_dim), the
rest have frequency 0 (cos 1, sin 0). Each float32 step is done in float64 and rounded once,
which is what an IEEE float32 pow / divide / multiply returns; that keeps the angles at
position 128K equal to HF's to the last bit or two (an ulp of inv_freq is ~1e-4 rad there).
"""

from __future__ import annotations

import numpy as np

from socketlab.layer.shapes import Shape


def inv_freq(shape: Shape) -> np.ndarray:
    hd = shape.head_dim
    if shape.rope_type == "proportional":
        pairs = int(shape.partial_rotary_factor * hd // 2)
    else:
        pairs = hd // 2
    exps = np.arange(0, 2 * pairs, 2, dtype=np.float64) / hd  # k/hd: exact in float32 too
    p = (shape.rope_theta**exps).astype(np.float32)  # float32 pow
    inv = (1.0 / p.astype(np.float64)).astype(np.float32)  # float32 divide
    return np.concatenate([inv, np.zeros(hd // 2 - pairs, np.float32)])


def cos_sin(shape: Shape, positions: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin [len(positions), head_dim] (or [head_dim] for one int position), float32."""
    scalar = np.isscalar(positions)
    pos = np.atleast_1d(np.asarray(positions, dtype=np.float32)).astype(np.float64)
    freqs = (pos[:, None] * inv_freq(shape).astype(np.float64)[None, :]).astype(np.float32)
    emb = np.concatenate([freqs, freqs], axis=1).astype(np.float64)
    cos, sin = np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)
    return (cos[0], sin[0]) if scalar else (cos, sin)


def rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """x * cos + rotate_half(x) * sin over the last axis (HF's apply_rotary_pos_emb)."""
    h = x.shape[-1] // 2
    rot = np.concatenate([-x[..., h:], x[..., :h]], axis=-1)
    return (x * cos + rot * sin).astype(np.float32)
