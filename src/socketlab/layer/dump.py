"""The dump directory shared with native/layer (and the original l2r_layer.c).

A dump is raw little-endian tensors `<name>.<dtype>` (bf16: uint16 bit patterns; f32), listed
one per line in manifest.txt as `name dtype d0 d1 ...` (row-major), plus meta.json. Batch row 0
is the dump directory itself; rows 1..B-1 are complete dumps in `row<i>/` whose weight files
are symlinks to row 0's. Contract: docs/layer.md.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from socketlab.layer.bf16 import from_bits, to_bits
from socketlab.layer.errors import LayerError

DTYPES = {"bf16": 2, "f32": 4}
_NAME = re.compile(r"^[A-Za-z0-9_.]+$")
MANIFEST, META = "manifest.txt", "meta.json"


class DumpWriter:
    """Writes tensors and the manifest of one dump directory."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.lines: list[str] = []

    def tensor(self, name: str, a: np.ndarray, dtype: str, link_to: Path | None = None) -> None:
        """Write `a` as <name>.<dtype>; with link_to (a dump dir holding the same tensor) write
        a relative symlink instead of a copy."""
        assert _NAME.match(name) and dtype in DTYPES, (name, dtype)
        file = self.path / f"{name}.{dtype}"
        if file.is_symlink() or file.exists():
            file.unlink()
        if link_to is not None:
            os.symlink(os.path.relpath(Path(link_to) / file.name, self.path), file)
        else:
            raw = to_bits(a) if dtype == "bf16" else np.ascontiguousarray(a, dtype="<f4")
            raw.astype("<u2" if dtype == "bf16" else "<f4", copy=False).tofile(file)
        dims = " ".join(str(int(d)) for d in np.shape(a))
        self.lines.append(f"{name} {dtype} {dims}")

    def finish(self, meta: dict[str, Any]) -> None:
        (self.path / MANIFEST).write_text("\n".join(self.lines) + "\n")
        # indent=1 writes `"key": value`, the form l2r_layer.c's meta parser looks for
        (self.path / META).write_text(json.dumps(meta, indent=1) + "\n")


class Dump:
    """A dump directory read back: the manifest's entries, meta.json, tensors on demand."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_dir():
            raise LayerError(
                f"{path}: no such dump directory; expected a directory with {MANIFEST}"
            )
        self.entries = read_manifest(self.path)
        meta_file = self.path / META
        try:
            self.meta = json.loads(meta_file.read_text())
        except FileNotFoundError:
            raise LayerError(f"{meta_file}: missing; expected the dump's meta.json") from None
        except (OSError, ValueError) as exc:
            raise LayerError(f"{meta_file}: not valid JSON ({exc})") from None
        if not isinstance(self.meta, dict):
            raise LayerError(f"{meta_file}: expected a JSON object")

    def has(self, name: str) -> bool:
        return name in self.entries

    def shape_of(self, name: str) -> tuple[int, ...]:
        return self.entries[name][1]

    def raw(self, name: str) -> np.ndarray:
        if name not in self.entries:
            raise LayerError(f"{self.path / MANIFEST}: {name}: missing; expected a tensor line")
        dtype, dims = self.entries[name]
        file = self.path / f"{name}.{dtype}"
        want = math.prod(dims) * DTYPES[dtype]
        try:
            size = file.stat().st_size
        except FileNotFoundError:
            raise LayerError(
                f"{file}: missing; the manifest lists {name} {dtype} {list(dims)}"
            ) from None
        if size != want:
            raise LayerError(
                f"{file}: {size} bytes, expected {want} ({dtype} {list(dims)}); truncated or "
                "wrong shape"
            )
        a = np.fromfile(file, dtype="<u2" if dtype == "bf16" else "<f4")
        return a.reshape(dims)

    def f32(self, name: str) -> np.ndarray:
        """The tensor as float32 (bf16 widened exactly)."""
        a = self.raw(name)
        return from_bits(a).reshape(a.shape) if a.dtype == np.dtype("<u2") else a.astype(np.float32)

    def rows(self) -> list[Dump]:
        """This dump and its batch rows row1/, row2/, ... (in order, stopping at the first gap)."""
        out: list[Dump] = [self]
        i = 1
        while (self.path / f"row{i}").is_dir():
            out.append(Dump(self.path / f"row{i}"))
            i += 1
        return out


def read_manifest(path: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    file = path / MANIFEST
    try:
        text = file.read_text()
    except FileNotFoundError:
        raise LayerError(
            f"{file}: missing; expected one `name dtype d0 d1 ...` line per tensor"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise LayerError(f"{file}: can't read ({exc})") from None
    entries: dict[str, tuple[str, tuple[int, ...]]] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        where = f"{file}:{n}"
        if len(parts) < 3:
            raise LayerError(f"{where}: expected `name dtype d0 d1 ...`, got {line.strip()!r}")
        name, dtype, dims = parts[0], parts[1], parts[2:]
        if not _NAME.match(name):
            raise LayerError(f"{where}: {name}: expected a name of letters, digits, '_' and '.'")
        if dtype not in DTYPES:
            raise LayerError(f"{where}: {name}: dtype {dtype!r}, expected bf16 or f32")
        if not all(d.isdigit() and int(d) > 0 for d in dims):
            raise LayerError(f"{where}: {name}: dims {' '.join(dims)}: expected positive integers")
        if name in entries:
            raise LayerError(f"{where}: {name}: listed twice; expected each tensor once")
        entries[name] = (dtype, tuple(int(d) for d in dims))
    if not entries:
        raise LayerError(f"{file}: empty; expected one line per tensor")
    return entries


def expected_tensors(
    meta: dict[str, Any], boundaries: Iterable[str]
) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Every tensor a dump of this meta must hold: name -> (dtype, shape)."""
    h, nh, kvh, hd = meta["hidden"], meta["heads"], meta["kv_heads"], meta["head_dim"]
    inter, ple, cl = meta["inter"], meta["ple"], meta["cache_len"]
    q, kv = nh * hd, kvh * hd
    want: dict[str, tuple[str, tuple[int, ...]]] = {
        "w.input_layernorm.weight": ("bf16", (h,)),
        "w.self_attn.q_proj.weight": ("bf16", (q, h)),
        "w.self_attn.k_proj.weight": ("bf16", (kv, h)),
        "w.self_attn.o_proj.weight": ("bf16", (h, q)),
        "w.self_attn.q_norm.weight": ("bf16", (hd,)),
        "w.self_attn.k_norm.weight": ("bf16", (hd,)),
        "w.post_attention_layernorm.weight": ("bf16", (h,)),
        "w.pre_feedforward_layernorm.weight": ("bf16", (h,)),
        "w.mlp.gate_proj.weight": ("bf16", (inter, h)),
        "w.mlp.up_proj.weight": ("bf16", (inter, h)),
        "w.mlp.down_proj.weight": ("bf16", (h, inter)),
        "w.post_feedforward_layernorm.weight": ("bf16", (h,)),
        "layer_scalar": ("f32", (1,)),
        "x_in": ("f32", (h,)),
        "cos": ("f32", (hd,)),
        "sin": ("f32", (hd,)),
    }
    if not meta.get("kv_eq"):
        want["w.self_attn.v_proj.weight"] = ("bf16", (kv, h))
    if ple:
        want |= {
            "w.per_layer_input_gate.weight": ("bf16", (ple, h)),
            "w.per_layer_projection.weight": ("bf16", (h, ple)),
            "w.post_per_layer_input_norm.weight": ("bf16", (h,)),
            "per_layer_input": ("f32", (ple,)),
        }
    ne, k, ei = meta.get("experts") or 0, meta.get("top_k") or 0, meta.get("moe_inter") or 0
    if meta.get("moe"):
        want |= {
            "w.router.proj.weight": ("bf16", (ne, h)),
            "w.router.scale": ("bf16", (h,)),
            "w.router.per_expert_scale": ("bf16", (ne,)),
            "w.pre_feedforward_layernorm_2.weight": ("bf16", (h,)),
            "w.post_feedforward_layernorm_1.weight": ("bf16", (h,)),
            "w.post_feedforward_layernorm_2.weight": ("bf16", (h,)),
            "w.experts.gate_up_proj": ("bf16", (ne, 2 * ei, h)),
            "w.experts.down_proj": ("bf16", (ne, h, ei)),
            "router_idx": ("f32", (k,)),
        }
    if (meta.get("tp") or 1) > 1:  # a tensor-parallel slice: the other ranks' o and down
        want |= {"o_rest": ("f32", (h,)), "down_rest": ("f32", (h,))}
    if cl:  # a zero-row cache has no file: the manifest can't list a 0 dimension
        want["kcache"] = ("bf16", (kvh, cl, hd))
        want["vcache"] = ("bf16", (kvh, cl, hd))
    sizes = {
        "xn": h,
        "q": q,
        "qn": q,
        "k": kv,
        "v": kv,
        "kn": kv,
        "vn": kv,
        "attn": q,
        "o": h,
        "h1": h,
        "xn2": h,
        "gate": inter,
        "up": inter,
        "act": inter,
        "down": h,
        "h2": h,
        "pg": ple,
        "pact": ple,
        "pp": h,
        "out": h,
        "rs": ne,
        "rw": k,
        "xn3": h,
        "moe": h,
    }
    for b in boundaries:
        want[f"ref.{b}"] = ("f32", (sizes[b],))
    return want


META_INTS = ("hidden", "heads", "kv_heads", "head_dim", "inter", "ple", "cache_len", "ctx")
MOE_INTS = ("experts", "top_k", "moe_inter")


def validate(dump: Dump, boundaries: Iterable[str]) -> None:
    """Manifest vs meta vs files: every expected tensor listed with its dtype and shape, every
    listed file present and of the right size. Raises LayerError naming the first problem."""
    meta_file = dump.path / META
    for key in META_INTS + (MOE_INTS if dump.meta.get("moe") else ()):
        v = dump.meta.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise LayerError(f"{meta_file}: {key}: expected a non-negative integer, got {v!r}")
    if not isinstance(dump.meta.get("bf16_ref_err"), dict):
        raise LayerError(f"{meta_file}: bf16_ref_err: expected {{boundary: {{rel_rms, ...}}}}")
    boundaries = list(boundaries)
    for b in boundaries:
        bar = dump.meta["bf16_ref_err"].get(b)
        if not isinstance(bar, dict) or not isinstance(bar.get("rel_rms"), int | float):
            raise LayerError(f"{meta_file}: bf16_ref_err.{b}.rel_rms: expected a number")
    if "bf16_ref_spread" in dump.meta:  # optional: dumps of ref_layer.py and older ours lack it
        worst = (
            dump.meta["bf16_ref_spread"].get("rel_rms_max")
            if isinstance(dump.meta["bf16_ref_spread"], dict)
            else None
        )
        for b in boundaries:
            v = worst.get(b) if isinstance(worst, dict) else None
            if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
                raise LayerError(
                    f"{meta_file}: bf16_ref_spread.rel_rms_max.{b}: expected a non-negative number"
                )
    manifest = dump.path / MANIFEST
    for name, (dtype, dims) in expected_tensors(dump.meta, boundaries).items():
        if name not in dump.entries:
            raise LayerError(
                f"{manifest}: {name}: missing; expected {name} {dtype} {' '.join(map(str, dims))}"
            )
        got_dtype, got_dims = dump.entries[name]
        if (got_dtype, got_dims) != (dtype, dims):
            raise LayerError(
                f"{manifest}: {name}: {got_dtype} {list(got_dims)}, expected {dtype} {list(dims)}"
            )
    for name in dump.entries:
        dump.raw(name)  # file present, size matches
