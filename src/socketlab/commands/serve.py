"""`orchestrate serving-report CAMPAIGN` and `orchestrate import-vllm FILE`."""

from __future__ import annotations

import argparse
from pathlib import Path

from socketlab import paths
from socketlab.errors import SpecError, StoreError


def register(sub: argparse._SubParsersAction) -> None:
    rep = sub.add_parser(
        "serving-report", help="serving comparison and placement A/B tables of a campaign",
        description="Print, and write to results/<campaign>/serving-report.md, per arm and "
        "load level the throughput, TTFT and TPOT percentiles and peak memory, their ratios "
        "against the baseline arm, and the placement A/B table.")
    rep.add_argument("campaign", help="campaign id")
    rep.add_argument("--results", metavar="DIR", help=f"results folder (default {paths.RESULTS})")
    rep.set_defaults(func=report)

    imp = sub.add_parser(
        "import-vllm", help="store a vLLM bench-serve result JSON as a serving run",
        description="Import a `vllm bench serve --save-result --save-detailed` JSON: its "
        "per-request arrays become request records, metrics are recomputed with socketlab's "
        "definitions and stored beside vLLM's own numbers.")
    imp.add_argument("file", type=Path)
    imp.add_argument("--campaign", required=True)
    imp.add_argument("--experiment", default="vllm-import")
    imp.add_argument("--arm", default="vllm", help="arm name for the report (default vllm)")
    imp.add_argument("--placement", default="unknown")
    imp.add_argument("--host", default="imported")
    imp.add_argument("--repetition", type=int, default=0)
    imp.add_argument("--load", help="load label like c8 or r2 (default: from the file)")
    imp.add_argument("--baseline", help="the experiment's baseline arm for the report")
    imp.add_argument("--results", metavar="DIR", help=f"results folder (default {paths.RESULTS})")
    imp.set_defaults(func=import_file)


def report(args: argparse.Namespace) -> int:
    from socketlab.serve.report import serving_report
    from socketlab.store import Store, store_path

    path = store_path(args.campaign, Path(args.results or paths.RESULTS))
    if not path.exists():
        raise StoreError(f"{path}: no results for campaign '{args.campaign}'")
    with Store(path, create=False) as store:
        text = serving_report(store, args.campaign)
    out = path.parent / "serving-report.md"
    out.write_text(text)
    print(text, end="")
    print(f"\nreport written to {out}")
    return 0


def import_file(args: argparse.Namespace) -> int:
    from socketlab.serve.vllm_import import import_vllm, store_import
    from socketlab.store import Store, store_path

    if not args.file.is_file():
        what = "a folder" if args.file.is_dir() else "no such file"
        raise SpecError(f"{args.file}: {what} (expected a vLLM bench-serve JSON file)")
    got = import_vllm(args.file, args.load)  # a bad file is refused before a store is made
    path = store_path(args.campaign, Path(args.results or paths.RESULTS))
    with Store(path) as store:
        record = store_import(store, args.file, campaign=args.campaign,
                              experiment=args.experiment, arm=args.arm,
                              placement=args.placement, host=args.host,
                              repetition=args.repetition, load=args.load,
                              baseline=args.baseline, got=got)
    print(f"imported {args.file} as run {record.run_key[:12]} ({record.status}"
          f"{': ' + record.reason if record.reason else ''}) into {path}")
    return 0
