"""A decoder's planning units from its shape: a model file (experiments/models/<name>.yaml) or a
Hugging Face config.json (docs/planner.md).

Both are read as the same thing, a Gemma-4 text config (HF `Gemma4TextConfig` field names), so
the shipped models and a user's checkpoint go through one code path. A model file is
`{version: 1, model, config: {...HF fields...}, derived: {field: how}}`; a config.json may hold
the text config at the top or under `text_config`. Every size the planner needs must be there
(no silent HF defaults): a missing one is one line naming the file and the field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from socketlab.errors import SpecError
from socketlab.paths import EXPERIMENTS
from socketlab.plan.stage import Unit

MODELS_DIR = EXPERIMENTS / "models"
BF16 = 2
FP32 = 4
REQUIRED = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "layer_types",
    "vocab_size",
)
LAYER_TYPES = ("sliding_attention", "full_attention")


@dataclass(frozen=True)
class Model:
    name: str
    config: dict[str, Any]
    where: str  #: the file it came from (error messages, provenance)
    derived: dict[str, str]  #: which numbers were derived, and how (model files)


def load_model(arg: str | Path) -> Model:
    """A model by name (experiments/models/<name>.yaml), model file, config.json or a checkpoint
    directory holding config.json."""
    p = Path(arg)
    if p.is_dir():
        p = p / "config.json"
    elif not p.exists() and "/" not in str(arg) and not p.suffix:
        p = MODELS_DIR / f"{arg}.yaml"
    if not p.is_file():
        names = ", ".join(m.stem for m in model_files())
        raise SpecError(
            f"{arg}: no such model; expected a config.json, a checkpoint directory, "
            f"a model file or one of: {names}"
        )
    try:
        text = p.read_text()
        doc = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{p}: can't read ({exc})") from None
    except json.JSONDecodeError as exc:
        raise SpecError(f"{p}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        raise SpecError(f"{p}{line}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(doc, dict):
        raise SpecError(f"{p}: expected a mapping, got {type(doc).__name__}")
    if p.suffix == ".json":
        tc = doc.get("text_config", doc)
        name = p.parent.name or p.stem
        derived: dict[str, str] = {}
    else:
        if doc.get("version") != 1:
            raise SpecError(f"{p}: version: expected 1, got {doc.get('version')!r}")
        tc = doc.get("config")
        name = str(doc.get("model") or p.stem)
        derived = {str(k): str(v) for k, v in (doc.get("derived") or {}).items()}
    if not isinstance(tc, dict):
        raise SpecError(f"{p}: config: expected a mapping of Hugging Face text-config fields")
    model = Model(name=name, config=tc, where=str(p), derived=derived)
    units(model)  # check every field now: a bad file fails at load, naming the field
    return model


def model_files() -> list[Path]:
    return sorted(MODELS_DIR.glob("*.yaml"))


def _int(tc: dict, key: str, where: str, *, minimum: int = 1, default: Any = ...) -> int:
    v = tc.get(key, default)
    if v is ...:
        raise SpecError(f"{where}: {key}: missing; expected an integer >= {minimum}")
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise SpecError(f"{where}: {key}: expected an integer >= {minimum}, got {v!r}")
    return v


@dataclass(frozen=True)
class _Text:
    """The text config's fields the planner reads, checked (units() validates through it)."""

    hidden: int
    n: int
    heads: int
    kv_heads: int
    head_dim: int
    inter: int
    vocab: int
    types: list
    first_shared: int  # the first layer that reads an earlier layer's KV
    window: int | None
    ple: int
    global_dim: int
    k_eq_v: bool
    global_kv: int
    double: bool
    moe: bool
    experts: int = 0
    top_k: int = 0
    e_inter: int = 0

    def dims(self, layer: int) -> tuple[int, int]:
        """(head_dim, kv_heads) of a layer: full layers take the global values."""
        if self.types[layer] == "full_attention":
            return self.global_dim, self.global_kv if self.k_eq_v else self.kv_heads
        return self.head_dim, self.kv_heads


def _text(model: Model) -> _Text:
    tc, where = model.config, model.where
    for key in REQUIRED:
        if key not in tc:
            raise SpecError(f"{where}: {key}: missing; the planner needs it (HF text config)")
    hidden = _int(tc, "hidden_size", where)
    n = _int(tc, "num_hidden_layers", where)
    heads = _int(tc, "num_attention_heads", where)
    kv_heads = _int(tc, "num_key_value_heads", where)
    head_dim = _int(tc, "head_dim", where)
    inter = _int(tc, "intermediate_size", where)
    vocab = _int(tc, "vocab_size", where)
    types = tc["layer_types"]
    if not isinstance(types, list) or len(types) != n or any(t not in LAYER_TYPES for t in types):
        raise SpecError(
            f"{where}: layer_types: expected {n} entries (num_hidden_layers), each "
            f"sliding_attention or full_attention"
        )
    shared = _int(tc, "num_kv_shared_layers", where, minimum=0, default=0)
    if shared >= n:
        raise SpecError(f"{where}: num_kv_shared_layers: expected < {n}, got {shared}")
    window = None
    if "sliding_attention" in types:
        window = _int(tc, "sliding_window", where, minimum=1)
    ple = _int(tc, "hidden_size_per_layer_input", where, minimum=0, default=0)
    global_dim = _int(tc, "global_head_dim", where, default=head_dim)
    k_eq_v = bool(tc.get("attention_k_eq_v", False))
    global_kv = _int(tc, "num_global_key_value_heads", where, default=kv_heads)
    double = bool(tc.get("use_double_wide_mlp", False))
    moe = bool(tc.get("enable_moe_block", False))
    experts = top_k = e_inter = 0
    if moe:
        experts = _int(tc, "num_experts", where)
        top_k = _int(tc, "top_k_experts", where)
        e_inter = _int(tc, "moe_intermediate_size", where)
        if top_k > experts:
            raise SpecError(f"{where}: top_k_experts: expected <= num_experts ({experts})")
    return _Text(
        hidden,
        n,
        heads,
        kv_heads,
        head_dim,
        inter,
        vocab,
        types,
        n - shared,
        window,
        ple,
        global_dim,
        k_eq_v,
        global_kv,
        double,
        moe,
        experts,
        top_k,
        e_inter,
    )


def units(model: Model) -> list[Unit]:
    """The decoder's units in execution order (see socketlab.plan.stage)."""
    t = _text(model)
    res = t.hidden * FP32  # the residual vector a hop sends / an all-reduce sums (6 KiB for E2B)
    out: list[Unit] = []
    if t.ple:
        out.append(
            Unit(
                "ple_proj",
                None,
                rows=t.n * t.ple,
                row_bytes=t.hidden * BF16,
                fixed_bytes=t.ple * BF16,
                exchanges=1,
                out_bytes=res,
            )
        )
    for layer in range(t.n):
        out += _layer_units(t, layer, res)
    out.append(
        Unit(
            "head",
            None,
            rows=t.vocab,
            row_bytes=t.hidden * BF16,
            fixed_bytes=t.hidden * BF16,
            exchanges=1,
            act_fixed=t.hidden * FP32,
            out_bytes=res,
        )
    )  # a pipe split's head stages pass the input vector on
    return out


def _layer_units(t: _Text, layer: int, res: int) -> list[Unit]:
    """One decoder layer's units: attention, FFN, then its PLE and MoE parts where it has them."""
    out = [_attn_unit(t, layer, res)]
    own = layer < t.first_shared
    width = t.inter * (2 if t.double and not own else 1)
    out.append(
        Unit(
            "ffn",
            layer,
            rows=width,
            row_bytes=3 * t.hidden * BF16,
            fixed_bytes=2 * t.hidden * BF16,
            exchanges=2,
            act_fixed=t.hidden * FP32,
            act_per_row=BF16,  # down (FP32), act (BF16)
            elem_fixed=3 * t.hidden,
            gelu_per_row=1,  # pre/post-FFN norms, residual
            out_bytes=res,
        )
    )
    if t.ple:
        out.append(
            Unit(
                "ple",
                layer,
                fixed_bytes=(2 * t.ple * t.hidden + t.hidden) * BF16,
                exchanges=2,
                act_fixed=t.ple * BF16 + t.hidden * FP32,
                act_out=t.hidden * FP32,
                # gelu(gate) x per-layer input (split), output norm + residual
                elem_fixed=2 * t.hidden,
                gelu_split=t.ple,
                out_bytes=res,
            )
        )
    if t.moe:
        out.append(
            Unit(
                "router",
                layer,
                fixed_bytes=(t.experts * t.hidden + t.hidden + t.experts + 3 * t.hidden) * BF16,
                exchanges=1,
                act_fixed=t.experts * FP32,
                out_bytes=res,
            )
        )
        out.append(
            Unit(
                "experts",
                layer,
                rows=t.experts,
                row_bytes=3 * t.e_inter * t.hidden * BF16,
                exchanges=2,
                act_per_row=t.e_inter * BF16,
                top_k=t.top_k,
                out_bytes=res,
            )
        )
    return out


def _attn_unit(t: _Text, layer: int, res: int) -> Unit:
    """A layer's attention: its own KV weights, or (a KV-shared layer) the KV of the last earlier
    layer of its type."""
    hd, kvh = t.dims(layer)
    q, kv = t.heads * hd, kvh * hd
    own = layer < t.first_shared
    src = layer
    if not own:
        src = next(s for s in range(t.first_shared - 1, -1, -1) if t.types[s] == t.types[layer])
    kv_src = t.dims(src)[1] * t.dims(src)[0]
    n_kv_mats = 1 if t.k_eq_v and t.types[layer] == "full_attention" else 2
    kvw = (n_kv_mats * kv * t.hidden + hd) * BF16 if own else 0
    attn = (2 * q * t.hidden + hd + 2 * t.hidden) * BF16  # q, o, q_norm, in/post-attn norms
    return Unit(
        "attn",
        layer,
        fixed_bytes=attn + kvw,
        exchanges=4,
        kv_row_bytes=2 * kv_src * BF16,
        window=t.window if t.types[layer] == "sliding_attention" else None,
        kv_source=None if own else src,
        act_fixed=t.hidden * FP32,  # o (FP32) ...
        act_split=q * FP32 + q * BF16,  # ... q (FP32) and the attention output (BF16)
        heads=t.heads,
        kv_heads=kvh,
        kv_weight_bytes=kvw,
        # the non-GEMV work, as native/layer does it per row: the input norm, the
        # post-attention norm and residual (3 x hidden), q/k norms with RoPE and the v norm
        # per head, the combine over q's elements
        elem_fixed=3 * t.hidden,
        elem_heads=q + (2 * kv if own else 0),
        elem_split=q,
        head_dim=t.dims(src)[0],
        out_bytes=res,
    )


def layer_model(shape: str) -> Model:
    """One layer of a real-layer stage's shape file (experiments/shapes/) as a one-layer model:
    the stage runs exactly that layer, so the planner predicts it with `layer_stage(..., 0)`."""
    from socketlab.layer.shapes import load_shape

    s = load_shape(shape)
    tc = {
        "hidden_size": s.hidden,
        "num_hidden_layers": 1,
        "num_attention_heads": s.heads,
        "num_key_value_heads": s.kv_heads,
        "head_dim": s.head_dim,
        "intermediate_size": s.inter,
        "layer_types": [s.layer_type],
        "vocab_size": 16,
        "hidden_size_per_layer_input": s.ple,
        "attention_k_eq_v": s.kv_eq,
    }
    if s.window:
        tc["sliding_window"] = s.window - 1  # the stage attends window - 1 cached rows
    return Model(shape, tc, s.source or shape, {})
