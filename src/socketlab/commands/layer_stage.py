"""`orchestrate layer-stage`: run a native program on a cached layer dump (campaign-oct's layer
experiments, docs/spec.md "Layer dumps").

    orchestrate layer-stage --shape SHAPE --context C [--batch B] [--seed S] --cache DIR -- PROGRAM ARG...
    orchestrate layer-stage --shape SHAPE --matrices -- PROGRAM ARG...

With --context, the dump of SHAPE at context C with B batch rows and seed S is looked up in
DIR/<shape>-c<C>-b<B>-s<S>-<digest> (digest: the shape file's bytes and the generator version,
so an edited shape file never reuses a stale dump); the first run on a host generates it
(`orchestrate layer-dump`, into a temporary folder renamed in place under a lock, so a killed
run leaves no half dump), every later run reuses it. Then PROGRAM replaces this process (same
PID, so the runner's timeout and kill by process group reach it) with ``--dump DIR`` appended.
With --matrices, ``--layer ROWSxCOLS,...`` (the shape's GEMV matrices, `gemv --layer`) is
appended instead. Nothing but PROGRAM's own output reaches stdout: the generation line goes to
stderr.

Exit status: PROGRAM's; 2 bad input (unknown shape file, bad numbers, no PROGRAM).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import shutil
import sys
import time
from pathlib import Path

from socketlab.errors import SocketlabError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "layer-stage",
        help="run a program on a cached layer dump (generated once per host)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--shape", required=True, metavar="SHAPE",
                   help="shape file or name (experiments/shapes/)")
    p.add_argument("--context", type=int, metavar="C", help="dump context (tokens)")
    p.add_argument("--batch", type=int, default=1, metavar="B", help="batch rows in the dump")
    p.add_argument("--seed", type=int, default=1, metavar="S", help="generator seed (default 1)")
    p.add_argument("--cache", metavar="DIR", help="dump cache folder (relative: to the cwd)")
    p.add_argument("--kv-cap", type=int, default=16384, metavar="N",
                   help="longest dump context (default 16384): a full-attention layer at C > N "
                        "runs a dump of N with --ctx-repeat C/N (timing only); a sliding layer "
                        "at C > N a dump of N (its window bounds the KV anyway)")
    p.add_argument("--matrices", action="store_true",
                   help="append --layer ROWSxCOLS,... (the shape's matrices) instead of --dump")
    p.add_argument("program", nargs="*", metavar="PROGRAM ARG", help="after '--': what to run")
    p.set_defaults(func=run)


def dump_key(shape_path: Path, name: str, context: int, batch: int, seed: int) -> str:
    """Cache folder name: readable parameters plus a digest of what the dump depends on."""
    from socketlab.layer import VERSION

    digest = hashlib.sha256(shape_path.read_bytes() + f"\0{VERSION}".encode()).hexdigest()[:12]
    return f"{name}-c{context}-b{batch}-s{seed}-{digest}"


def shape_path_of(shape: str) -> Path:
    """The shape file a SHAPE argument names (as `load_shape` resolves it)."""
    from socketlab.paths import EXPERIMENTS

    p = Path(shape)
    if p.suffix in (".yaml", ".yml") or p.exists():
        return p
    return EXPERIMENTS / "shapes" / f"{shape}.yaml"


def dump_context(shape: str, context: int, cap: int) -> tuple[int, int]:
    """(context of the dump, --ctx-repeat) for a run at ``context``: at most ``cap`` tokens are
    generated; a full-attention layer past it repeats the KV (the stage then checks no numerics,
    as the published 128K rows were timing only)."""
    from socketlab.layer.shapes import load_shape

    if cap < 1:
        raise SocketlabError(f"layer-stage: --kv-cap {cap}: expected a positive number")
    if context <= cap:
        return context, 1
    if load_shape(shape).window:  # sliding: the cache holds window - 1 rows at any context
        return cap, 1
    if context % cap:
        raise SocketlabError(f"layer-stage: --context {context} above --kv-cap {cap} must be a "
                             f"multiple of it (the KV is repeated {context}/{cap} times)")
    return cap, context // cap


def ensure_dump(shape: str, context: int, batch: int, seed: int, cache: Path) -> Path:
    """The cached dump's folder, generated first if the cache lacks it."""
    from socketlab.layer.generate import build_layer, write_layer
    from socketlab.layer.shapes import load_shape

    loaded = load_shape(shape)  # one-line error for a bad or missing shape file
    key = dump_key(shape_path_of(shape), loaded.name, context, batch, seed)
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SocketlabError(f"--cache {cache}: cannot create: {exc.strerror}") from None
    final = cache / key
    with open(cache / f".{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one generator per dump, even across orchestrators
        if (final / "meta.json").is_file():
            return final
        t0 = time.monotonic()
        tmp = cache / f".{key}.tmp{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            write_layer(build_layer(loaded, context, batch, seed), tmp)
            shutil.rmtree(final, ignore_errors=True)  # a folder without meta.json: incomplete
            os.rename(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print(f"layer-stage: generated {final} ({loaded.name}, context {context}, batch {batch}, "
              f"seed {seed}) in {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)
    return final


def run(args: argparse.Namespace) -> int:
    program = list(args.program)
    if not program:
        raise SocketlabError("layer-stage: expected '-- PROGRAM ARG...' after the options")
    if not os.access(program[0], os.X_OK):  # before a dump is generated for nothing
        raise SocketlabError(f"layer-stage: cannot run {program[0]}: not an executable file")
    if args.matrices == (args.context is not None):
        raise SocketlabError("layer-stage: expected exactly one of --context C or --matrices")
    if args.matrices:
        from socketlab.layer.shapes import load_shape

        extra = ["--layer", load_shape(args.shape).gemv_layer_arg()]
    else:
        if args.context < 1 or not 1 <= args.batch <= 64:
            raise SocketlabError(f"layer-stage: --context {args.context}, --batch {args.batch}: "
                                 "expected a positive context and 1 <= batch <= 64")
        if not args.cache:
            raise SocketlabError("layer-stage: --cache DIR is required with --context")
        context, repeat = dump_context(args.shape, args.context, args.kv_cap)
        dump = ensure_dump(args.shape, context, args.batch, args.seed, Path(args.cache))
        extra = ["--dump", str(dump.resolve())]
        if repeat > 1:
            extra += ["--ctx-repeat", str(repeat)]
    argv = [*program, *extra]
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(argv[0], argv)
    except OSError as exc:
        raise SocketlabError(f"layer-stage: cannot run {argv[0]}: {exc.strerror}") from None
    return 0  # not reached
