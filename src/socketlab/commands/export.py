"""`orchestrate export CAMPAIGN --format csv|parquet|jsonl`: the results frames for other tools.

The frames and their column types are socketlab.results' (docs/results.md): Parquet keeps them
(timestamps, floats, nullable integers, categories) and reads back equal with pandas.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

from socketlab.commands._options import add_results_argument
from socketlab.errors import StoreError

FORMATS = ("csv", "parquet", "jsonl")
#: what --table writes: "metrics" is every metric value with its run's columns
TABLES = ("metrics", "runs", "requests", "verdicts")


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "export",
        help="write a campaign's results as CSV, Parquet or JSON lines",
        description="By default one row per metric value with its run's columns (experiment, "
        "host, repetition, status, started, duration, CPUs, build, parameters) and one column "
        "per metric dimension; --table runs|requests|verdicts writes that frame instead. "
        "Columns and types: docs/results.md.",
    )
    parser.add_argument("campaign", help="campaign id")
    parser.add_argument("--format", choices=FORMATS, default="csv")
    parser.add_argument(
        "--table",
        choices=TABLES,
        default="metrics",
        help="which frame (default metrics, joined with runs)",
    )
    parser.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="output file ('-' for stdout; default results/<campaign>/<table>.<format>)",
    )
    parser.add_argument("--ok-only", action="store_true", help="only runs stored ok")
    add_results_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from socketlab import results
    from socketlab.store import existing_store_path

    path = existing_store_path(args.campaign, args.results)
    out = args.output or str(path.parent / f"{args.table}.{args.format}")
    if out == "-" and args.format == "parquet":
        raise StoreError("--format parquet: give a file with -o (parquet is binary)")
    if out != "-":
        _check_output(Path(out), given=args.output is not None)
    res = results.load(args.campaign, results=path.parent.parent)
    frame = _frame(res, args.table, args.ok_only)
    target = sys.stdout if out == "-" else out
    try:
        _write(frame, args.format, out, target)
    except OSError as exc:  # full disk, read-only folder: nothing half-written is kept
        if out != "-":  # a read-only folder has nothing of ours to remove
            with contextlib.suppress(OSError):
                Path(out).unlink(missing_ok=True)
        raise StoreError(f"-o {out}: cannot write: {exc.strerror or exc}") from None
    if out != "-":
        print(f"{len(frame)} {args.table} rows -> {out}", file=sys.stderr)
    return 0


def _frame(res, table: str, ok_only: bool):
    from socketlab.store.status import RunStatus

    if table == "metrics":
        return res.metrics_with_runs(ok_only=ok_only)
    if table == "runs":
        return res.runs[res.runs["status"] == RunStatus.OK] if ok_only else res.runs
    if table == "requests":
        if not ok_only:
            return res.requests
        ok = set(res.runs.loc[res.runs["status"] == RunStatus.OK, "run_key"])
        return res.requests[res.requests["run_key"].isin(ok)]
    return res.verdicts


def _check_output(out: Path, given: bool) -> None:
    """-o names a file in an existing folder we may write: one line otherwise, before anything
    is written. The default file sits beside the store, which may be on a read-only medium."""
    if out.is_dir():
        raise StoreError(f"-o {out}: is a folder; expected a file name (e.g. {out}/metrics.csv)")
    if not out.parent.is_dir():
        raise StoreError(f"-o {out}: folder {out.parent} does not exist; create it first")
    if not os.access(out.parent, os.W_OK):  # EROFS even for root on a read-only mount
        how = "" if given else " (the default, beside the store)"
        raise StoreError(
            f"{out}{how}: folder {out.parent} is not writable; give a file "
            "elsewhere with -o FILE, or -o - for stdout"
        )


def _write(frame, fmt: str, out: str, target) -> None:
    if fmt == "csv":
        frame.to_csv(target, index=False, date_format="%Y-%m-%dT%H:%M:%S.%fZ")
    elif fmt == "jsonl":
        frame.to_json(target, orient="records", lines=True, date_format="iso")
        if out == "-":
            print()
    else:
        frame.to_parquet(out, index=False)
