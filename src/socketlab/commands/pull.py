"""`orchestrate pull s3://bucket/prefix`: merge pushed results into the local stores by run key."""

from __future__ import annotations

from socketlab.cloud import s3store
from socketlab.commands.cloud import add_transfer_arguments, print_result, target_from, to_stderr


def register(subparsers) -> None:
    p = subparsers.add_parser("pull", help="merge results pushed to S3 into the local store")
    p.add_argument("--campaign", help="only this campaign (default: every one under the prefix)")
    add_transfer_arguments(p, "one JSON line per campaign")
    p.set_defaults(func=_pull)


def _pull(args) -> int:
    outs = s3store.pull(
        target_from(args, "orchestrate pull"),
        args.url,
        campaign=args.campaign,
        results=args.results,
        log=to_stderr,
    )
    for out in outs:
        print_result(
            args,
            out,
            "{campaign}: {added_runs} runs added ({added_metrics} metrics, {bundles} bundles, "
            "{files} campaign files), "
            "{skipped_runs} already there; store {store}",
        )
    return 0
