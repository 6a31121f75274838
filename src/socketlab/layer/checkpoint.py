"""One layer of a real Gemma-4 checkpoint: config.json + *.safetensors (read with numpy).

The shape comes from config.json (`text_config` of a Gemma4 multimodal config, or a bare
Gemma4TextConfig); the tensors are found by their name's tail `layers.<N>.<param>` in the
text model (vision/audio towers skipped). BF16 tensors are taken bit for bit; F32/F16 ones
are rounded to BF16, because the stage runs BF16 weights and the reference must use the same.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
import struct
from pathlib import Path

import numpy as np

from socketlab.layer.bf16 import from_bits, round_f32
from socketlab.layer.errors import LayerError
from socketlab.layer.shapes import Shape, from_hf_text_config
from socketlab.layer.weights import check_weights

_DTYPES = {"BF16": ("<u2", 2), "F32": ("<f4", 4), "F16": ("<f2", 2)}
#: Fields a shape file and the checkpoint's config must agree on.
_AGREE = (
    "attention",
    "hidden",
    "heads",
    "kv_heads",
    "head_dim",
    "window",
    "inter",
    "ple",
    "experts",
    "top_k",
    "moe_inter",
)


def read_header(path: Path) -> tuple[dict, int]:
    """A safetensors file's JSON header and the offset its data starts at."""
    try:
        with path.open("rb") as f:
            raw = f.read(8)
            if len(raw) < 8:
                raise LayerError(f"{path}: not a safetensors file (shorter than its header)")
            (n,) = struct.unpack("<Q", raw)
            if n > 100 * 2**20:
                raise LayerError(f"{path}: header of {n} bytes; expected a safetensors file")
            header = json.loads(f.read(n))
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise LayerError(f"{path}: not a safetensors file ({exc})") from None
    if not isinstance(header, dict):
        raise LayerError(f"{path}: header is not a JSON object; expected a safetensors file")
    return header, 8 + n


def _text_config(ckpt: Path) -> tuple[dict, Path]:
    cfg_path = ckpt / "config.json"
    try:
        cfg = json.loads(cfg_path.read_text())
    except FileNotFoundError:
        raise LayerError(f"{cfg_path}: missing; expected the checkpoint's config.json") from None
    except (OSError, ValueError) as exc:
        raise LayerError(f"{cfg_path}: not valid JSON ({exc})") from None
    tc = cfg.get("text_config", cfg) if isinstance(cfg, dict) else None
    if not isinstance(tc, dict):
        raise LayerError(f"{cfg_path}: expected a Gemma-4 config object")
    return tc, cfg_path


def checkpoint_shape(checkpoint: str | Path, layer: int, expected: Shape | None = None) -> Shape:
    """Layer `layer`'s Shape from the checkpoint's config.json (no tensors read). With
    `expected` (the shape file named beside it) the config must agree field by field."""
    ckpt = Path(checkpoint)
    if not ckpt.is_dir():
        raise LayerError(
            f"{checkpoint}: --checkpoint: no such directory; expected safetensors + config.json"
        )
    tc, cfg_path = _text_config(ckpt)
    shape = from_hf_text_config(tc, layer, str(cfg_path))
    if expected is not None:
        for f in _AGREE:
            got, want = getattr(shape, f), getattr(expected, f)
            if got != want:
                raise LayerError(
                    f"{cfg_path}: layer {layer}: {f} {got!r}, but {expected.source} says {want!r}; "
                    "expected the shape file of this layer"
                )
        shape = dataclasses.replace(shape, name=expected.name, model=expected.model)
    return shape


def layer_tensors(ckpt: Path, shape: Shape, layer: int) -> dict[str, tuple[Path, str, dict, int]]:
    """param -> (file, tensor key, header entry, data offset) of layer `layer`'s tensors in the
    checkpoint's safetensors files (vision/audio towers skipped)."""
    files = sorted(ckpt.glob("*.safetensors"))
    if not files:
        raise LayerError(f"{ckpt}: no *.safetensors files; expected the checkpoint's weights")
    want = {n for n, *_ in shape.matrices()} | {n for n, _ in shape.norms()} | {"layer_scalar"}
    want |= {n for n, _ in shape.expert_tensors()}  # MoE: the stacked experts (3-D)
    tail = re.compile(rf"(?:^|\.)layers\.{layer}\.(.+)$")
    found: dict[str, tuple[Path, str, dict, int]] = {}
    for path in files:
        header, data0 = read_header(path)
        for key, info in header.items():
            if key == "__metadata__" or "vision" in key or "audio" in key:
                continue
            m = tail.search(key)
            if not m or m.group(1) not in want:
                continue
            param = m.group(1)
            if param in found:
                raise LayerError(
                    f"{path}: {key}: a second tensor for layer {layer}'s {param} "
                    f"(first: {found[param][1]}); expected one"
                )
            found[param] = (path, key, info, data0)
    return found


def checkpoint_digest(checkpoint: str | Path, layer: int, shape: Shape) -> str:
    """What a dump of this layer depends on, hashed: config.json, and the layer's tensors (their
    names, headers and bytes; a checkpoint re-saved with other values under the same names gets
    another digest). Memoized per file size and mtime, so a plan reads each layer once."""
    ckpt = Path(checkpoint)
    found = layer_tensors(ckpt, shape, layer)
    stamp = tuple(
        sorted(
            (str(p), p.stat().st_size, p.stat().st_mtime_ns)
            for p in {ckpt / "config.json", *(f[0] for f in found.values())}
        )
    )
    return _digest(str(ckpt), layer, shape.name, stamp)


@functools.lru_cache(maxsize=64)
def _digest(ckpt: str, layer: int, shape_name: str, stamp: tuple) -> str:
    h = hashlib.sha256((Path(ckpt) / "config.json").read_bytes())
    shape = checkpoint_shape(ckpt, layer)
    for param, (path, key, info, data0) in sorted(layer_tensors(Path(ckpt), shape, layer).items()):
        a, z = (int(x) for x in info.get("data_offsets", (0, 0)))
        h.update(f"\0{param}\0{key}\0{json.dumps(info, sort_keys=True)}\0".encode())
        with path.open("rb") as f:
            f.seek(data0 + a)
            left = z - a
            while left > 0:
                block = f.read(min(left, 1 << 24))
                if not block:
                    break
                h.update(block)
                left -= len(block)
    return h.hexdigest()[:12]


def load_checkpoint_layer(
    checkpoint: str | Path, layer: int, expected: Shape | None = None
) -> tuple[Shape, dict[str, np.ndarray]]:
    """The Shape and BF16-exact float32 weights of layer `layer`. With `expected` (the shape
    file given on the command line) the config must agree with it field by field."""
    ckpt = Path(checkpoint)
    shape = checkpoint_shape(ckpt, layer, expected)
    found = layer_tensors(ckpt, shape, layer)
    weights: dict[str, np.ndarray] = {}
    for param, (path, key, info, data0) in found.items():
        weights[param] = _read_tensor(path, key, info, data0)
    weights.setdefault("layer_scalar", np.ones(1, np.float32))  # checkpoints before the buffer
    weights["layer_scalar"] = weights["layer_scalar"].reshape(-1)[:1].astype(np.float32)
    check_weights(shape, weights, f"{ckpt} (layer {layer})")
    return shape, weights


def _read_tensor(path: Path, key: str, info: dict, data0: int) -> np.ndarray:
    dtype = info.get("dtype")
    if dtype not in _DTYPES:
        raise LayerError(f"{path}: {key}: dtype {dtype!r}; expected BF16, F16 or F32")
    np_dtype, size = _DTYPES[dtype]
    dims = [int(d) for d in info.get("shape", [])]
    a, z = (int(x) for x in info.get("data_offsets", (0, -1)))
    if z - a != size * int(np.prod(dims)):
        raise LayerError(
            f"{path}: {key}: {z - a} bytes for {dtype} {dims}; the header is inconsistent"
        )
    raw = np.fromfile(path, dtype=np_dtype, count=(z - a) // size, offset=data0 + a)
    if raw.size * size != z - a:
        raise LayerError(f"{path}: {key}: file ends early; expected {z - a} bytes of data")
    if dtype == "BF16":
        return from_bits(raw).reshape(dims)
    return round_f32(raw.astype(np.float32)).reshape(dims)
