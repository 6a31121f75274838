"""`orchestrate serving-report CAMPAIGN`, `orchestrate import-vllm FILE` and
`orchestrate import-guidellm FILE`."""

from __future__ import annotations

import argparse
from pathlib import Path

from socketlab.commands._options import add_results_argument
from socketlab.errors import SpecError


def register(sub: argparse._SubParsersAction) -> None:
    rep = sub.add_parser(
        "serving-report",
        help="serving comparison and placement A/B tables of a campaign",
        description="Print, and write to results/<campaign>/serving-report.md, per arm and "
        "load level the throughput, TTFT and TPOT percentiles and peak memory, their ratios "
        "against the baseline arm, and the placement A/B table.",
    )
    rep.add_argument("campaign", help="campaign id")
    add_results_argument(rep)
    rep.add_argument(
        "--format",
        choices=("md", "html"),
        default="md",
        help="markdown (printed), or standalone HTML with plots of TTFT/TPOT "
        "percentiles by load, throughput vs concurrency and the placement A/B "
        "(written to results/<campaign>/serving-report.html)",
    )
    rep.set_defaults(func=report)
    imp = _import_parser(
        sub,
        "vllm",
        help="store a vLLM bench-serve result JSON as a serving run",
        description="Import a `vllm bench serve --save-result --save-detailed` JSON: its "
        "per-request arrays become request records, metrics are recomputed with socketlab's "
        "definitions and stored beside vLLM's own numbers.",
        arm_help=" (default vllm)",
    )
    imp.add_argument("--load", help="load label like c8 or r2 (default: from the file)")
    imp.set_defaults(func=import_file)
    gdl = _import_parser(
        sub,
        "guidellm",
        help="store a guidellm benchmarks JSON as serving runs",
        description="Import a `guidellm run --output kind=json` file: one run per benchmark "
        "(load level); records rebuilt from its per-request timings, our metrics recomputed "
        "and guidellm's own numbers stored under honest names (its ITL is vLLM's TPOT, "
        "token-weighted; its TPOT includes TTFT).",
        arm_help="",
    )
    gdl.set_defaults(func=import_guidellm_file)


def _import_parser(
    sub: argparse._SubParsersAction, tool: str, *, help: str, description: str, arm_help: str
) -> argparse.ArgumentParser:
    """`import-<tool>`: the options both importers take (where the result goes, under what)."""
    parser = sub.add_parser(f"import-{tool}", help=help, description=description)
    parser.add_argument("file", type=Path)
    parser.add_argument("--campaign", required=True)
    parser.add_argument("--experiment", default=f"{tool}-import")
    parser.add_argument("--arm", default=tool, help=f"arm name for the report{arm_help}")
    parser.add_argument("--placement", default="unknown")
    parser.add_argument("--host", default="imported")
    parser.add_argument("--repetition", type=int, default=0)
    parser.add_argument("--baseline", help="the experiment's baseline arm for the report")
    add_results_argument(parser)
    return parser


def report(args: argparse.Namespace) -> int:
    from socketlab.serve.report import serving_report
    from socketlab.store import Store, existing_store_path

    path = existing_store_path(args.campaign, args.results)
    html = getattr(args, "format", "md") == "html"
    with Store(path, create=False) as store:
        text = serving_report(store, args.campaign)
        if html:
            from socketlab.serve.report_html import serving_html

            page = serving_html(store, args.campaign)
    out = path.parent / f"serving-report.{'html' if html else 'md'}"
    if not html:
        print(text, end="")
    try:
        out.write_text(page if html else text)
    except OSError as exc:  # a store on a read-only medium: one line, the markdown printed
        import sys

        if html:
            print(text, end="")
        print(
            f"orchestrate: serving report not written to {out}: {exc.strerror or exc}"
            " (printed above)",
            file=sys.stderr,
        )
        return 0
    print(f"\nreport written to {out}")
    return 0


def import_file(args: argparse.Namespace) -> int:
    from socketlab.serve.vllm_import import import_vllm, store_import
    from socketlab.store import Store, store_path

    _check_file(args.file, "a vLLM bench-serve JSON file")
    got = import_vllm(args.file, args.load)  # a bad file is refused before a store is made
    path = store_path(args.campaign, args.results)
    with Store(path) as store:
        record = store_import(
            store,
            args.file,
            campaign=args.campaign,
            experiment=args.experiment,
            arm=args.arm,
            placement=args.placement,
            host=args.host,
            repetition=args.repetition,
            load=args.load,
            baseline=args.baseline,
            got=got,
        )
    print(
        f"imported {args.file} (vLLM layout {got['layout']}) as run {record.run_key[:12]} "
        f"({record.status}{': ' + record.reason if record.reason else ''}) into {path}"
    )
    if got["agreement"]:
        worst = max(got["agreement"], key=got["agreement"].get)
        print(
            f"vLLM's own summary fields recomputed from the arrays: {len(got['agreement'])} "
            f"fields, largest relative difference {got['agreement'][worst]:.1e} ({worst})"
        )
    for line in got["limitations"]:
        print(f"limitation: {line}")
    return 0


def _check_file(path: Path, what: str) -> None:
    if not path.is_file():
        kind = "a folder" if path.is_dir() else "no such file"
        raise SpecError(f"{path}: {kind} (expected {what})")


def import_guidellm_file(args: argparse.Namespace) -> int:
    from socketlab.serve.guidellm_import import import_guidellm, store_import
    from socketlab.store import Store, store_path

    _check_file(args.file, "a guidellm benchmarks JSON file")
    got = import_guidellm(args.file)  # a bad file is refused before a store is made
    path = store_path(args.campaign, args.results)
    with Store(path) as store:
        records = store_import(
            store,
            args.file,
            got,
            campaign=args.campaign,
            experiment=args.experiment,
            arm=args.arm,
            placement=args.placement,
            host=args.host,
            repetition=args.repetition,
            baseline=args.baseline,
        )
    for rec, lv in zip(records, got["levels"], strict=True):
        print(
            f"imported {args.file} benchmark {lv['label']} (guidellm {got['version']}) as run "
            f"{rec.run_key[:12]} ({rec.status}{': ' + rec.reason if rec.reason else ''}) "
            f"into {path}"
        )
        if lv["kept"]:
            print(f"kept: {lv['label']}: {lv['kept']}")
    for line in dict.fromkeys(x for lv in got["levels"] for x in lv["limitations"]):
        print(f"limitation: {line}")
    return 0
