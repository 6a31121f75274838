"""`orchestrate layer-check`: re-read a layer dump, validate it, print its BF16 bars.

Checks row 0 (DUMP) and every DUMP/row<i>/: each manifest line's file present with the size
its dtype and shape give, every tensor the meta.json shape needs listed with the right shape,
and the bars present. Then (unless --no-recompute) runs the BF16-mode reference on the dump's
own tensors, as a correct BF16 stage would, and gates it per row and boundary: rel RMS <= 1.5
x the BF16 bar (floor 1e-6), output cosine >= 0.99999.

Exit status: 0 valid and gated; 1 the gate failed (the line names row and boundary); 2 bad dump.
"""

from __future__ import annotations

import argparse
import json
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "layer-check",
        help="validate a decoder layer dump and print its per-boundary BF16 bars",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("dump", metavar="DUMP", help="dump directory written by layer-dump")
    p.add_argument("--no-recompute", action="store_true", help="only validate and print the bars")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from socketlab.layer.check import first_failure, open_dump, recompute

    dumps = open_dump(args.dump)
    results = None if args.no_recompute else recompute(dumps)
    m = dumps[0].meta
    if args.json:
        out = {
            "dump": args.dump,
            "rows": len(dumps),
            "bars": [d.meta["bf16_ref_err"] for d in dumps],
            "gate": None if results is None else [[g.__dict__ for g in lines] for lines in results],
        }
        json.dump(out, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(
            f"{args.dump}: {m.get('shape', '?')} {m['layer_type']}, ctx {m['ctx']}, cache rows "
            f"{m['cache_len']}, {len(dumps)} row(s), generator {m.get('generator', 'ref_layer.py')}"
        )
        head = "boundary  bar rel_rms(row 0)  bar cos(row 0)  max bar rel_rms(rows)"
        if results is not None:
            head += "  recomputed/bar(max over rows)  gate"
        print(head)
        for b in m["bf16_ref_err"]:
            bar0 = m["bf16_ref_err"][b]
            worst = max(d.meta["bf16_ref_err"][b]["rel_rms"] for d in dumps)
            line = f"{b:<8}  {bar0['rel_rms']:17.3e}  {bar0['cos']:.9f}  {worst:21.3e}"
            if results is not None:
                gl = [g for lines in results for g in lines if g.boundary == b]
                ratio = max(g.ratio for g in gl)
                line += f"  {ratio:29.3f}  {'ok' if all(g.ok for g in gl) else 'FAIL'}"
            print(line)
    if results is not None and (bad := first_failure(results)):
        row, g = bad
        print(
            f"layer-check: gate FAILED at row {row} boundary {g.boundary}: rel_rms "
            f"{g.rel_rms:.3e} > limit {g.limit:.3e} (1.5 x bar {g.bar:.3e})"
            + (f" or cos {g.cos:.8f} < 0.99999" if g.boundary == "out" else ""),
            file=sys.stderr,
        )
        return 1
    return 0
