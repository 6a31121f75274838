"""The generated inventory: the hosts a provision made, as a plain Ansible YAML file.

Chosen over an inventory plugin because a file is what every other step already consumes
(`ansible-playbook -i`, `orchestrate ... --inventory`), it needs no cloud access to read, and it
is a record of what was provisioned. It lives in inventory/generated/<campaign>.yml (git-ignored)
and teardown removes it. It holds addresses and a key *path*, never key material or credentials.
Campaigns of different tiers (hosts on one cloud, guests on another, experiments/platform.yaml)
may share one file: each keeps its own group, and teardown removes only its own part.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from socketlab import paths
from socketlab.errors import CloudError
from socketlab.safepath import inside


def default_path(campaign: str) -> Path:
    return inside(paths.GENERATED_INVENTORY, f"{campaign}.yml", what="campaign")


def group_name(campaign: str) -> str:
    return "campaign_" + re.sub(r"[^A-Za-z0-9_]", "_", campaign)


def render(
    campaign: str,
    hosts: list[dict[str, Any]],
    target: dict[str, Any],
    known_hosts: Path,
    *,
    platform: Platform | None = None,
    existing: dict[str, Any] | None = None,
) -> str:
    """YAML text of the inventory for these hosts (as socketlab.cloud.ec2.provision returns).

    With ``platform`` the hosts are also members of their tier's group (platform_hosts or
    platform_guests) with the variables experiments/platform.yaml reads. ``existing`` is the
    file's current document (``read``): its other campaigns are kept, so a host campaign and a
    guest campaign, each on its own cloud, share one inventory.
    """
    entries: dict[str, dict[str, Any]] = {}
    for h in hosts:
        v: dict[str, Any] = {
            "ansible_host": h["address"],
            "ansible_port": h["port"],
            "ansible_user": h["user"],
            # A fresh instance has a new host key: accept it once, then pin it in a per-campaign
            # known_hosts file so a later change is caught.
            "ansible_ssh_common_args": (
                f"-o StrictHostKeyChecking=accept-new -o UserKnownHostsFile={known_hosts}"
            ),
            "ansible_become": h["user"] != "root",
            # orchestrate's agent runs through `sudo -n` for root-only collectors (MSR, RAPL, perf)
            "socketlab_become": h["user"] != "root",
            "ansible_python_interpreter": h.get("python") or "/usr/bin/python3",
            "ec2_instance_id": h["instance_id"],
            "ec2_instance_type": h["instance_type"],
            "ec2_public_ip": h["public_ip"],
            "ec2_private_ip": h["private_ip"],
            "ec2_availability_zone": h["availability_zone"],
            "socketlab_expires_at": h["expires_at"],
        }
        if h.get("key_file"):
            v["ansible_ssh_private_key_file"] = h["key_file"]
        entries[h["name"]] = v
    group_vars: dict[str, Any] = {
        "socketlab_campaign": campaign,
        "ec2_region": target.get("region"),
        "ec2_endpoint_url": target.get("endpoint_url"),
        "ec2_profile": target.get("profile"),  # which cloud, when a profile names the endpoint
    }
    others = campaigns(existing)
    others.pop(group_name(campaign), None)
    if platform is not None:
        by_name = {h["name"]: h for h in hosts}
        paired = pair(sorted(entries, key=natural), platform.tier, tier_machines(others, "host"))
        for name, extra in paired.items():
            entries[name].update(platform.machine_vars(by_name[name]), **extra)
        group_vars["socketlab_tier"] = platform.tier
    return _text({**others, group_name(campaign): {"hosts": entries, "vars": group_vars}})


def _text(groups: dict[str, dict[str, Any]]) -> str:
    names = sorted(g["vars"]["socketlab_campaign"] for g in groups.values())
    which = f"campaign {names[0]}" if len(names) == 1 else f"campaigns {', '.join(names)}"
    head = f"{HEADER} for {which}; playbooks/teardown.yml removes it. Do not edit.\n"
    return head + yaml.safe_dump(_document(groups), sort_keys=False, default_flow_style=False)


def check_before_launch(
    existing: dict[str, Any] | None,
    campaign: str,
    target: dict[str, Any],
    path: Path,
    platform: Platform | None,
) -> None:
    """Refuse, before anything is launched, what render could not write: guests with no host
    campaign in the inventory to pair them with, or a campaign of the same name already there
    from another cloud (their instances' names would collide)."""
    others = campaigns(existing)
    others.pop(group_name(campaign), None)
    if platform is not None or others:
        check_same_cloud(existing, campaign, target, path, "provision")
    if platform is not None and platform.tier == "guest" and not tier_machines(others, "host"):
        raise CloudError(
            f"provision: socketlab_ec2_tier=guest: socketlab_inventory_file {path} "
            "holds no host-tier machines to pair the guests with; provision the "
            "hosts first (-e socketlab_ec2_tier=host) and pass their inventory "
            "file"
        )


def check_same_cloud(
    existing: dict[str, Any] | None, campaign: str, target: dict[str, Any], path: Path, action: str
) -> None:
    """In an inventory shared by campaigns of different clouds (or of a tier), the campaign's
    part names the cloud it was launched on: provision and teardown must talk to that one, or
    they would launch beside it or drop it from the inventory while it keeps running."""
    group = campaigns(existing).get(group_name(campaign))
    if not group:
        return
    have = group.get("vars") or {}
    if len(campaigns(existing)) < 2 and "socketlab_tier" not in have:
        return  # a campaign's own inventory: written over as it always was
    # ec2_profile is missing in inventories written before it was: not compared then
    keys = [k for k in ("region", "endpoint_url", "profile") if f"ec2_{k}" in have]
    was = {k: have.get(f"ec2_{k}") for k in keys}
    now = {k: target.get(k) for k in keys}
    if was == now:
        return

    def show(t: dict[str, Any]) -> str:
        return ", ".join(f"{k} {v}" for k, v in t.items() if v) or "no profile or endpoint"

    fix = (
        "pass that cloud's socketlab_ec2_aws_profile / socketlab_ec2_aws_endpoint_url"
        if action == "teardown"
        else "pass that cloud's settings or give this launch its own socketlab_ec2_campaign"
    )
    raise CloudError(
        f"{action}: socketlab_inventory_file {path}: campaign {campaign} there was "
        f"launched on {show(was)}, not {show(now)}; {fix}"
    )


#: The inventory group of each tier: the names experiments/platform.yaml's hosts pattern uses.
TIER_GROUPS = {"host": "platform_hosts", "guest": "platform_guests"}


@dataclass(frozen=True)
class Platform:
    """What provision writes for experiments/platform.yaml (docs/platform.md, Inventory)."""

    tier: str  #: "host" or "guest"
    s3_endpoint: str | None = None  #: written as socketlab_s3_endpoint
    s3_profile: str | None = None  #: written as socketlab_s3_profile

    def with_s3_default(self, url: Callable[[], str]) -> Platform:
        """Unset, the S3 endpoint is the one the cloud's own S3 client resolves (the profile's
        or the environment's endpoint_url, else the region's)."""
        return self if self.s3_endpoint else dataclasses.replace(self, s3_endpoint=url())

    def machine_vars(self, host: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"socketlab_tier": self.tier}
        # iperf3 peers talk over the private network (the fabric, or the guests' overlay), not
        # the address SSH reaches from outside.
        if host.get("private_ip"):
            out["socketlab_fabric_address"] = host["private_ip"]
        if self.s3_endpoint:
            out["socketlab_s3_endpoint"] = self.s3_endpoint
        if self.s3_profile:
            out["socketlab_s3_profile"] = self.s3_profile
        return out


def platform_from_args(args: dict[str, Any]) -> Platform | None:
    """Takes the tier settings (tier, s3_endpoint, s3_profile) out of provision's arguments;
    None when no tier is asked for."""
    tier = args.pop("tier", None)
    s3_endpoint = args.pop("s3_endpoint", None) or None
    s3_profile = args.pop("s3_profile", None) or None
    if tier is None or tier == "":
        if s3_endpoint or s3_profile:
            raise CloudError(
                "provision: socketlab_ec2_s3_endpoint / socketlab_ec2_s3_profile "
                "need socketlab_ec2_tier (host or guest)"
            )
        return None
    if tier not in TIER_GROUPS:
        raise CloudError(f"provision: socketlab_ec2_tier {tier!r}: expected host or guest")
    if s3_endpoint and not str(s3_endpoint).startswith(("http://", "https://")):
        raise CloudError(
            f"provision: socketlab_ec2_s3_endpoint {s3_endpoint!r}: expected a "
            "URL (http(s)://host:port)"
        )
    return Platform(tier, s3_endpoint, s3_profile)


def natural(name: str) -> tuple:
    """socketlab-x-2 before socketlab-x-10."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def pair(names: list[str], tier: str, host_names: list[str]) -> dict[str, dict[str, Any]]:
    """name -> socketlab_peer (iperf3 partner of the same tier: 1st with 2nd, 3rd with 4th, ...;
    an odd last one has none) and, for guests, socketlab_host (the i-th guest on the i-th host,
    round robin when there are more guests than hosts)."""
    out: dict[str, dict[str, Any]] = {n: {} for n in names}
    for a, b in zip(names[0::2], names[1::2], strict=False):
        out[a]["socketlab_peer"], out[b]["socketlab_peer"] = b, a
    if tier == "guest":
        if not host_names:
            raise CloudError(
                "provision: socketlab_ec2_tier=guest: no host-tier machine to pair the guests with"
            )
        for i, name in enumerate(names):
            out[name]["socketlab_host"] = host_names[i % len(host_names)]
    return out


def campaigns(doc: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """group name -> the campaign group (hosts, vars) of a generated inventory document."""
    return dict(_cloud(doc)) if doc else {}


def tier_machines(groups: dict[str, dict[str, Any]], tier: str) -> list[str]:
    """The machines of that tier in these campaign groups, in name order."""
    return sorted(
        (
            name
            for g in groups.values()
            if (g.get("vars") or {}).get("socketlab_tier") == tier
            for name in g.get("hosts") or {}
        ),
        key=natural,
    )


def _cloud(doc: dict[str, Any]) -> dict[str, Any]:
    try:
        return doc["all"]["children"]["socketlab_cloud"]["children"] or {}
    except (KeyError, TypeError):
        return {}


def _document(groups: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The whole file: every campaign under socketlab_cloud, and each tier group listing the
    campaign groups of that tier as children (so --hosts platform_guests means their hosts)."""
    ordered = dict(sorted(groups.items()))
    children: dict[str, Any] = {"socketlab_cloud": {"children": ordered}}
    for tier, tier_group in TIER_GROUPS.items():
        members: dict[str, dict[str, Any]] = {
            k: {} for k, g in ordered.items() if (g.get("vars") or {}).get("socketlab_tier") == tier
        }
        if members:
            children[tier_group] = {"children": members}
    return {"all": {"children": children}}


def read(path: Path, *, foreign: str = "error") -> dict[str, Any] | None:
    """The generated inventory's document, or None when there is no file (or no campaign in it).
    A file provision did not write is an error (it is never merged into); foreign="none" reads
    it as None instead (teardown, which refuses to remove it after terminating)."""
    if not path.exists():
        return None
    if not _ours(path):
        if foreign == "none":
            return None
        raise CloudError(
            f"inventory file {path}: exists and was not generated by "
            "provision.yml; refusing to overwrite it (choose another path)"
        )
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError:
        return None
    return doc if _cloud(doc) else None


HEADER = "# Generated by playbooks/provision.yml"


def _ours(path: Path) -> bool:
    with open(path, encoding="utf-8", errors="replace") as fh:
        return fh.readline().startswith(HEADER)


def write(path: Path, text: str) -> bool:
    """Writes atomically; returns whether the content changed.

    Refuses to replace a file provision did not write (e.g. a hand-made inventory).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        if not _ours(path):
            raise CloudError(
                f"inventory file {path}: exists and was not generated by "
                "provision.yml; refusing to overwrite it (choose another path)"
            )
        if path.read_text() == text:
            return False
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return True


def known_hosts_path(inventory_file: Path, campaign: str | None = None) -> Path:
    """The campaign's own known_hosts beside the inventory (one per campaign, so tearing down
    one campaign of a shared inventory drops exactly its instances' keys)."""
    if campaign is None or campaign == inventory_file.stem:
        return inventory_file.with_suffix(".known_hosts")
    return inventory_file.with_name(f"{inventory_file.stem}.{campaign}.known_hosts")


def remove(path: Path, campaign: str | None = None) -> bool:
    """Removes the generated inventory and its known_hosts file; returns whether one was there.

    With ``campaign``, only that campaign's part goes when the file holds other campaigns too
    (a guest campaign beside its hosts); the file goes with its last campaign. Only a file
    provision wrote is touched: a hand-made inventory at that path is an error.
    """
    if not path.exists():
        return False
    if not _ours(path):
        raise CloudError(
            f"inventory file {path}: was not generated by provision.yml; refusing to remove it"
        )
    if campaign is not None:
        doc = read(path)
        groups = campaigns(doc)
        if groups and group_name(campaign) not in groups:
            return False  # another campaign's inventory: not ours to remove
        groups.pop(group_name(campaign), None)
        known_hosts_path(path, campaign).unlink(missing_ok=True)
        if groups:
            write(path, _text(groups))
            return True
    path.unlink()
    known_hosts_path(path).unlink(missing_ok=True)
    return True
