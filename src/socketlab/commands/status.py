"""`orchestrate status [CAMPAIGN]`: what the store holds, per experiment and host."""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from socketlab import paths
from socketlab.commands._options import add_results_argument


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "status", help="runs stored per campaign, experiment, host and status",
        description="Without CAMPAIGN: every campaign under the results folder with its run "
        "counts. With CAMPAIGN: counts per experiment and host, every run that is not ok "
        "with its reason, and hosts that could not be reached.",
    )  # fmt: skip
    parser.add_argument("campaign", nargs="?", help="campaign id (the spec's `campaign`)")
    add_results_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from socketlab.store import Store, existing_store_path

    root = Path(args.results or paths.RESULTS)
    if not args.campaign:
        stores = sorted(root.glob("*/store.sqlite"))
        if not stores:
            print(f"no campaigns under {root}")
            return 0
        for path in stores:
            with Store(path, create=False) as store:
                counts = Counter(r.status for r in store.runs())
                lost = len(store.host_failures())
            line = ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "no runs"
            print(f"{path.parent.name}: {line}" + (f"; {lost} host(s) not reached" if lost else ""))
        return 0
    path = existing_store_path(args.campaign, root)
    with Store(path, create=False) as store:
        runs = store.runs(args.campaign)
        lost = store.host_failures(args.campaign)
    table: dict[tuple[str, str], Counter] = {}
    for r in runs:
        table.setdefault((r.experiment, r.host), Counter())[r.status] += 1
    print(f"campaign {args.campaign}: {len(runs)} runs in {path}")
    for (experiment, host), counts in sorted(table.items()):
        print(f"  {experiment} on {host}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    bad = [r for r in runs if r.status != "ok"]
    if bad:
        print("not ok:")
        for r in bad:
            params = ",".join(f"{k}={v}" for k, v in r.params.items())
            print(f"  {r.run_key[:12]} {r.experiment}[{params}]#rep{r.repetition} on {r.host}: "
                  f"{r.status}: {r.reason}")  # fmt: skip
    if lost:
        print("hosts not reached (no points of theirs ran; the next `orchestrate run` retries):")
        for f in lost:
            print(f"  {f.host}: {f.stage}: {f.reason} ({f.attempts} session(s) in a row)")
    return 0
