"""How far equally valid BF16 computations of the same layer land from FP32: the bar's spread.

The gate's bar (`bf16_ref_err[b].rel_rms`) is one realization of the BF16 mode: numpy's
summation order and FP32 attention. A stage that sums in another order (VDPBF16PS, AMX tiles,
split-K) or runs attention in the packed kernels' hi + lo form computes values that differ from
it by FP32 ulps, and now and then such a difference moves a value across a BF16 rounding
midpoint: that element of the next GEMV's input rounds the other way (one BF16 ulp), and the
flip propagates. Where a vector's error is carried by a few large elements (tiny's 64-wide
per-layer input: ~6 elements hold most of |pact|), one flip moves the rel RMS by tens of
percent, so 1.5 x one realization's error is not a bound for another (issue 12's tiny B=16
AVX-512 run: pp at 1.69 x the bar; docs/layer.md, "The bar's spread").

`spread` recomputes the BF16 mode REALIZATIONS times, every GEMV and attention summed in chunks
in a random order, half of them with the packed kernels' hi + lo attention, and keeps per row
and boundary the largest rel RMS against FP32. The gate's limit is 1.5 x max(bar, spread). On
E2B-sized vectors the spread is within a few percent of the bar, so the limit barely moves
there; planted errors (a perturbed weight row, a missing combine, unsplit P on near-tie
attention) stay 3x or more above it.
"""

from __future__ import annotations

import numpy as np

from socketlab.layer.reference import Rows, boundaries_for, err, layer_ref
from socketlab.layer.shapes import Shape
from socketlab.layer.weights import rng_for

#: BF16-mode realizations per dump: half with FP32 attention (the portable path), half with the
#: packed kernels' hi + lo attention (avx512, amx)
REALIZATIONS = 8
#: seed stream of the summation orders (beside weights.TAG_WEIGHTS/INPUTS/HISTORY)
TAG_ORDER = 3


def spread(
    shape: Shape,
    w: dict[str, np.ndarray],
    rows: Rows,
    f32: dict[str, np.ndarray],
    seed: int,
    realizations: int = REALIZATIONS,
) -> list[dict[str, float]]:
    """Per batch row: boundary -> the largest rel RMS vs FP32 over the realizations."""
    nb = rows.x_in.shape[0]
    worst = [dict.fromkeys(boundaries_for(shape), 0.0) for _ in range(nb)]
    for k in range(realizations):
        order = rng_for(seed, TAG_ORDER, k)
        got = layer_ref(shape, w, rows, bf16=True, order=order, split_attn=bool(k % 2))
        for i in range(nb):
            for b in worst[i]:
                worst[i][b] = max(worst[i][b], err(got[b][i], f32[b][i])["rel_rms"])
    return worst
