"""`orchestrate export CAMPAIGN --format csv|parquet|jsonl`: metric rows for other tools."""

from __future__ import annotations

import argparse
import sys

from socketlab import paths
from socketlab.errors import StoreError

FORMATS = ("csv", "parquet", "jsonl")


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "export", help="write a campaign's metric rows as CSV, Parquet or JSON lines",
        description="One row per metric: run key, experiment, host, repetition, status, "
        "metric, value, unit, parser, one column per parameter and per metric dimension.",
    )  # fmt: skip
    parser.add_argument("campaign", help="campaign id")
    parser.add_argument("--format", choices=FORMATS, default="csv")
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="output file ('-' for stdout; default results/<campaign>/"
                        "metrics.<format>)")  # fmt: skip
    parser.add_argument("--ok-only", action="store_true", help="only runs stored ok")
    parser.add_argument("--results", metavar="DIR", help=f"results folder (default {paths.RESULTS})")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from socketlab.store import Store, existing_store_path

    path = existing_store_path(args.campaign, args.results)
    with Store(path, create=False) as store:
        frame = store.metrics_frame(args.campaign, all_statuses=not args.ok_only)
    out = args.output or str(path.parent / f"metrics.{args.format}")
    if out == "-" and args.format == "parquet":
        raise StoreError("--format parquet: give a file with -o (parquet is binary)")
    target = sys.stdout if out == "-" else out
    if args.format == "csv":
        frame.to_csv(target, index=False)
    elif args.format == "jsonl":
        frame.to_json(target, orient="records", lines=True)
        if out == "-":
            print()
    else:
        # Parameter columns may mix types across experiments; parquet needs one type a column.
        for column in frame.columns:
            if frame[column].dtype == object:
                frame[column] = frame[column].map(lambda v: None if v is None else str(v))
        frame.to_parquet(out, index=False)
    if out != "-":
        print(f"{len(frame)} metric rows -> {out}", file=sys.stderr)
    return 0
