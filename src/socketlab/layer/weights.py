"""A layer's weights: seeded random at realistic scales, or read from a checkpoint.

Every weight is BF16-exact float32 (the checkpoints are BF16, and the stage reads BF16), so
the FP32 reference and the BF16 kernels multiply by the same numbers.

Scales, chosen so every boundary has the magnitudes a trained layer has:
- projections N(0, 1/fan_in): a unit-RMS input gives a unit-RMS output;
- RMSNorm weights 1 + N(0, 0.1);
- q_norm / k_norm weights centred on (2.5 / sqrt(head_dim))^(1/2): Gemma-4 scores are q.k
  with scale 1.0, so the norms carry the temperature; with unit-RMS heads the logits then
  have a standard deviation near 2.5, neither uniform nor one-hot attention;
- layer_scalar uniform in [0.25, 1);
- MoE: experts' gate/up and down N(0, 1/fan_in) as any projection; router.scale centred on
  sqrt(hidden) x ROUTER_STD, so the router's logits (rms(h1) x scale / sqrt(hidden) through
  N(0, 1/hidden) rows) have a standard deviation near ROUTER_STD: a top-k that is neither
  a coin toss nor fixed; per_expert_scale 1 + N(0, 0.1);
- the residual stream (x_in, the history's hidden states) N(0, 8^2): larger than one layer's
  update (each post-norm adds a unit-RMS branch), as in a trained model; with unit-RMS inputs
  `out` would be mostly this layer's own BF16 error (bar rel RMS ~4e-3, cosine 0.99999),
  with 8 it is ~6e-4 (cosine 0.9999998), as the published real-weight E2B dumps.
"""

from __future__ import annotations

import numpy as np

from socketlab.layer.bf16 import round_f32
from socketlab.layer.shapes import Shape

#: Standard deviation of q.k logits the q/k norm weights aim at (see above).
LOGIT_STD = 2.5
#: Standard deviation of the MoE router's logits the router.scale weights aim at (see above).
ROUTER_STD = 1.0
NORM_SPREAD = 0.1
RESIDUAL_RMS = 8.0
#: Seed-stream tags: weights, and per batch row the inputs and the KV history.
TAG_WEIGHTS, TAG_INPUTS, TAG_HISTORY = 0, 1, 2


def rng_for(seed: int, *tags: int) -> np.random.Generator:
    return np.random.default_rng([seed, *tags])


def random_weights(shape: Shape, seed: int) -> dict[str, np.ndarray]:
    """State-dict name -> float32 (BF16-exact) array, plus `layer_scalar` [1] (float32)."""
    rng = rng_for(seed, TAG_WEIGHTS)
    w: dict[str, np.ndarray] = {}
    for name, rows, cols in shape.matrices():
        m = rng.standard_normal((rows, cols), dtype=np.float32)
        m *= np.float32(1.0 / np.sqrt(cols))
        w[name] = round_f32(m).reshape(rows, cols)
    for name, dims in shape.expert_tensors():  # [experts, rows, cols]: N(0, 1/cols)
        m = rng.standard_normal(dims, dtype=np.float32) * np.float32(1.0 / np.sqrt(dims[-1]))
        w[name] = round_f32(m).reshape(dims)
    qk_centre = (LOGIT_STD / np.sqrt(shape.head_dim)) ** 0.5
    centres = {
        "self_attn.q_norm.weight": qk_centre,
        "self_attn.k_norm.weight": qk_centre,
        "router.scale": np.sqrt(shape.hidden) * ROUTER_STD,
    }
    for name, n in shape.norms():
        centre = centres.get(name, 1.0)
        v = centre * (1.0 + NORM_SPREAD * rng.standard_normal(n))
        w[name] = round_f32(v.astype(np.float32))
    w["layer_scalar"] = np.array([rng.uniform(0.25, 1.0)], dtype=np.float32)
    return w


def check_weights(shape: Shape, w: dict[str, np.ndarray], where: str) -> None:
    """Every tensor the shape needs, with its shape (a checkpoint may disagree with config.json)."""
    from socketlab.layer.errors import LayerError

    want = {n: (r, c) for n, r, c in shape.matrices()} | {n: (k,) for n, k in shape.norms()}
    want |= dict(shape.expert_tensors())
    want["layer_scalar"] = (1,)
    for name, dims in want.items():
        if name not in w:
            raise LayerError(f"{where}: {name}: missing; expected a tensor of shape {list(dims)}")
        if tuple(w[name].shape) != dims:
            raise LayerError(f"{where}: {name}: shape {list(w[name].shape)}, expected {list(dims)}")
