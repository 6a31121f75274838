"""`orchestrate report CAMPAIGN`: plain per-experiment tables of medians, min–max and n."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from socketlab.commands._options import add_results_argument


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "report",
        help="per-experiment tables of medians (min–max, n) of a campaign",
        description="Print, and write to results/<campaign>/report.md, one table per "
        "experiment: for each host, parameter set and metric the median, min, max and number "
        "of runs stored ok.",
    )
    parser.add_argument("campaign", help="campaign id")
    add_results_argument(parser)
    parser.add_argument(
        "--format",
        choices=("md", "html"),
        default="md",
        help="with a published-values file for the campaign (experiments/published/): print the "
        "comparison as markdown, or write a standalone HTML with plots (both files are written)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the verdicts (one JSON line per published cell and host) "
        "instead of the report; nothing is written",
    )
    parser.add_argument(
        "--fail-on",
        metavar="KIND",
        type=_fail_on,
        default=[],
        help="exit 1 when a cell's verdict is one of deviates, inconclusive, "
        "not-run (comma-separated), naming the cells on stderr",
    )
    parser.set_defaults(func=run)


def _fail_on(text: str) -> list[str]:
    from socketlab.results.verdicts import FAIL_ON

    words = [w.strip() for w in text.split(",") if w.strip()]
    if not words or any(w not in FAIL_ON for w in words):
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected one or more of {', '.join(FAIL_ON)}, comma-separated"
        )
    return words


def _gate(args: argparse.Namespace, comparison) -> int:
    """--json prints the verdicts frame as JSON lines; --fail-on names the cells it catches on
    stderr: exit 1 when there is one, else 0 (socketlab.results.verdicts)."""
    from socketlab.results.verdicts import cell_line, failing, verdict_frame

    if not (getattr(args, "json", False) or getattr(args, "fail_on", None)):
        return 0
    frame = verdict_frame(comparison, args.campaign)
    if args.json:
        text = frame.to_json(orient="records", lines=True)
        print(text, end="" if text.endswith("\n") or not text else "\n")
    if comparison is None and args.fail_on:
        print(
            f"orchestrate: report: no published values name campaign {args.campaign}: "
            "no cells to fail on",
            file=sys.stderr,
        )
    hits = failing(frame, args.fail_on) if args.fail_on else frame.iloc[0:0]
    for _, row in hits.iterrows():
        print(f"orchestrate: report: {cell_line(row)}", file=sys.stderr)
    if len(hits):
        print(
            f"orchestrate: report: {len(hits)} cell(s) fail --fail-on {','.join(args.fail_on)}",
            file=sys.stderr,
        )
    return 1 if len(hits) else 0


def run(args: argparse.Namespace) -> int:
    from socketlab.report.tables import render_tables
    from socketlab.store import Store, existing_store_path

    path = existing_store_path(args.campaign, args.results)
    with Store(path, create=False) as store:
        frame = store.metrics_frame(args.campaign)
        runs = store.runs(args.campaign)
        counts = Counter(r.status for r in runs)
        lost = store.host_failures(args.campaign)
    text = render_tables(args.campaign, frame, dict(counts)) + _not_reached(lost)
    # published vs measured, when experiments/published/ has values for this campaign
    from socketlab.report.gather import build_report, write_report

    # the plain tables go to measured.md beside the comparison (a layer campaign's run a
    # thousand metric rows: they would bury the verdicts)
    comparison = build_report(args.campaign, results=path.parent.parent, measured_markdown=text)
    if getattr(args, "json", False):
        return _gate(args, comparison)
    if comparison is not None:
        try:
            written = write_report(comparison, path.parent)
        except OSError as exc:  # a store on a read-only medium: the report still prints
            from socketlab.report.render import render

            print(render(comparison, "md"), end="")
            _not_written(path.parent / "report.md", exc)
            return _gate(args, comparison)
        if getattr(args, "format", "md") == "md":
            print(written["md"].read_text(), end="")
        print(
            f"\nreport written to {written[getattr(args, 'format', 'md')]}"
            f" (also {written['html' if getattr(args, 'format', 'md') == 'md' else 'md']})"
        )
        return _gate(args, comparison)
    text += _isolation(path.parent, runs)  # the comparison has it in its provenance
    out = path.parent / "report.md"
    print(text, end="")
    try:
        out.write_text(text)
    except OSError as exc:
        _not_written(out, exc)
        return _gate(args, None)
    print(f"\nreport written to {out}")
    return _gate(args, None)


def _not_written(out: Path, exc: OSError) -> None:
    print(
        f"\norchestrate: report not written to {out}: {exc.strerror or exc} (printed above)",
        file=sys.stderr,
    )


def _not_reached(lost: list) -> str:
    """A section naming the hosts whose points never ran because the host was not reached."""
    if not lost:
        return ""
    lines = [
        "",
        "## Hosts not reached",
        "",
        "No point of these hosts ran, so the tables above leave them out.",
        "",
        "| host | stage | reason | sessions |",
        "|---|---|---|---|",
    ]
    for f in lost:
        reason = f.reason.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {f.host} | {f.stage} | {reason} | {f.attempts} |")
    return "\n".join(lines) + "\n"


def _isolation(campaign_dir: Path, runs: list) -> str:
    """Each host's isolation as its runs found it: applied or not, the plan, verify.yml's
    result ("verified ...", "not verified"), from the host records the runs stored."""
    from socketlab.report.gather import host_facts
    from socketlab.report.isolation import isolation_text

    hosts = {name: entry for name, entry in host_facts(campaign_dir, runs).items() if entry}
    if not hosts:
        return ""
    lines = ["", "## Isolation", ""]
    lines += [f"- {name}: {isolation_text(entry)}" for name, entry in sorted(hosts.items())]
    return "\n".join(lines) + "\n"
