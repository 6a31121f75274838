"""One decoder layer's shape, as data: experiments/shapes/<name>.yaml (docs/layer.md).

A shape file is versioned (``version: 1``) and names every size the layer needs; the loader
checks each field and reports the first problem as one line "FILE: field: expected ..., got ...".
The same `Shape` also comes from a checkpoint's config.json (`from_hf_text_config`), so
generated and real layers go through one code path.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import yaml

from socketlab.errors import SpecError
from socketlab.paths import EXPERIMENTS

SHAPES_DIR = EXPERIMENTS / "shapes"
VERSION = 1
ATTENTION = ("sliding", "full")
ROPE_TYPES = ("default", "proportional")
#: HF's names for the two attention kinds (config.layer_types, meta.json layer_type).
HF_LAYER_TYPE = {"sliding": "sliding_attention", "full": "full_attention"}


@dataclasses.dataclass(frozen=True)
class Shape:
    """One Gemma-4 text decoder layer: dense or MoE (26B-A4B's block beside the dense MLP),
    with or without per-layer input."""

    name: str
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    attention: str  #: sliding | full
    window: int | None  #: sliding window (HF `sliding_window`); None for full attention
    inter: int  #: MLP width (gate/up rows)
    ple: int  #: per-layer-input width (0: the layer has no PLE block)
    rope_theta: float
    rope_type: str = "default"  #: default | proportional (Gemma-4 full layers)
    partial_rotary_factor: float = 1.0  #: share of head_dim that is rotated (proportional)
    eps: float = 1e-6
    kv_eq: bool = False  #: attention_k_eq_v: V is the raw K projection (no v_proj)
    layer: int = 0  #: layer index in its model (meta.json `layer`)
    model: str | None = None
    published_weight_mib: float | None = None  #: the published bf16 matrix size, if any
    source: str | None = None  #: where the shape file came from
    experts: int = 0  #: MoE experts (HF num_experts); 0: a dense layer
    top_k: int = 0  #: experts each token picks (HF top_k_experts)
    moe_inter: int = 0  #: one expert's gate/up rows (HF moe_intermediate_size)

    @property
    def moe(self) -> bool:
        return self.experts > 0

    @property
    def layer_type(self) -> str:
        return HF_LAYER_TYPE[self.attention]

    @property
    def groups(self) -> int:
        return self.heads // self.kv_heads

    def cache_len(self, context: int) -> int:
        """Rows the decode token attends to before its own: sliding layers keep window - 1."""
        return min(context, self.window - 1) if self.attention == "sliding" else context

    def matrices(self) -> list[tuple[str, int, int]]:
        """(state-dict name, rows, cols) of every GEMV matrix, in the stage's order."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        out = [
            ("self_attn.q_proj.weight", q, self.hidden),
            ("self_attn.k_proj.weight", kv, self.hidden),
        ]
        if not self.kv_eq:
            out.append(("self_attn.v_proj.weight", kv, self.hidden))
        out += [
            ("self_attn.o_proj.weight", self.hidden, q),
            ("mlp.gate_proj.weight", self.inter, self.hidden),
            ("mlp.up_proj.weight", self.inter, self.hidden),
            ("mlp.down_proj.weight", self.hidden, self.inter),
        ]
        if self.ple:
            out += [
                ("per_layer_input_gate.weight", self.ple, self.hidden),
                ("per_layer_projection.weight", self.hidden, self.ple),
            ]
        if self.moe:
            out.append(("router.proj.weight", self.experts, self.hidden))
        return out

    def expert_tensors(self) -> list[tuple[str, tuple[int, ...]]]:
        """(state-dict name, dims) of the MoE experts' stacked weights (HF Gemma4TextExperts:
        gate and up rows stacked per expert, then the down matrix)."""
        if not self.moe:
            return []
        e, ei, h = self.experts, self.moe_inter, self.hidden
        return [("experts.gate_up_proj", (e, 2 * ei, h)), ("experts.down_proj", (e, h, ei))]

    def expert_matrices(self) -> list[tuple[str, int, int]]:
        """One expert's GEMV matrices (gate, up, down), as an expert socket stripes them."""
        ei, h = self.moe_inter, self.hidden
        return [("gate", ei, h), ("up", ei, h), ("down", h, ei)]

    def norms(self) -> list[tuple[str, int]]:
        """(state-dict name, length) of every RMSNorm weight."""
        out = [
            ("input_layernorm.weight", self.hidden),
            ("self_attn.q_norm.weight", self.head_dim),
            ("self_attn.k_norm.weight", self.head_dim),
            ("post_attention_layernorm.weight", self.hidden),
            ("pre_feedforward_layernorm.weight", self.hidden),
            ("post_feedforward_layernorm.weight", self.hidden),
        ]
        if self.ple:
            out.append(("post_per_layer_input_norm.weight", self.hidden))
        if self.moe:
            out += [
                ("pre_feedforward_layernorm_2.weight", self.hidden),
                ("post_feedforward_layernorm_1.weight", self.hidden),
                ("post_feedforward_layernorm_2.weight", self.hidden),
                ("router.scale", self.hidden),
                ("router.per_expert_scale", self.experts),
            ]
        return out

    def matrix_bytes(self) -> int:
        """BF16 bytes of the GEMV matrices (what the published layer sizes count)."""
        return sum(2 * r * c for _, r, c in self.matrices())

    def gemv_layer_arg(self, part: str = "layer") -> str:
        """The `gemv --layer` list (ROWSxCOLS,...) of this layer's matrices, or of one expert's
        (part 'expert')."""
        if part == "expert" and not self.moe:
            raise SpecError(
                f"{self.source or self.name}: experts: the layer is dense; "
                "expected a MoE shape for its expert matrices"
            )
        if part not in ("layer", "expert"):
            raise SpecError(f"part {part!r}: expected layer or expert")
        mats = self.expert_matrices() if part == "expert" else self.matrices()
        return ",".join(f"{r}x{c}" for _, r, c in mats)

    def facts(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# field: (type(s), required, check, expected-text)
_POS = (lambda v: v > 0, "a positive integer")
_FIELDS: dict[str, tuple[tuple[type, ...], bool, Any, str]] = {
    "hidden": ((int,), True, *_POS),
    "heads": ((int,), True, *_POS),
    "kv_heads": ((int,), True, *_POS),
    "head_dim": ((int,), True, lambda v: v > 0 and v % 2 == 0, "a positive even integer"),
    "attention": ((str,), True, lambda v: v in ATTENTION, "sliding or full"),
    "window": ((int, type(None)), False, lambda v: v is None or v >= 2, "an integer >= 2"),
    "inter": ((int,), True, *_POS),
    "ple": ((int,), True, lambda v: v >= 0, "an integer >= 0 (0: no per-layer input)"),
    "rope_theta": ((int, float), True, lambda v: v > 0, "a positive number"),
    "rope_type": ((str,), False, lambda v: v in ROPE_TYPES, "default or proportional"),
    "partial_rotary_factor": ((int, float), False, lambda v: 0 < v <= 1, "a number in (0, 1]"),
    "eps": ((int, float), False, lambda v: 0 < v < 1, "a number in (0, 1)"),
    "kv_eq": ((bool,), False, lambda v: True, "true or false"),
    "layer": ((int,), False, lambda v: v >= 0, "an integer >= 0"),
    "model": ((str,), False, lambda v: True, "a string"),
    "published": ((dict,), False, lambda v: True, "a mapping {weight_mib: N, source: TEXT}"),
    "experts": ((int,), False, lambda v: v >= 0, "an integer >= 0 (0: a dense layer)"),
    "top_k": ((int,), False, lambda v: v >= 1, "a positive integer"),
    "moe_inter": ((int,), False, *_POS),
}


def _check_field(where: str, key: str, value: Any) -> None:
    types, _, check, expected = _FIELDS[key]
    # bool is an int in Python: a `hidden: true` typo must not pass as 1
    bad_type = not isinstance(value, types) or (isinstance(value, bool) and bool not in types)
    if bad_type or not check(value):
        raise SpecError(f"{where}: {key}: expected {expected}, got {value!r}")


def shape_from_mapping(doc: Any, where: str, name: str) -> Shape:
    """Validate a shape document (already parsed) and build the Shape; errors name `where`."""
    if not isinstance(doc, dict):
        raise SpecError(f"{where}: expected a mapping of shape fields, got {type(doc).__name__}")
    if doc.get("version") != VERSION:
        raise SpecError(f"{where}: version: expected {VERSION}, got {doc.get('version')!r}")
    for key in doc:
        if key != "version" and key not in _FIELDS:
            known = ", ".join(["version", *_FIELDS])
            raise SpecError(f"{where}: {key}: unknown field; expected one of {known}")
    for key, (_, required, _, expected) in _FIELDS.items():
        if key in doc:
            _check_field(where, key, doc[key])
        elif required:
            raise SpecError(f"{where}: {key}: missing; expected {expected}")
    if doc["heads"] % doc["kv_heads"]:
        raise SpecError(
            f"{where}: kv_heads: expected a divisor of heads ({doc['heads']}), "
            f"got {doc['kv_heads']}"
        )
    sliding = doc["attention"] == "sliding"
    if sliding and doc.get("window") is None:
        raise SpecError(f"{where}: window: missing; expected an integer >= 2 for sliding attention")
    if not sliding and doc.get("window") is not None:
        raise SpecError(f"{where}: window: expected null or absent for full attention")
    rope_type = doc.get("rope_type", "default")
    factor = float(doc.get("partial_rotary_factor", 1.0))
    if rope_type == "default" and factor != 1.0:
        raise SpecError(
            f"{where}: partial_rotary_factor: expected 1.0 with rope_type default "
            f"(use rope_type: proportional), got {factor}"
        )
    # proportional RoPE rotates int(factor * head_dim // 2) frequency pairs; none is no RoPE
    if rope_type == "proportional" and int(factor * doc["head_dim"] // 2) < 1:
        raise SpecError(f"{where}: partial_rotary_factor: expected >= 2/head_dim, got {factor}")
    experts = doc.get("experts", 0)
    if experts and not 1 <= doc.get("top_k", 0) <= experts:
        raise SpecError(
            f"{where}: top_k: expected 1..experts ({experts}) for a MoE layer, "
            f"got {doc.get('top_k')!r}"
        )
    if experts and "moe_inter" not in doc:
        raise SpecError(f"{where}: moe_inter: missing; expected a positive integer for a MoE layer")
    if not experts and ("top_k" in doc or "moe_inter" in doc):
        raise SpecError(f"{where}: experts: expected a positive count with top_k / moe_inter")
    published = doc.get("published") or {}
    mib = published.get("weight_mib")
    if mib is not None and (isinstance(mib, bool) or not isinstance(mib, int | float)):
        raise SpecError(f"{where}: published.weight_mib: expected a number, got {mib!r}")
    return Shape(
        name=name,
        hidden=doc["hidden"],
        heads=doc["heads"],
        kv_heads=doc["kv_heads"],
        head_dim=doc["head_dim"],
        attention=doc["attention"],
        window=doc.get("window") if sliding else None,
        inter=doc["inter"],
        ple=doc["ple"],
        rope_theta=float(doc["rope_theta"]),
        rope_type=rope_type,
        partial_rotary_factor=factor,
        eps=float(doc.get("eps", 1e-6)),
        kv_eq=bool(doc.get("kv_eq", False)),
        layer=int(doc.get("layer", 0)),
        model=doc.get("model"),
        published_weight_mib=None if mib is None else float(mib),
        source=where,
        experts=experts,
        top_k=doc.get("top_k", 0) if experts else 0,
        moe_inter=doc.get("moe_inter", 0) if experts else 0,
    )


def load_shape(path: str | Path) -> Shape:
    """Read and check one shape file. A bare name (no '/' or suffix) means
    experiments/shapes/<name>.yaml."""
    p = Path(path)
    if not p.suffix and "/" not in str(path) and not p.exists():
        p = SHAPES_DIR / f"{path}.yaml"
    if not p.is_file():
        names = ", ".join(s.stem for s in sorted(SHAPES_DIR.glob("*.yaml")))
        raise SpecError(f"{path}: no such shape file; expected a YAML file or one of: {names}")
    try:
        doc = yaml.safe_load(p.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{p}: can't read ({exc})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        raise SpecError(f"{p}{line}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
    return shape_from_mapping(doc, str(p), p.stem)


def shape_files() -> list[Path]:
    return sorted(SHAPES_DIR.glob("*.yaml"))


def from_hf_text_config(tc: dict[str, Any], layer: int, where: str) -> Shape:
    """The Shape of layer `layer` of a Gemma-4 text config (config.json's `text_config`, or a
    bare Gemma4TextConfig dict), with HF's defaults where a key is absent."""

    def get(key: str, default: Any = None) -> Any:
        return tc.get(key, default)

    n_layers = get("num_hidden_layers")
    layer_types = get("layer_types")
    if not isinstance(n_layers, int) or not isinstance(layer_types, list):
        raise SpecError(f"{where}: num_hidden_layers/layer_types: expected a Gemma-4 text config")
    if not 0 <= layer < n_layers:
        raise SpecError(f"{where}: --layer: expected 0..{n_layers - 1}, got {layer}")
    shared = get("num_kv_shared_layers", 0) or 0
    if shared and layer >= n_layers - shared:
        raise SpecError(
            f"{where}: --layer {layer}: this layer reuses an earlier layer's KV "
            f"(num_kv_shared_layers={shared}); expected a layer below {n_layers - shared}"
        )
    kind = layer_types[layer]
    attention = {v: k for k, v in HF_LAYER_TYPE.items()}.get(kind)
    if attention is None:
        raise SpecError(
            f"{where}: layer_types[{layer}]: expected sliding_attention or "
            f"full_attention, got {kind!r}"
        )
    full = attention == "full"
    rope = (get("rope_parameters") or {}).get(kind) or {}
    kv_eq = bool(get("attention_k_eq_v", False)) and full
    kv_heads = get("num_key_value_heads", 4)
    if full and kv_eq and get("num_global_key_value_heads"):
        kv_heads = get("num_global_key_value_heads")
    head_dim = get("global_head_dim", 512) if full else get("head_dim", 256)
    # A config saved by transformers holds the full layers' overrides as per_layer_config
    # {"<layer>": {"head_dim": .., "num_key_value_heads": ..}} instead of global_head_dim.
    per_layer = get("per_layer_config")
    if isinstance(per_layer, dict):
        over = per_layer.get(str(layer)) or per_layer.get(layer) or {}
        if full and not over and "global_head_dim" not in tc:
            head_dim = 512  # HF's default global_head_dim
        head_dim = over.get("head_dim", head_dim)
        kv_heads = over.get("num_key_value_heads", kv_heads)
    doc = {
        "version": VERSION,
        "hidden": get("hidden_size", 2304),
        "heads": get("num_attention_heads", 8),
        "kv_heads": kv_heads,
        "head_dim": head_dim,
        "attention": attention,
        "window": None if full else get("sliding_window", 512),
        "inter": get("intermediate_size", 9216),
        "ple": get("hidden_size_per_layer_input", 256) or 0,
        "rope_theta": rope.get("rope_theta", 1e6 if full else 1e4),
        "rope_type": rope.get("rope_type", "proportional" if full else "default"),
        "partial_rotary_factor": rope.get("partial_rotary_factor", 0.25 if full else 1.0),
        "eps": get("rms_norm_eps", 1e-6),
        "kv_eq": kv_eq,
        "layer": layer,
    }
    if get("enable_moe_block"):  # 26B-A4B: the experts beside the dense MLP, every layer
        doc |= {
            "experts": get("num_experts"),
            "top_k": get("top_k_experts"),
            "moe_inter": get("moe_intermediate_size"),
        }
    return shape_from_mapping(doc, where, f"{Path(where).parent.name}-l{layer}")


def mib(n_bytes: int) -> float:
    return n_bytes / 2**20


def weight_mib_rounded(shape: Shape) -> float:
    """The matrix size in MiB at the published precision (one decimal)."""
    return math.floor(mib(shape.matrix_bytes()) * 10 + 0.5) / 10
