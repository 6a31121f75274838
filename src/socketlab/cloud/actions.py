"""Entry points of the Ansible action plugins (playbooks/action_plugins, see ansible_action.py).

They take the playbook's argument dict, so the plugins stay one-line shims.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from socketlab import paths
from socketlab.cloud import ec2, inventory
from socketlab.cloud.plan import check_campaign, settings_from_args
from socketlab.cloud.preflight import check_inventory_path
from socketlab.cloud.target import resolve_target
from socketlab.errors import CloudError

KEY_DIR = paths.CACHE / "keys"


def _target(args: dict[str, Any], source: str):
    return resolve_target(
        args.get("aws_region"), args.get("aws_profile"), args.get("aws_endpoint_url"), source=source
    )


def _inventory_file(args: dict[str, Any], campaign: str) -> Path:
    given = args.get("inventory_file")
    return Path(given).expanduser().resolve() if given else inventory.default_path(campaign)


def plain(args: dict[str, Any]) -> dict[str, Any]:
    """Plain Python values (Ansible passes its own tagged str/int subclasses)."""
    return json.loads(json.dumps(args))


def provision(args: dict[str, Any], log: Callable[[str], None]) -> dict[str, Any]:
    args = plain(args)
    platform = inventory.platform_from_args(args)  # takes the tier settings out of args
    settings = settings_from_args(args, "provision")
    target = _target(args, "provision")
    if platform:
        platform = platform.with_s3_default(lambda: target.service_url("s3"))
    inv = _inventory_file(args, settings.campaign)
    check_inventory_path(inv)  # before launching: a bad path must not cost an instance
    existing = inventory.read(inv)  # other campaigns of a shared inventory (hosts and guests)
    inventory.check_before_launch(existing, settings.campaign, target.describe(), inv, platform)
    result = ec2.provision(target, settings, key_dir=KEY_DIR, log=log)
    try:
        text = inventory.render(
            settings.campaign,
            result["hosts"],
            target.describe(),
            inventory.known_hosts_path(inv, settings.campaign),
            platform=platform,
            existing=existing,
        )
        result["inventory_changed"] = inventory.write(inv, text)
    except Exception as exc:
        # Instances nobody can find through an inventory are money burning: end what we made.
        if result["launched"]:
            ec2.terminate(target.client("ec2"), result["launched"], timeout=300.0)
        raise CloudError(
            f"provision: writing inventory {inv} failed: {exc}; terminated "
            f"{len(result['launched'])} instance(s) launched by this run"
        ) from None
    result["inventory"] = str(inv)
    result["changed"] = result["changed"] or result["inventory_changed"]
    return result


def teardown(args: dict[str, Any], log: Callable[[str], None]) -> dict[str, Any]:
    args = plain(args)
    campaign = check_campaign(args.get("campaign"), "teardown")
    known = {
        "campaign",
        "aws_region",
        "aws_profile",
        "aws_endpoint_url",
        "inventory_file",
        "timeout_s",
        "poll_s",
    }
    unknown = sorted(set(args) - known)
    if unknown:
        raise CloudError(f"teardown: unknown setting(s) {', '.join(unknown)}")
    target = _target(args, "teardown")
    inv = _inventory_file(args, campaign)
    inventory.check_same_cloud(
        inventory.read(inv, foreign="none"), campaign, target.describe(), inv, "teardown"
    )
    result = ec2.teardown(
        target,
        campaign,
        key_dir=KEY_DIR,
        log=log,
        timeout=float(args.get("timeout_s") or 900),
        poll=float(args.get("poll_s") or 5),
    )
    result["inventory_removed"] = inventory.remove(inv, campaign)
    result["inventory"] = str(inv)
    result["changed"] = result["changed"] or result["inventory_removed"]
    return result
