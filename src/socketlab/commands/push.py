"""`orchestrate push CAMPAIGN s3://bucket/prefix`: the store as Parquet parts plus run bundles."""

from __future__ import annotations

from socketlab.cloud import s3store
from socketlab.commands.cloud import add_transfer_arguments, print_result, target_from, to_stderr


def register(subparsers) -> None:
    p = subparsers.add_parser("push", help="upload a campaign's results to S3 (or compatible)")
    p.add_argument("campaign")
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
    print_result(
        args,
        out,
        "{url}: {runs} runs, {metrics} metrics (sha256 {metrics_sha256:.16}...), "
        "{uploaded_parts} parts and {uploaded_bundles} bundles uploaded",
    )
    return 0
