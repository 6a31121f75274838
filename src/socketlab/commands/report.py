"""`orchestrate report CAMPAIGN`: plain per-experiment tables of medians, min–max and n."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from socketlab.commands._options import add_results_argument


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "report", help="per-experiment tables of medians (min–max, n) of a campaign",
        description="Print, and write to results/<campaign>/report.md, one table per "
        "experiment: for each host, parameter set and metric the median, min, max and number "
        "of runs stored ok.",
    )  # fmt: skip
    parser.add_argument("campaign", help="campaign id")
    add_results_argument(parser)
    parser.add_argument(
        "--format", choices=("md", "html"), default="md",
        help="with a published-values file for the campaign (experiments/published/): print the "
        "comparison as markdown, or write a standalone HTML with plots (both files are written)",
    )  # fmt: skip
    parser.set_defaults(func=run)


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
    from socketlab.report.build import build_report, write_report

    # the plain tables go to measured.md beside the comparison (a layer campaign's run a
    # thousand metric rows: they would bury the verdicts)
    comparison = build_report(args.campaign, results=path.parent.parent, measured_markdown=text)
    if comparison is not None:
        try:
            written = write_report(comparison, path.parent)
        except OSError as exc:  # a store on a read-only medium: the report still prints
            from socketlab.report.render import render

            print(render(comparison, "md"), end="")
            _not_written(path.parent / "report.md", exc)
            return 0
        if getattr(args, "format", "md") == "md":
            print(written["md"].read_text(), end="")
        print(f"\nreport written to {written[getattr(args, 'format', 'md')]}"
              f" (also {written['html' if getattr(args, 'format', 'md') == 'md' else 'md']})")
        return 0
    text += _isolation(path.parent, runs)  # the comparison has it in its provenance
    out = path.parent / "report.md"
    print(text, end="")
    try:
        out.write_text(text)
    except OSError as exc:
        _not_written(out, exc)
        return 0
    print(f"\nreport written to {out}")
    return 0


def _not_written(out: Path, exc: OSError) -> None:
    print(f"\norchestrate: report not written to {out}: {exc.strerror or exc} (printed above)",
          file=sys.stderr)


def _not_reached(lost: list) -> str:
    """A section naming the hosts whose points never ran because the host was not reached."""
    if not lost:
        return ""
    lines = ["", "## Hosts not reached", "",
             "No point of these hosts ran, so the tables above leave them out.", "",
             "| host | stage | reason | sessions |", "|---|---|---|---|"]  # fmt: skip
    for f in lost:
        reason = f.reason.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {f.host} | {f.stage} | {reason} | {f.attempts} |")
    return "\n".join(lines) + "\n"


def _isolation(campaign_dir: Path, runs: list) -> str:
    """Each host's isolation as its runs found it: applied or not, the plan, verify.yml's
    result ("verified ...", "not verified"), from the host records the runs stored."""
    from socketlab.report.build import host_facts
    from socketlab.report.isolation import isolation_text

    hosts = {name: entry for name, entry in host_facts(campaign_dir, runs).items() if entry}
    if not hosts:
        return ""
    lines = ["", "## Isolation", ""]
    lines += [f"- {name}: {isolation_text(entry)}" for name, entry in sorted(hosts.items())]
    return "\n".join(lines) + "\n"
