"""Layer dumps by content: the key of a dump, the controller's cache, and the file manifest that
ships a dump to a host.

A dump depends on its shape file's bytes, the generator version, the context, the batch rows and
the seed; its key names the readable parameters and a digest of the rest, so an edited shape
file never reuses a stale dump. Dumps are generated here on the controller (numpy: a fresh host
has none) and copied to each host once, checksum verified (socketlab.execute.dumps). Everything
but ``ensure_dump`` is pure arithmetic on the shape file, so a spec's `layer_dump:` block renders
the dump's host path at plan time.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from socketlab.errors import SocketlabError

#: Longest context a dump is generated for; past it a full-attention layer repeats the KV
#: (timing only, as the published 128K rows), a sliding one runs the capped dump.
KV_CAP = 16384
#: Per-file sha256 of a finished dump, written beside meta.json (not part of the dump itself).
MANIFEST = ".files.json"


@dataclass(frozen=True)
class DumpRef:
    """One dump, as a point needs it: what to generate and where it lives."""

    shape: str  #: shape file path or name, as written in the spec
    name: str  #: the shape's name
    context: int  #: the dump's context (capped)
    batch: int
    seed: int
    ctx_repeat: int  #: --ctx-repeat for the stage (1: the dump is the run's KV)
    key: str  #: folder name in a cache: <name>-c<C>-b<B>-s<S>[-<variant>]-<digest>
    variant: str = "default"  #: the generator's variant (socketlab.layer.generate.VARIANTS)
    tp: int = 1  #: a tensor-parallel slice: rank `rank` of `tp` (socketlab.layer.tp)
    rank: int = 0
    checkpoint: str | None = None  #: real weights: a checkpoint folder on the controller
    layer: int | None = None  #: and the layer's index in it

    def as_dict(self) -> dict:
        return {
            "shape": self.shape,
            "name": self.name,
            "context": self.context,
            "batch": self.batch,
            "seed": self.seed,
            "ctx_repeat": self.ctx_repeat,
            "key": self.key,
            "variant": self.variant,
            "tp": self.tp,
            "rank": self.rank,
            "checkpoint": self.checkpoint,
            "layer": self.layer,
        }


def shape_path_of(shape: str) -> Path:
    """The shape file a SHAPE argument names (as `load_shape` resolves it)."""
    from socketlab.paths import EXPERIMENTS

    p = Path(shape)
    if p.suffix in (".yaml", ".yml") or p.exists():
        return p
    return EXPERIMENTS / "shapes" / f"{shape}.yaml"


def dump_key(
    shape_path: Path,
    name: str,
    context: int,
    batch: int,
    seed: int,
    variant: str = "default",
    tp: int = 1,
    rank: int = 0,
    weights: str = "",
) -> str:
    """Cache folder name: readable parameters plus a digest of what the dump depends on (the
    default variant's keys are those before variants existed)."""
    from socketlab.layer import VERSION

    digest = hashlib.sha256(shape_path.read_bytes() + f"\0{VERSION}".encode()).hexdigest()[:12]
    tag = ("" if variant == "default" else f"-{variant}") + (f"-tp{tp}r{rank}" if tp > 1 else "")
    tag += f"-{weights}" if weights else ""  # ck<checkpoint digest>L<layer>: real weights
    return f"{name}-c{context}-b{batch}-s{seed}{tag}-{digest}"


def dump_context(shape: str, context: int, cap: int = KV_CAP) -> tuple[int, int]:
    """(context of the dump, --ctx-repeat) for a run at ``context``: at most ``cap`` tokens are
    generated; a full-attention layer past it repeats the KV (the stage then checks no numerics,
    as the published 128K rows were timing only)."""
    from socketlab.layer.shapes import load_shape

    if cap < 1:
        raise SocketlabError(f"layer dump: kv_cap {cap}: expected a positive number")
    if context <= cap:
        return context, 1
    if load_shape(shape).window:  # sliding: the cache holds window - 1 rows at any context
        return cap, 1
    if context % cap:
        raise SocketlabError(
            f"layer dump: context {context} above kv_cap {cap} must be a "
            f"multiple of it (the KV is repeated {context}/{cap} times)"
        )
    return cap, context // cap


def dump_ref(
    shape: str,
    context: int,
    batch: int = 1,
    seed: int = 1,
    kv_cap: int = KV_CAP,
    variant: str = "default",
    tp: int = 1,
    rank: int = 0,
    checkpoint: str | None = None,
    layer: int | None = None,
) -> DumpRef:
    """The dump a run of ``shape`` at ``context`` uses (pure: reads the shape file only)."""
    from socketlab.layer.generate import VARIANTS
    from socketlab.layer.shapes import load_shape

    if context < 1 or not 1 <= batch <= 64:
        raise SocketlabError(
            f"layer dump: context {context}, batch {batch}: expected a "
            "positive context and 1 <= batch <= 64"
        )
    if variant not in VARIANTS:
        raise SocketlabError(
            f"layer dump: variant {variant!r}: expected one of {', '.join(VARIANTS)}"
        )
    loaded = load_shape(shape)  # one-line error for a bad or missing shape file
    from socketlab.layer.tp import tp_slice

    tp_slice(loaded, tp, rank)  # a layer that can't be split so: one line, at plan time
    weights = ""
    if (checkpoint is None) != (layer is None):
        raise SocketlabError("layer dump: checkpoint and layer: expected both or neither")
    if checkpoint is not None:  # real weights: the config must agree with the shape file
        from socketlab.layer.checkpoint import checkpoint_digest, checkpoint_shape

        real = checkpoint_shape(checkpoint, layer, loaded)
        weights = f"ck{checkpoint_digest(checkpoint, layer, real)}L{layer}"
    dump_ctx, repeat = dump_context(shape, context, kv_cap)
    key = dump_key(
        shape_path_of(shape), loaded.name, dump_ctx, batch, seed, variant, tp, rank, weights
    )
    return DumpRef(
        shape, loaded.name, dump_ctx, batch, seed, repeat, key, variant, tp, rank, checkpoint, layer
    )


def file_sums(folder: Path) -> dict[str, dict[str, str]]:
    """{"files": name -> sha256, "links": name -> target} of a dump folder (subfolders as a/b;
    the rows' weight files are symlinks to the first row's, kept as links), manifest excluded."""
    files, links = {}, {}
    for path in sorted(folder.rglob("*")):
        name = path.relative_to(folder).as_posix()
        if path.is_symlink():
            links[name] = os.readlink(path)
        elif path.is_file() and path.name != MANIFEST:
            digest = hashlib.sha256()
            with open(path, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
            files[name] = digest.hexdigest()
    return {"files": files, "links": links}


def manifest(folder: Path) -> dict[str, dict[str, str]]:
    """The dump's file sums and links, computed once and kept beside it (MANIFEST)."""
    path = folder / MANIFEST
    try:
        known = json.loads(path.read_text())
        if isinstance(known, dict) and set(known) == {"files", "links"}:
            return known
    except (OSError, ValueError):
        pass
    sums = file_sums(folder)
    tmp = path.with_name(f".{MANIFEST}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(sums, sort_keys=True, indent=0))
    os.replace(tmp, path)
    return sums


def ensure_dump(
    shape: str,
    context: int,
    batch: int,
    seed: int,
    cache: Path,
    variant: str = "default",
    tp: int = 1,
    rank: int = 0,
    checkpoint: str | None = None,
    layer: int | None = None,
) -> Path:
    """The cached dump's folder, generated first if the cache lacks it (``context`` is the
    dump's own, already capped). A lock makes one generator per dump, even across processes;
    the dump is written to a temporary folder renamed in place, so a killed run leaves none
    half-written."""
    from socketlab.layer.generate import build_layer, write_layer
    from socketlab.layer.shapes import load_shape

    loaded = load_shape(shape)
    weights, shape_w = "", loaded
    if checkpoint is not None:
        from socketlab.layer.checkpoint import checkpoint_digest, checkpoint_shape

        shape_w = checkpoint_shape(checkpoint, layer, loaded)
        weights = f"ck{checkpoint_digest(checkpoint, layer, shape_w)}L{layer}"
    key = dump_key(
        shape_path_of(shape), loaded.name, context, batch, seed, variant, tp, rank, weights
    )
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SocketlabError(f"layer dump cache {cache}: cannot create: {exc.strerror}") from None
    final = cache / key
    with open(cache / f".{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / "meta.json").is_file():
            return final
        t0 = time.monotonic()
        tmp = cache / f".{key}.tmp{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            w = None
            if checkpoint is not None:  # the tensors themselves, BF16 bit for bit
                from socketlab.layer.checkpoint import load_checkpoint_layer

                shape_w, w = load_checkpoint_layer(checkpoint, layer, loaded)
            write_layer(
                build_layer(shape_w, context, batch, seed, w, checkpoint, variant, tp, rank), tmp
            )
            manifest(tmp)
            shutil.rmtree(final, ignore_errors=True)  # a folder without meta.json: incomplete
            os.rename(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print(
            f"layer dump: generated {final} ({loaded.name}, context {context}, batch {batch}, "
            f"seed {seed}, {variant}) in {time.monotonic() - t0:.1f} s",
            file=sys.stderr,
            flush=True,
        )
    return final


def controller_cache() -> Path:
    """Where the controller keeps generated dumps: $SOCKETLAB_DUMP_CACHE, else
    <repo>/.cache/layer-dumps (git-ignored)."""
    from socketlab.paths import CACHE

    return Path(os.environ.get("SOCKETLAB_DUMP_CACHE") or CACHE / "layer-dumps")
