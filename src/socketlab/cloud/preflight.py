"""Checks made before provision pays for anything: zone offerings, the vCPU quota, the
inventory path, and the one-line message for a capacity error.

The decisions are pure functions over the API's answers (so they are tested on recorded
responses where an endpoint such as moto lacks the API); `run_preflight` makes the calls.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from socketlab.errors import CloudError

#: Service Quotas code of "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances",
#: counted in vCPUs; c8i is a standard family.
STANDARD_VCPU_QUOTA = "L-1216C47A"
STANDARD_FAMILIES = tuple("acdhimrtz")
#: run_instances error codes that mean "no capacity there now", not "you asked wrongly"
CAPACITY_CODES = (
    "InsufficientInstanceCapacity",
    "InsufficientHostCapacity",
    "InsufficientCapacity",
    "Unsupported",
)


@dataclass(frozen=True)
class Preflight:
    zone: str | None  #: where the instances go (None: the given subnet decides and was checked)
    offered_zones: tuple[str, ...]
    vcpus_per_instance: int | None
    quota: float | None  #: None when the endpoint has no Service Quotas answer (said in `notes`)
    notes: tuple[str, ...] = ()

    def facts(self) -> dict[str, Any]:
        return {
            "zone": self.zone,
            "offered_zones": list(self.offered_zones),
            "vcpus_per_instance": self.vcpus_per_instance,
            "vcpu_quota": self.quota,
            "notes": list(self.notes),
        }


def check_inventory_path(path: Path) -> None:
    """Refuse, before launching, an inventory path provision could not write or Ansible read."""
    if path.suffix not in (".yml", ".yaml"):
        raise CloudError(
            f"provision: socketlab_inventory_file {path}: expected a .yml or .yaml "
            "file (Ansible's YAML inventory plugin reads only those)"
        )
    if path.is_dir():
        raise CloudError(
            f"provision: socketlab_inventory_file {path}: is a directory; "
            "expected a file path such as inventory/generated/NAME.yml"
        )
    parent = path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise CloudError(
            f"provision: socketlab_inventory_file {path}: {parent} is not a writable directory"
        )


def choose_zone(offered: list[str], wanted: str | None, instance_type: str, region: str) -> str:
    """The zone to launch in: the one asked for if it offers the type, else the first that does."""
    zones = sorted(set(offered))
    if not zones:
        raise CloudError(
            f"provision: instance_type {instance_type}: no availability zone of "
            f"{region} offers it; choose another region or type"
        )
    if wanted and wanted not in zones:
        raise CloudError(
            f"provision: availability_zone {wanted}: does not offer {instance_type}; "
            f"zones of {region} that do: {', '.join(zones)}"
        )
    return wanted or zones[0]


def standard_family(instance_type: str) -> bool:
    return instance_type[:1].lower() in STANDARD_FAMILIES


def check_vcpu_quota(
    quota: float, per_instance: int, to_launch: int, in_use: int, instance_type: str, region: str
) -> None:
    """Refuse when the running standard vCPUs plus this launch exceed the account's quota."""
    need = in_use + per_instance * to_launch
    if need > quota:
        raise CloudError(
            f"provision: vCPU quota {STANDARD_VCPU_QUOTA} (On-Demand Standard instances) in "
            f"{region} is {quota:g}; {to_launch} x {instance_type} needs {per_instance * to_launch}"
            f" vCPUs{f' plus {in_use} in use' if in_use else ''}; request {need:g} in Service "
            f"Quotas (aws service-quotas request-service-quota-increase --service-code ec2 "
            f"--quota-code {STANDARD_VCPU_QUOTA} --desired-value {need})"
        )


def capacity_message(
    code: str, instance_type: str, zone: str | None, offered: tuple[str, ...]
) -> str:
    """What to do when AWS has no capacity for the type in the zone right now."""
    others = [z for z in offered if z != zone]
    hint = (
        f"try another zone (-e socketlab_ec2_availability_zone={others[0]}; offering: "
        f"{', '.join(others)})"
        if others
        else "try later or another region"
    )
    return (
        f"provision: no {instance_type} capacity in {zone or 'the subnet zone'} now ({code}); "
        f"{hint}; nothing is left running"
    )


def error_code(exc: BaseException) -> str | None:
    response = getattr(exc, "response", None)
    return response.get("Error", {}).get("Code") if isinstance(response, dict) else None


def run_preflight(
    target: Any, ec2: Any, s: Any, to_launch: int, subnet_zone: str | None, call: Any
) -> Preflight:
    """Zone, offerings and quota for launching ``to_launch`` x ``s.instance_type``.

    ``call(action, fn, **kw)`` is ec2._call (one CloudError line per API error);
    ``subnet_zone`` is the zone of a given subnet_id (then that zone must offer the type).
    """
    offers = call(
        "describe_instance_type_offerings",
        ec2.describe_instance_type_offerings,
        LocationType="availability-zone",
        Filters=[{"Name": "instance-type", "Values": [s.instance_type]}],
    )
    offered = sorted({o["Location"] for o in offers.get("InstanceTypeOfferings", [])})
    if subnet_zone:
        if s.availability_zone and s.availability_zone != subnet_zone:
            subnet = (
                f"subnet_id {s.subnet_id}"
                if s.subnet_id
                else "the campaign's network (made by an earlier provision)"
            )
            raise CloudError(
                f"provision: availability_zone {s.availability_zone} but {subnet} "
                f"is in {subnet_zone}; give one of them (or tear down first)"
            )
        zone = choose_zone(offered, subnet_zone, s.instance_type, target.region)
    else:
        zone = choose_zone(offered, s.availability_zone, s.instance_type, target.region)
    types = call(
        "describe_instance_types", ec2.describe_instance_types, InstanceTypes=[s.instance_type]
    )["InstanceTypes"]
    per = int(types[0]["VCpuInfo"]["DefaultVCpus"]) if types else None
    notes: list[str] = []
    quota = None
    if s.check_vcpu_quota and per and standard_family(s.instance_type):
        quota, note = _quota(target)
        if note:
            notes.append(note)
        if quota is not None:
            check_vcpu_quota(
                quota,
                per,
                to_launch,
                _standard_vcpus_in_use(ec2, call),
                s.instance_type,
                target.region,
            )
    return Preflight(zone, tuple(offered), per, quota, tuple(notes))


def _quota(target: Any) -> tuple[float | None, str | None]:
    import botocore.exceptions

    try:
        out = target.client("service-quotas").get_service_quota(
            ServiceCode="ec2", QuotaCode=STANDARD_VCPU_QUOTA
        )
        return float(out["Quota"]["Value"]), None
    except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
        # An endpoint without the quota (moto, a private cloud) or a role without
        # servicequotas:GetServiceQuota: say it was not checked, and launch; AWS itself then
        # refuses with VcpuLimitExceeded, which is reported as one line too.
        code = error_code(exc) or type(exc).__name__
        return None, f"vCPU quota not checked (service-quotas: {code})"


def _standard_vcpus_in_use(ec2: Any, call: Any) -> int:
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]
    )
    counts: dict[str, int] = {}
    for page in call("describe_instances", lambda: list(pages)):
        for res in page["Reservations"]:
            for inst in res["Instances"]:
                if standard_family(inst["InstanceType"]):
                    counts[inst["InstanceType"]] = counts.get(inst["InstanceType"], 0) + 1
    if not counts:
        return 0
    types = call(
        "describe_instance_types", ec2.describe_instance_types, InstanceTypes=sorted(counts)
    )["InstanceTypes"]
    vcpus = {t["InstanceType"]: int(t["VCpuInfo"]["DefaultVCpus"]) for t in types}
    return sum(vcpus.get(t, 0) * n for t, n in counts.items())
