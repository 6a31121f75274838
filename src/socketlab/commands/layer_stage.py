"""`orchestrate layer-stage`: run a native program on a cached layer dump (campaign-oct's layer
experiments, docs/spec.md "Layer dumps").

    orchestrate layer-stage --shape SHAPE --context C [--batch B] [--seed S] --cache DIR -- PROGRAM ARG...
    orchestrate layer-stage --shape SHAPE --matrices -- PROGRAM ARG...

Campaign specs don't use this command any more: a spec's `layer_dump:` block has the
controller generate the dump and copy it to the host (docs/spec.md "Layer dumps"), so a host
needs no socketlab and no numpy. This command is for running a stage by hand where socketlab
is installed.

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
"""  # noqa: E501 (the usage synopsis)

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from socketlab.errors import SocketlabError
from socketlab.layer.cache import KV_CAP, dump_context, ensure_dump


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "layer-stage",
        help="run a program on a cached layer dump (generated once per host)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--shape", required=True, metavar="SHAPE", help="shape file or name (experiments/shapes/)"
    )
    p.add_argument("--context", type=int, metavar="C", help="dump context (tokens)")
    p.add_argument("--batch", type=int, default=1, metavar="B", help="batch rows in the dump")
    p.add_argument("--seed", type=int, default=1, metavar="S", help="generator seed (default 1)")
    p.add_argument("--cache", metavar="DIR", help="dump cache folder (relative: to the cwd)")
    p.add_argument(
        "--kv-cap",
        type=int,
        default=KV_CAP,
        metavar="N",
        help="longest dump context (default 16384): a full-attention layer at C > N "
        "runs a dump of N with --ctx-repeat C/N (timing only); a sliding layer "
        "at C > N a dump of N (its window bounds the KV anyway)",
    )
    p.add_argument(
        "--matrices",
        action="store_true",
        help="append --layer ROWSxCOLS,... (the shape's matrices) instead of --dump",
    )
    p.add_argument("program", nargs="*", metavar="PROGRAM ARG", help="after '--': what to run")
    p.set_defaults(func=run)


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
            raise SocketlabError(
                f"layer-stage: --context {args.context}, --batch {args.batch}: "
                "expected a positive context and 1 <= batch <= 64"
            )
        if not args.cache:
            raise SocketlabError("layer-stage: --cache DIR is required with --context")
        try:
            context, repeat = dump_context(args.shape, args.context, args.kv_cap)
        except SocketlabError as exc:
            raise SocketlabError(f"layer-stage: {exc}") from None
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
