"""Pure planning for cloud instances: settings, the money guard, tags, ages and costs.

Nothing here talks to a cloud; socketlab.cloud.ec2 applies what these functions decide.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from socketlab.errors import CloudError

TAG_CAMPAIGN = "socketlab:campaign"
TAG_OWNER = "socketlab:owner"
TAG_EXPIRES = "socketlab:expires-at"
#: Marks resources socketlab created (security group, key pair, network) so teardown deletes
#: only those, never a group or key the user passed in.
TAG_CREATED = "socketlab:created-by"

DEFAULT_INSTANCE_TYPE = "c8i.metal-48xl"
#: Amazon Linux 2023 standard images (not "minimal") of one kernel family, 6.18 (the
#: published campaign's kernel, 6.18.51-...amzn2023), so the kernel is not whichever family
#: happens to be newest; the newest match is used. Override: -e socketlab_ec2_ami_name / _ami.
DEFAULT_AMI_NAME = "al2023-ami-2023.*-kernel-6.18-x86_64"
DEFAULT_AMI_OWNER = "amazon"
DEFAULT_SSH_USER = "ec2-user"  #: Amazon Linux's login user
#: Instance states that still cost money or can come back; "terminated" ones are gone.
LIVE_STATES = ("pending", "running", "stopping", "stopped")

_CAMPAIGN_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


@dataclass(frozen=True)
class LaunchSettings:
    campaign: str
    owner: str
    count: int
    hours: float  #: planned lifetime of each instance; expires-at = launch + hours
    max_instance_hours: float
    instance_type: str = DEFAULT_INSTANCE_TYPE
    ami: str | None = None  #: explicit image id; None = newest image named like ami_name
    ami_name: str = DEFAULT_AMI_NAME
    ami_owner: str = DEFAULT_AMI_OWNER
    subnet_id: str | None = None
    availability_zone: str | None = None  #: None = the first zone (sorted) offering the type
    create_network: bool = False  #: make a VPC + public subnet + internet gateway for the campaign
    vpc_cidr: str = "10.77.0.0/16"
    subnet_cidr: str = "10.77.1.0/24"
    key_name: str | None = None  #: existing key pair; or created/imported when asked
    public_key_file: str | None = None  #: import this public key as the key pair
    create_key_pair: bool = False  #: let EC2 make the key; the private key goes to key_dir
    key_dir: str | None = None
    security_group_id: str | None = None
    create_security_group: bool = False
    ssh_cidr: str | None = None  #: the only source allowed to reach port 22
    root_volume_gb: int = 100
    root_device: str | None = None  #: None = the image's own RootDeviceName
    check_vcpu_quota: bool = True  #: Service Quotas' standard vCPU quota before launching
    ssh_user: str = DEFAULT_SSH_USER
    #: the hosts' interpreter for Ansible and orchestrate (Amazon Linux 2023: python3 is 3.9)
    remote_python: str = "/usr/bin/python3"
    ssh_port: int = 22
    ssh_private_key_file: str | None = None  #: written into the inventory, never read
    ssh_address: str = "auto"  #: "public", "private" or "auto" (public when there is one)
    ssh_timeout_s: float = 600.0
    status_timeout_s: float = 1200.0
    poll_s: float = 10.0
    price_per_hour: float | None = None
    extra_tags: dict[str, str] = field(default_factory=dict)

    def tags(self, now: datetime) -> dict[str, str]:
        return {
            **self.extra_tags,
            TAG_CAMPAIGN: self.campaign,
            TAG_OWNER: self.owner,
            TAG_EXPIRES: iso(now + timedelta(hours=self.hours)),
        }


def iso(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(text: str) -> datetime | None:
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (TypeError, ValueError):
        return None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def _bool(value: Any, name: str, source: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "yes", "1", "false", "no", "0"):
        return value.lower() in ("true", "yes", "1")
    raise CloudError(f"{source}: {name}: expected true or false, got {value!r}")


def _number(value: Any, name: str, source: str, *, integer: bool = False) -> float:
    try:
        n = int(value) if integer else float(value)
    except (TypeError, ValueError):
        kind = "a whole number" if integer else "a number"
        raise CloudError(f"{source}: {name}: expected {kind}, got {value!r}") from None
    if n <= 0:
        raise CloudError(f"{source}: {name}: expected a positive value, got {value!r}")
    return n


def check_campaign(campaign: Any, source: str) -> str:
    if not campaign:
        raise CloudError(f"{source}: campaign is required (-e socketlab_ec2_campaign=NAME)")
    if not isinstance(campaign, str) or not _CAMPAIGN_RE.match(campaign):
        raise CloudError(
            f"{source}: campaign {campaign!r}: expected letters, digits, '.', '_' or '-' "
            "(at most 63 characters)"
        )
    return campaign


def settings_from_args(args: dict[str, Any], source: str = "provision") -> LaunchSettings:
    """Validated LaunchSettings from playbook/CLI arguments (names as in provision.yml)."""
    known = set(LaunchSettings.__dataclass_fields__) | {
        "aws_region",
        "aws_profile",
        "aws_endpoint_url",
        "inventory_file",
    }
    unknown = sorted(k for k in args if k not in known)
    if unknown:
        raise CloudError(f"{source}: unknown setting(s) {', '.join(unknown)}")
    a = {
        k: v for k, v in args.items() if v is not None and k in LaunchSettings.__dataclass_fields__
    }
    campaign = check_campaign(a.get("campaign"), source)
    if "max_instance_hours" not in a:
        raise CloudError(
            f"{source}: max_instance_hours is required: the most instance-hours this launch may "
            "commit (count x hours), e.g. -e socketlab_ec2_max_instance_hours=8"
        )
    if not a.get("owner"):
        raise CloudError(
            f"{source}: owner is required (-e socketlab_ec2_owner=NAME); it tags every instance"
        )
    a["count"] = int(_number(a.get("count", 1), "count", source, integer=True))
    if "hours" not in a:
        raise CloudError(
            f"{source}: hours is required: how long the instances may live "
            "(sets socketlab:expires-at), e.g. -e socketlab_ec2_hours=4"
        )
    a["hours"] = _number(a["hours"], "hours", source)
    a["max_instance_hours"] = _number(a["max_instance_hours"], "max_instance_hours", source)
    for name, default in (("root_volume_gb", 100), ("ssh_port", 22)):
        a[name] = int(_number(a.get(name, default), name, source, integer=True))
    for name in ("ssh_timeout_s", "status_timeout_s", "poll_s", "price_per_hour"):
        if name in a:
            a[name] = _number(a[name], name, source)
    for name in ("create_network", "create_key_pair", "create_security_group", "check_vcpu_quota"):
        if name in a:
            a[name] = _bool(a[name], name, source)
    if a.get("ssh_address", "auto") not in ("auto", "public", "private"):
        raise CloudError(f"{source}: ssh_address: expected auto, public or private")
    s = LaunchSettings(**{**a, "campaign": campaign})
    _check_network(s, source)
    return s


def _check_network(s: LaunchSettings, source: str) -> None:
    if s.create_security_group:
        if not s.ssh_cidr:
            raise CloudError(
                f"{source}: ssh_cidr is required with create_security_group "
                "(the one network allowed to reach SSH, e.g. 203.0.113.7/32)"
            )
        try:
            net = ipaddress.ip_network(s.ssh_cidr, strict=False)
        except ValueError:
            raise CloudError(
                f"{source}: ssh_cidr {s.ssh_cidr!r}: expected a CIDR like 203.0.113.7/32"
            ) from None
        if net.prefixlen == 0:
            raise CloudError(
                f"{source}: ssh_cidr {s.ssh_cidr}: refusing to open SSH to the whole "
                "internet; give your own address or network"
            )
    if s.security_group_id and s.create_security_group:
        raise CloudError(f"{source}: give security_group_id or create_security_group, not both")
    if s.subnet_id and s.create_network:
        raise CloudError(f"{source}: give subnet_id or create_network, not both")
    if sum(bool(x) for x in (s.public_key_file, s.create_key_pair)) > 1:
        raise CloudError(f"{source}: give public_key_file or create_key_pair, not both")
    if (s.public_key_file or s.create_key_pair) and not s.key_name:
        raise CloudError(f"{source}: key_name is required to import or create a key pair")
    if s.create_network:
        for name in ("vpc_cidr", "subnet_cidr"):
            try:
                ipaddress.ip_network(getattr(s, name))
            except ValueError:
                raise CloudError(
                    f"{source}: {name} {getattr(s, name)!r}: expected a CIDR"
                ) from None


@dataclass(frozen=True)
class LaunchPlan:
    existing: tuple[str, ...]  #: live instance ids already tagged with the campaign
    to_launch: int
    instance_hours: float  #: count x hours, what the guard compared
    estimated_cost: float | None  #: instance_hours x price_per_hour, None without a price

    def facts(self) -> dict[str, Any]:
        return {**self.__dict__, "existing": list(self.existing)}


def plan_launch(s: LaunchSettings, existing_ids: list[str]) -> LaunchPlan:
    """How many to launch so the campaign has s.count live instances; refuses over budget.

    The guard counts every instance the campaign will have (existing ones too), for its whole
    planned lifetime: count x hours must not exceed max_instance_hours.
    """
    hours = s.count * s.hours
    if hours > s.max_instance_hours:
        raise CloudError(
            f"provision: refusing to launch: count x hours = {s.count} x {s.hours:g} = {hours:g} "
            f"instance-hours exceeds max_instance_hours={s.max_instance_hours:g}; "
            "lower count or hours, or raise max_instance_hours"
        )
    cost = round(hours * s.price_per_hour, 2) if s.price_per_hour else None
    return LaunchPlan(tuple(existing_ids), max(0, s.count - len(existing_ids)), hours, cost)


def tag_dict(resource: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in resource.get("Tags", []) or []}


def ssh_address(instance: dict[str, Any], mode: str) -> str | None:
    public, private = instance.get("PublicIpAddress"), instance.get("PrivateIpAddress")
    return {"public": public, "private": private}.get(mode, public or private)


@dataclass(frozen=True)
class InstanceRow:
    """One tagged instance as `orchestrate cloud list` shows it."""

    instance_id: str
    campaign: str
    owner: str
    instance_type: str
    state: str
    launched: str
    age_hours: float
    expires_at: str
    expired: bool
    estimated_cost: float | None  #: age x price_per_hour; None when no price was given

    def facts(self) -> dict[str, Any]:
        return dict(self.__dict__)


def instance_row(inst: dict[str, Any], now: datetime, price_per_hour: float | None) -> InstanceRow:
    tags = tag_dict(inst)
    launched = inst["LaunchTime"]
    if isinstance(launched, str):
        launched = parse_iso(launched) or now
    age = max(0.0, (now - launched).total_seconds() / 3600.0)
    expires = parse_iso(tags.get(TAG_EXPIRES, ""))
    return InstanceRow(
        instance_id=inst["InstanceId"],
        campaign=tags.get(TAG_CAMPAIGN, ""),
        owner=tags.get(TAG_OWNER, ""),
        instance_type=inst.get("InstanceType", ""),
        state=inst["State"]["Name"],
        launched=iso(launched),
        age_hours=round(age, 3),
        expires_at=tags.get(TAG_EXPIRES, ""),
        # An instance without a readable expiry never expires by itself: reap leaves it alone
        # (a person must look at it) rather than guessing.
        expired=bool(expires and expires <= now),
        estimated_cost=round(age * price_per_hour, 2) if price_per_hour else None,
    )
