"""`orchestrate export CAMPAIGN --format csv|parquet|jsonl`: metric rows for other tools."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

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
    if out != "-":
        _check_output(Path(out))
    target = sys.stdout if out == "-" else out
    try:
        _write(frame, args.format, out, target)
    except OSError as exc:  # full disk, read-only folder: nothing half-written is kept
        if out != "-":
            Path(out).unlink(missing_ok=True)
        raise StoreError(f"-o {out}: cannot write: {exc.strerror or exc}") from None
    if out != "-":
        print(f"{len(frame)} metric rows -> {out}", file=sys.stderr)
    return 0


def _check_output(out: Path) -> None:
    """-o names a file in an existing folder: one line otherwise, before anything is written."""
    if out.is_dir():
        raise StoreError(f"-o {out}: is a folder; expected a file name (e.g. {out}/metrics.csv)")
    if not out.parent.is_dir():
        raise StoreError(f"-o {out}: folder {out.parent} does not exist; create it first")


def _write(frame, fmt: str, out: str, target) -> None:
    if fmt == "csv":
        frame.to_csv(target, index=False)
    elif fmt == "jsonl":
        frame.to_json(target, orient="records", lines=True)
        if out == "-":
            print()
    else:
        # Parameter columns may mix types across experiments; parquet needs one type a column.
        for column in frame.columns:
            if frame[column].dtype == object:
                frame[column] = frame[column].map(lambda v: None if v is None else str(v))
        frame.to_parquet(out, index=False)
