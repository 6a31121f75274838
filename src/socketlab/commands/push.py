"""`orchestrate push CAMPAIGN s3://bucket/prefix`: the store as Parquet parts plus run bundles."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from socketlab.cloud import s3store
from socketlab.commands.cloud import add_target_arguments, target_from


def register(subparsers) -> None:
    p = subparsers.add_parser("push", help="upload a campaign's results to S3 (or compatible)")
    p.add_argument("campaign")
    p.add_argument("url", metavar="s3://BUCKET/PREFIX")
    p.add_argument(
        "--results",
        type=Path,
        default=None,
        help="results folder (default: results/ or SOCKETLAB_RESULTS)",
    )
    add_target_arguments(p)
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=_push)


def _push(args) -> int:
    def log(msg: str) -> None:
        print(msg, file=sys.stderr)

    out = s3store.push(
        target_from(args, "orchestrate push"),
        args.campaign,
        args.url,
        results=args.results,
        log=log,
    )
    if args.json:
        print(json.dumps(out, sort_keys=True))
    else:
        print(
            f"{out['url']}: {out['runs']} runs, {out['metrics']} metrics "
            f"(sha256 {out['metrics_sha256'][:16]}...), {out['uploaded_parts']} parts and "
            f"{out['uploaded_bundles']} bundles uploaded"
        )
    return 0
