"""`orchestrate push CAMPAIGN s3://bucket/prefix`: the store as Parquet parts plus run bundles."""

from __future__ import annotations

import json

from socketlab.cloud import s3store
from socketlab.commands.cloud import add_transfer_arguments, target_from, to_stderr


def register(subparsers) -> None:
    p = subparsers.add_parser("push", help="upload a campaign's results to S3 (or compatible)")
    p.add_argument("campaign")
    p.add_argument("url", metavar="s3://BUCKET/PREFIX")
    add_transfer_arguments(p, "print the summary as JSON")
    p.set_defaults(func=_push)


def _push(args) -> int:
    out = s3store.push(
        target_from(args, "orchestrate push"),
        args.campaign,
        args.url,
        results=args.results,
        log=to_stderr,
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
