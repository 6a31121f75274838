"""`orchestrate status [CAMPAIGN]`: what the store holds, per experiment and host."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from socketlab.commands._options import add_results_argument


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "status",
        help="runs stored per campaign, experiment, host and status",
        description="Without CAMPAIGN: every campaign under the results folder with its run "
        "counts. With CAMPAIGN: counts per experiment and host, every run that is not ok "
        "with its reason, and hosts that could not be reached.",
    )
    parser.add_argument("campaign", nargs="?", help="campaign id (the spec's `campaign`)")
    add_results_argument(parser)
    parser.add_argument(
        "--json",
        action="store_true",
        help="one JSON line per campaign: counts by status, experiment and host, "
        "the runs not ok, the hosts not reached",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from socketlab.store import Store, existing_results_folder, existing_store_path
    from socketlab.store.status import RunStatus

    root = existing_results_folder(args.results)
    if not args.campaign:
        stores = sorted(root.glob("*/store.sqlite"))
        if not stores and not args.json:
            print(f"no campaigns under {root}")
            return 0
        for path in stores:
            with Store(path, create=False) as store:
                runs = store.runs()
                lost = store.host_failures()
            if args.json:
                print(json.dumps(_summary(path.parent.name, path, runs, lost)))
                continue
            counts = Counter(r.status for r in runs)
            line = ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "no runs"
            print(
                f"{path.parent.name}: {line}"
                + (f"; {len(lost)} host(s) not reached" if lost else "")
            )
        return 0
    path = existing_store_path(args.campaign, root)
    with Store(path, create=False) as store:
        runs = store.runs(args.campaign)
        lost = store.host_failures(args.campaign)
    if args.json:
        print(json.dumps(_summary(args.campaign, path, runs, lost)))
        return 0
    table: dict[tuple[str, str], Counter] = {}
    for r in runs:
        table.setdefault((r.experiment, r.host), Counter())[r.status] += 1
    print(f"campaign {args.campaign}: {len(runs)} runs in {path}")
    for (experiment, host), counts in sorted(table.items()):
        print(
            f"  {experiment} on {host}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        )
    bad = [r for r in runs if r.status != RunStatus.OK]
    if bad:
        print("not ok:")
        for r in bad:
            params = ",".join(f"{k}={v}" for k, v in r.params.items())
            print(
                f"  {r.run_key[:12]} {r.experiment}[{params}]#rep{r.repetition} on {r.host}: "
                f"{r.status}: {r.reason}"
            )
    if lost:
        print("hosts not reached (no points of theirs ran; the next `orchestrate run` retries):")
        for f in lost:
            print(f"  {f.host}: {f.stage}: {f.reason} ({f.attempts} session(s) in a row)")
    return 0


def _summary(campaign: str, path: Path, runs: list, lost: list) -> dict:
    from socketlab.store.status import RunStatus

    """What `status --json` prints for one campaign (the same facts as the text)."""
    table: dict[tuple[str, str], Counter] = {}
    for r in runs:
        table.setdefault((r.experiment, r.host), Counter())[r.status] += 1
    return {
        "campaign": campaign,
        "store": str(path),
        "runs": len(runs),
        "statuses": dict(sorted(Counter(r.status for r in runs).items())),
        "experiments": [
            {"experiment": e, "host": h, "statuses": dict(sorted(c.items()))}
            for (e, h), c in sorted(table.items())
        ],
        "not_ok": [
            {
                "run_key": r.run_key,
                "experiment": r.experiment,
                "host": r.host,
                "params": r.params,
                "repetition": r.repetition,
                "status": r.status,
                "reason": r.reason,
            }
            for r in runs
            if r.status != RunStatus.OK
        ],
        "hosts_not_reached": [
            {"host": f.host, "stage": f.stage, "reason": f.reason, "attempts": f.attempts}
            for f in lost
        ],
    }
