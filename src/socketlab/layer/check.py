"""Re-read a dump, check it, and gate a result against its reference.

The gate rule (fixed, issue 12): every boundary's rel RMS <= 1.5 x the BF16 reference's
(`bf16_ref_err[b].rel_rms` in meta.json), and the output cosine >= 0.99999. The BF16
reference's error is the larger of that bar and, where the dump has it, the largest of its
other valid realizations (`bf16_ref_spread.rel_rms_max[b]`, socketlab.layer.spread: on small
vectors one realization's error is not a bound for another's). Boundaries whose
BF16 bar is 0 or tiny (xn: the norm of the exact FP32 input, no BF16 rounding before it) use
the floor REL_RMS_FLOOR instead: 1e-6, about 8 float32 ulps RMS, what a different summation
order costs.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from socketlab.layer.dump import Dump, validate
from socketlab.layer.errors import LayerError
from socketlab.layer.reference import Rows, boundaries_for, err, layer_ref
from socketlab.layer.shapes import Shape

BAR_FACTOR = 1.5
REL_RMS_FLOOR = 1e-6
OUT_COS_MIN = 0.99999


@dataclasses.dataclass
class GateLine:
    boundary: str
    rel_rms: float
    cos: float
    max_abs: float
    bar: float  #: the BF16 reference's rel RMS
    limit: float  #: max(1.5 x max(bar, spread), floor)
    ok: bool
    spread: float = 0.0  #: the largest rel RMS of the dump's other BF16 realizations (0: none)

    @property
    def ratio(self) -> float:
        return self.rel_rms / self.bar if self.bar else float("inf") if self.rel_rms else 0.0


def dump_boundaries(meta: dict[str, Any]) -> tuple[str, ...]:
    return boundaries_for(shape_from_meta(meta, "meta.json"))


def shape_from_meta(meta: dict[str, Any], where: str) -> Shape:
    kind = meta.get("layer_type")
    if kind not in ("sliding_attention", "full_attention"):
        raise LayerError(
            f"{where}: layer_type: expected sliding_attention or full_attention, got {kind!r}"
        )
    moe = {k: meta.get(k) for k in ("experts", "top_k", "moe_inter")} if meta.get("moe") else {}
    if moe and not all(isinstance(v, int) and v > 0 for v in moe.values()):
        raise LayerError(
            f"{where}: moe: true needs experts, top_k and moe_inter as positive integers, got {moe}"
        )
    sliding = kind == "sliding_attention"
    window = meta.get("window")
    if sliding and (not isinstance(window, int) or window < 2):
        raise LayerError(
            f"{where}: window: expected an integer >= 2 for a sliding layer, got {window!r}"
        )
    return Shape(
        name=str(meta.get("shape", "dump")),
        hidden=meta["hidden"],
        heads=meta["heads"],
        kv_heads=meta["kv_heads"],
        head_dim=meta["head_dim"],
        attention="sliding" if sliding else "full",
        window=window if sliding else None,
        inter=meta["inter"],
        ple=meta["ple"],
        rope_theta=1.0,  # unused: the dump carries the decode position's cos/sin
        eps=float(meta.get("eps", 1e-6)),
        kv_eq=bool(meta.get("kv_eq", False)),
        layer=int(meta.get("layer") or 0),
        **moe,
    )


def load_rows(dumps: list[Dump]) -> tuple[Shape, dict[str, np.ndarray], Rows]:
    """The layer and its batch rows as the stage sees them (BF16 KV, BF16 weights)."""
    d0 = dumps[0]
    shape = shape_from_meta(d0.meta, str(d0.path / "meta.json"))
    w = {n[2:]: d0.f32(n) for n in d0.entries if n.startswith("w.")}
    w["layer_scalar"] = d0.f32("layer_scalar")
    empty = np.zeros((shape.kv_heads, 0, shape.head_dim), np.float32)
    rows = Rows(
        x_in=np.stack([d.f32("x_in") for d in dumps]),
        per_layer_input=np.stack([d.f32("per_layer_input") for d in dumps]) if shape.ple else None,
        kcache=[d.f32("kcache") if d.has("kcache") else empty for d in dumps],
        vcache=[d.f32("vcache") if d.has("vcache") else empty for d in dumps],
        cos=d0.f32("cos"),
        sin=d0.f32("sin"),
        router_idx=np.stack([d.f32("router_idx").astype(np.int64) for d in dumps])
        if shape.moe
        else None,
        o_rest=np.stack([d.f32("o_rest") for d in dumps]) if d0.has("o_rest") else None,
        down_rest=np.stack([d.f32("down_rest") for d in dumps]) if d0.has("down_rest") else None,
    )
    return shape, w, rows


def open_dump(path: str) -> list[Dump]:
    """Row 0 and every row<i>/, each validated (manifest vs meta vs files); rows must agree on
    the layer's shape."""
    dumps = Dump(path).rows()
    batch = dumps[0].meta.get("batch")
    if isinstance(batch, int) and batch != len(dumps):
        raise LayerError(
            f"{dumps[0].path / 'meta.json'}: batch: {batch}, but {len(dumps)} row dump(s) found; "
            f"expected {path}/row1 .. row{batch - 1}"
        )
    for d in dumps:
        validate(d, dump_boundaries(d.meta))
    keys = ("hidden", "heads", "kv_heads", "head_dim", "inter", "ple", "layer_type", "ctx")
    for d in dumps[1:]:
        for k in keys:
            if d.meta.get(k) != dumps[0].meta.get(k):
                raise LayerError(
                    f"{d.path / 'meta.json'}: {k}: {d.meta.get(k)!r}, expected row 0's "
                    f"{dumps[0].meta.get(k)!r}"
                )
    return dumps


def limit_for(bar: float, spread: float) -> float:
    """The gate's rel RMS limit for one boundary (native/layer's gate computes the same)."""
    return max(BAR_FACTOR * max(bar, spread), REL_RMS_FLOOR)


def gate(got: dict[str, np.ndarray], dump: Dump) -> list[GateLine]:
    """Gate one row's boundaries (name -> vector) against the dump's FP32 reference and bar."""
    lines = []
    worst = dump.meta.get("bf16_ref_spread", {}).get("rel_rms_max", {})
    for b, a in got.items():
        e = err(a, dump.f32(f"ref.{b}"))
        bar = float(dump.meta["bf16_ref_err"][b]["rel_rms"])
        sp = float(worst.get(b, 0.0))
        limit = limit_for(bar, sp)
        ok = e["rel_rms"] <= limit and (b != "out" or e["cos"] >= OUT_COS_MIN)
        lines.append(GateLine(b, e["rel_rms"], e["cos"], e["max_abs"], bar, limit, ok, sp))
    return lines


def recompute(dumps: list[Dump]) -> list[list[GateLine]]:
    """Run the BF16-mode reference on the dump's own tensors (what a correct BF16 stage
    computes) and gate every row: a planted error in a weight, an input or a reference shows
    as a failing boundary."""
    shape, w, rows = load_rows(dumps)
    got = layer_ref(shape, w, rows, bf16=True)
    return [gate({b: got[b][i] for b in dump_boundaries(d.meta)}, d) for i, d in enumerate(dumps)]


def first_failure(results: list[list[GateLine]]) -> tuple[int, GateLine] | None:
    for i, lines in enumerate(results):
        for g in lines:
            if not g.ok:
                return i, g
    return None
