"""`orchestrate cloud list|reap`: what socketlab has running in a cloud, and ending what expired."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from socketlab.cloud import ec2
from socketlab.cloud.plan import InstanceRow
from socketlab.cloud.target import resolve_target
from socketlab.errors import CloudError


def register(subparsers) -> None:
    p = subparsers.add_parser("cloud", help="list or reap socketlab-tagged cloud instances")
    sub = p.add_subparsers(dest="cloud_command", metavar="ACTION")
    sub.required = True
    ls = sub.add_parser("list", help="running tagged instances with age and estimated cost")
    _common(ls)
    ls.add_argument(
        "--price-per-hour",
        type=float,
        default=None,
        metavar="PRICE",
        help="your price per instance-hour (or SOCKETLAB_PRICE_PER_HOUR); without "
        "it no cost is shown: socketlab never guesses prices",
    )
    ls.set_defaults(func=_list)
    rp = sub.add_parser("reap", help="terminate tagged instances past socketlab:expires-at")
    _common(rp)
    rp.add_argument("--dry-run", action="store_true", help="only show what would be terminated")
    rp.set_defaults(func=_reap)


def _common(p) -> None:
    p.add_argument("--campaign", help="only this campaign's instances")
    add_target_arguments(p)
    p.add_argument("--json", action="store_true", help="JSON lines instead of a table")


def add_target_arguments(p) -> None:
    """--region/--profile/--endpoint-url, shared with push and pull."""
    p.add_argument("--region", help="default: AWS_REGION / AWS_DEFAULT_REGION / the profile's")
    p.add_argument("--profile", help="AWS profile (default: AWS_PROFILE)")
    p.add_argument("--endpoint-url", help="AWS-compatible endpoint (default: AWS_ENDPOINT_URL)")


def add_transfer_arguments(p, json_help: str) -> None:
    """The S3 URL (after any positional the caller added), --results, the target arguments and
    --json, shared by push and pull."""
    p.add_argument("url", metavar="s3://BUCKET/PREFIX")
    p.add_argument(
        "--results",
        type=Path,
        default=None,
        help="results folder (default: results/ or SOCKETLAB_RESULTS)",
    )
    add_target_arguments(p)
    p.add_argument("--json", action="store_true", help=json_help)


def target_from(args, source: str = "orchestrate cloud"):
    return resolve_target(args.region, args.profile, args.endpoint_url, source=source)


def to_stderr(msg: str) -> None:
    """Progress lines go to stderr, so stdout stays the command's result."""
    print(msg, file=sys.stderr)


def print_result(args, out: dict, template: str) -> None:
    """A push or pull result on stdout: one sorted JSON line with --json, else ``template``
    filled from it (``str.format`` fields name its keys)."""
    print(json.dumps(out, sort_keys=True) if args.json else template.format(**out))


def _price(args) -> float | None:
    if args.price_per_hour is not None:
        price = args.price_per_hour
    elif os.environ.get("SOCKETLAB_PRICE_PER_HOUR"):
        try:
            price = float(os.environ["SOCKETLAB_PRICE_PER_HOUR"])
        except ValueError:
            raise CloudError("SOCKETLAB_PRICE_PER_HOUR: expected a number") from None
    else:
        return None
    if price < 0:
        raise CloudError("--price-per-hour: expected a non-negative number")
    return price


def _print(rows: list[InstanceRow], as_json: bool, verb: str) -> None:
    if as_json:
        for r in rows:
            print(json.dumps(r.facts(), sort_keys=True))
        return
    if not rows:
        print(f"no tagged instances {verb}")
        return
    head = ("INSTANCE", "CAMPAIGN", "OWNER", "TYPE", "STATE", "AGE_H", "EXPIRES_AT", "EST_COST")
    lines = [head] + [
        (
            r.instance_id,
            r.campaign,
            r.owner,
            r.instance_type,
            r.state,
            f"{r.age_hours:.2f}",
            r.expires_at + (" (expired)" if r.expired else ""),
            "n/a" if r.estimated_cost is None else f"{r.estimated_cost:.2f}",
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    for line in lines:
        print("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())


def _list(args) -> int:
    price = _price(args)
    rows = ec2.list_instances(target_from(args), campaign=args.campaign, price_per_hour=price)
    _print(rows, args.json, "running")
    if not args.json and rows:
        if price is None:
            print("cost: pass --price-per-hour (your on-demand price) to see an estimate")
        else:
            total = sum(r.estimated_cost or 0.0 for r in rows)
            print(f"estimated cost so far: {total:.2f} at {price:g} per instance-hour")
    return 0


def _reap(args) -> int:
    from socketlab.cloud import inventory
    from socketlab.cloud.actions import KEY_DIR

    target = target_from(args)
    rows = ec2.reap(target, campaign=args.campaign, dry_run=args.dry_run, log=to_stderr)
    _print(rows, args.json, "past expires-at")
    if rows and not args.json:
        print(("would terminate" if args.dry_run else "terminated") + f" {len(rows)} instance(s)")
    # What provision made for a campaign goes once no instance of it is left (teardown.yml
    # does the same); a campaign with live instances keeps it, and is named with how to end it.
    left = ec2.reap_leftovers(
        target, campaign=args.campaign, dry_run=args.dry_run, key_dir=KEY_DIR, log=to_stderr
    )
    for name, deleted in left.items():
        inv = inventory.default_path(name)
        removed = False if args.dry_run else inventory.remove(inv)
        if args.json:
            print(
                json.dumps(
                    {
                        "campaign": name,
                        "deleted": deleted,
                        "dry_run": args.dry_run,
                        "inventory_removed": removed,
                    }
                )
            )
        else:
            verb = "would delete" if args.dry_run else "deleted"
            print(
                f"{name}: {verb} {', '.join(deleted) or 'nothing'}"
                + (f"; removed {inv}" if removed else "")
            )
    live = sorted({r.campaign for r in ec2.list_instances(target, campaign=args.campaign)})
    if live and not args.json:
        print(
            f"still running (not expired): {', '.join(live)}; end them with "
            "ansible-playbook playbooks/teardown.yml -e socketlab_ec2_campaign=NAME "
            "-e socketlab_ec2_aws_region=..."
        )
    return 0
