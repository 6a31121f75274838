"""BF16 as numpy sees it: uint16 bit patterns beside float32 values (numpy has no bfloat16)."""

from __future__ import annotations

import numpy as np


def to_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits, round to nearest even (as the stage's f2bf and torch do).
    No NaN handling: a reference tensor holding NaN is a bug upstream, not a value to keep."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    t = u >> np.uint32(16)  # in place from here: weights are tens of millions of elements
    t &= np.uint32(1)
    t += np.uint32(0x7FFF)
    t += u
    t >>= np.uint32(16)
    return t.astype(np.uint16)


def from_bits(b: np.ndarray) -> np.ndarray:
    """bf16 bits -> float32 (exact)."""
    return (np.ascontiguousarray(b, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(
        np.float32
    )


def round_f32(x: np.ndarray) -> np.ndarray:
    """x rounded to the nearest bf16, as float32."""
    return from_bits(to_bits(x))
