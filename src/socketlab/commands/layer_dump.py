"""`orchestrate layer-dump`: generate one decoder layer's dump for native/layer (docs/layer.md).

The layer comes from a shape file (experiments/shapes/<name>.yaml, or a bare name) with seeded
random weights, or with --checkpoint DIR --layer N from a checkpoint's safetensors and
config.json (the shape then comes from config.json; SHAPE_FILE is still checked and must
agree). The dump holds the weights, B distinct batch rows (own input, per-layer input and KV
history of C tokens), the FP32 reference at every op boundary and the BF16-mode error bars.

Exit status: 0 written; 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
import time

from socketlab.errors import SocketlabError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "layer-dump",
        help="generate a decoder layer dump (weights, KV, FP32 reference, BF16 bars)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("shape", metavar="SHAPE_FILE", help="shape file or name (experiments/shapes/)")
    p.add_argument(
        "--context", type=int, required=True, metavar="C", help="tokens before the decode token"
    )
    p.add_argument(
        "--batch", type=int, default=1, metavar="B", help="distinct batch rows (default 1)"
    )
    p.add_argument("--seed", type=int, default=0, metavar="S", help="seed (default 0)")
    p.add_argument(
        "--out", required=True, metavar="DIR", help="dump directory (row i in DIR/row<i>)"
    )
    p.add_argument("--checkpoint", metavar="DIR", help="safetensors + config.json: real weights")
    p.add_argument("--layer", type=int, metavar="N", help="layer index in the checkpoint")
    p.add_argument(
        "--variant",
        default="default",
        metavar="V",
        help="default, or near-tie: attention whose error is its bf16 probabilities "
        "(q_norm x 0.03, a bf16-exact KV history, the residual at RMS 1; docs/layer.md)",
    )
    p.add_argument(
        "--tp",
        type=int,
        default=1,
        metavar="S",
        help="write rank --rank of an S-way tensor-parallel slice (default 1: the layer)",
    )
    p.add_argument("--rank", type=int, default=0, metavar="R", help="the slice's rank (0..S-1)")
    p.add_argument("--quiet", action="store_true", help="no summary table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from socketlab.layer.generate import build_layer, write_layer
    from socketlab.layer.shapes import load_shape

    if (args.checkpoint is None) != (args.layer is None):
        raise SocketlabError("--checkpoint and --layer: expected both or neither")
    t0 = time.monotonic()
    shape = load_shape(args.shape)
    weights = None
    if args.checkpoint:
        from socketlab.layer.checkpoint import load_checkpoint_layer

        shape, weights = load_checkpoint_layer(args.checkpoint, args.layer, shape)
    layer = build_layer(
        shape,
        args.context,
        args.batch,
        args.seed,
        weights,
        args.checkpoint,
        args.variant,
        args.tp,
        args.rank,
    )
    shape = layer.shape  # a TP slice's
    dirs = write_layer(layer, args.out)
    if not args.quiet:
        bar = layer.bar(0)
        print(
            f"{args.out}: {shape.name} ({shape.layer_type}), context {args.context}, "
            f"cache rows {shape.cache_len(args.context)}, batch {layer.batch}, seed {args.seed}, "
            f"{shape.matrix_bytes() / 2**20:.1f} MiB bf16 matrices, "
            f"{time.monotonic() - t0:.1f} s"
        )
        print("boundary  bf16 rel_rms  bf16 cos")
        for b, e in bar.items():
            print(f"{b:<8}  {e['rel_rms']:12.3e}  {e['cos']:.8f}")
        if len(dirs) > 1:
            print(f"rows 1..{len(dirs) - 1}: {args.out}/row<i>/")
    sys.stdout.flush()
    return 0
