"""EC2 calls (boto3) that apply what socketlab.cloud.plan decided: provision, teardown, list, reap.

Every resource is found again by its socketlab:campaign tag, so each step is idempotent: a
second provision launches nothing, a second teardown deletes nothing. A failure after launch
terminates what this call launched before raising.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from socketlab.cloud.plan import (
    LIVE_STATES,
    TAG_CAMPAIGN,
    TAG_CREATED,
    InstanceRow,
    LaunchSettings,
    instance_row,
    plan_launch,
    ssh_address,
    tag_dict,
)
from socketlab.cloud.preflight import CAPACITY_CODES, capacity_message, run_preflight
from socketlab.cloud.target import CloudTarget, api_error
from socketlab.errors import CloudError

Log = Callable[[str], None]


def _quiet(_msg: str) -> None:
    pass


def _call(action: str, fn: Callable[..., Any], **kw: Any) -> Any:
    import botocore.exceptions

    try:
        return fn(**kw)
    except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
        raise api_error(action, exc) from None


def _tag_spec(kind: str, tags: dict[str, str]) -> list[dict[str, Any]]:
    return [{"ResourceType": kind, "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]


def campaign_instances(ec2: Any, campaign: str | None, states=LIVE_STATES) -> list[dict]:
    filters = [{"Name": "instance-state-name", "Values": list(states)}]
    if campaign:
        filters.append({"Name": f"tag:{TAG_CAMPAIGN}", "Values": [campaign]})
    else:
        filters.append({"Name": "tag-key", "Values": [TAG_CAMPAIGN]})

    def every_page() -> list[dict]:
        # Pages are fetched while iterating, so the iteration (not just the paginator) must run
        # inside _call for an API or connection error to become one CloudError line.
        pages = ec2.get_paginator("describe_instances").paginate(Filters=filters)
        return [i for page in pages for res in page["Reservations"] for i in res["Instances"]]

    out = _call("describe_instances", every_page)
    return sorted(out, key=lambda i: (tag_dict(i).get("Name", ""), i["InstanceId"]))


def lookup_ami(ec2: Any, name_pattern: str, owner: str) -> str:
    """The newest image whose name matches (by creation date, then by version numbers)."""
    return newest_image(ec2, name_pattern, owner)["ImageId"]


def root_device_of(ec2: Any, ami: str) -> str:
    """The image's own root device name (Amazon Linux /dev/xvda, Ubuntu/RHEL /dev/sda1)."""
    images = _call("describe_images", ec2.describe_images, ImageIds=[ami])["Images"]
    if not images:
        raise CloudError(f"provision: ami {ami}: no such image in this region")
    return images[0].get("RootDeviceName") or "/dev/xvda"


def newest_image(ec2: Any, name_pattern: str, owner: str) -> dict:
    images = _call(
        "describe_images",
        ec2.describe_images,
        Owners=[owner],
        Filters=[
            {"Name": "name", "Values": [name_pattern]},
            {"Name": "state", "Values": ["available"]},
        ],
    )["Images"]
    if not images:
        raise CloudError(
            f"provision: ami_name: no image owned by {owner!r} is named like "
            f"{name_pattern!r} in this region; pass ami=ami-... instead"
        )

    def key(img: dict) -> tuple:
        nums = tuple(
            int(n) for n in "".join(c if c.isdigit() else " " for c in img["Name"]).split()
        )
        return (img.get("CreationDate", ""), nums)

    return max(images, key=key)


def _created_tags(s: LaunchSettings, now: datetime, name: str) -> dict[str, str]:
    return {**s.tags(now), TAG_CREATED: "socketlab", "Name": name}


def _find_tagged(items: list[dict], campaign: str) -> dict | None:
    for item in items:
        tags = tag_dict(item)
        if tags.get(TAG_CAMPAIGN) == campaign and tags.get(TAG_CREATED) == "socketlab":
            return item
    return None


def ensure_network(ec2: Any, s: LaunchSettings, now: datetime, log: Log) -> str:
    """A VPC with one public subnet and an internet gateway for the campaign; returns the subnet."""
    flt = [{"Name": f"tag:{TAG_CAMPAIGN}", "Values": [s.campaign]}]
    subnets = _call("describe_subnets", ec2.describe_subnets, Filters=flt)["Subnets"]
    found = _find_tagged(subnets, s.campaign)
    if found:
        return found["SubnetId"]
    name = f"socketlab-{s.campaign}"
    tags = _created_tags(s, now, name)
    vpcs = _call("describe_vpcs", ec2.describe_vpcs, Filters=flt)["Vpcs"]
    vpc = (
        _find_tagged(vpcs, s.campaign)
        or _call(
            "create_vpc",
            ec2.create_vpc,
            CidrBlock=s.vpc_cidr,
            TagSpecifications=_tag_spec("vpc", tags),
        )["Vpc"]
    )
    vpc_id = vpc["VpcId"]
    log(f"network: vpc {vpc_id} ({s.vpc_cidr})")
    igw = _call(
        "create_internet_gateway",
        ec2.create_internet_gateway,
        TagSpecifications=_tag_spec("internet-gateway", tags),
    )["InternetGateway"]
    _call(
        "attach_internet_gateway",
        ec2.attach_internet_gateway,
        InternetGatewayId=igw["InternetGatewayId"],
        VpcId=vpc_id,
    )
    zone = {"AvailabilityZone": s.availability_zone} if s.availability_zone else {}
    subnet = _call(
        "create_subnet",
        ec2.create_subnet,
        VpcId=vpc_id,
        CidrBlock=s.subnet_cidr,
        TagSpecifications=_tag_spec("subnet", tags),
        **zone,
    )["Subnet"]
    _call(
        "modify_subnet_attribute",
        ec2.modify_subnet_attribute,
        SubnetId=subnet["SubnetId"],
        MapPublicIpOnLaunch={"Value": True},
    )
    rt = _call(
        "create_route_table",
        ec2.create_route_table,
        VpcId=vpc_id,
        TagSpecifications=_tag_spec("route-table", tags),
    )["RouteTable"]
    _call(
        "create_route",
        ec2.create_route,
        RouteTableId=rt["RouteTableId"],
        DestinationCidrBlock="0.0.0.0/0",
        GatewayId=igw["InternetGatewayId"],
    )
    _call(
        "associate_route_table",
        ec2.associate_route_table,
        RouteTableId=rt["RouteTableId"],
        SubnetId=subnet["SubnetId"],
    )
    log(f"network: subnet {subnet['SubnetId']} ({s.subnet_cidr}) with internet gateway")
    return subnet["SubnetId"]


def _vpc_of_subnet(ec2: Any, subnet_id: str | None) -> str | None:
    if not subnet_id:
        vpcs = _call(
            "describe_vpcs", ec2.describe_vpcs, Filters=[{"Name": "is-default", "Values": ["true"]}]
        )["Vpcs"]
        return vpcs[0]["VpcId"] if vpcs else None
    subnets = _call("describe_subnets", ec2.describe_subnets, SubnetIds=[subnet_id])["Subnets"]
    return subnets[0]["VpcId"]


def ensure_security_group(
    ec2: Any, s: LaunchSettings, subnet_id: str | None, now: datetime, log: Log
) -> str:
    """A group that allows SSH from s.ssh_cidr only (and nothing else in)."""
    vpc_id = _vpc_of_subnet(ec2, subnet_id)
    flt = [{"Name": f"tag:{TAG_CAMPAIGN}", "Values": [s.campaign]}]
    if vpc_id:
        flt.append({"Name": "vpc-id", "Values": [vpc_id]})
    found = _find_tagged(
        _call("describe_security_groups", ec2.describe_security_groups, Filters=flt)[
            "SecurityGroups"
        ],
        s.campaign,
    )
    if found:
        return found["GroupId"]
    name = f"socketlab-{s.campaign}"
    kw: dict[str, Any] = {
        "GroupName": name,
        "Description": f"socketlab {s.campaign}: SSH only",
        "TagSpecifications": _tag_spec("security-group", _created_tags(s, now, name)),
    }
    if vpc_id:
        kw["VpcId"] = vpc_id
    group_id = _call("create_security_group", ec2.create_security_group, **kw)["GroupId"]
    _call(
        "authorize_security_group_ingress",
        ec2.authorize_security_group_ingress,
        GroupId=group_id,
        IpPermissions=[
            {
                "IpProtocol": "tcp",
                "FromPort": s.ssh_port,
                "ToPort": s.ssh_port,
                "IpRanges": [{"CidrIp": s.ssh_cidr, "Description": "socketlab SSH"}],
            }
        ],
    )
    log(f"security group {group_id}: tcp/{s.ssh_port} from {s.ssh_cidr} only")
    return group_id


def ensure_key_pair(
    ec2: Any, s: LaunchSettings, now: datetime, key_dir: Path, log: Log
) -> str | None:
    """Imports or creates the key pair when asked; returns the private key file if one was made."""
    if not (s.public_key_file or s.create_key_pair):
        return None
    existing = _call(
        "describe_key_pairs",
        ec2.describe_key_pairs,
        Filters=[{"Name": "key-name", "Values": [s.key_name]}],
    )["KeyPairs"]
    private = key_dir / f"{s.key_name}.pem"
    if existing:
        return str(private) if s.create_key_pair and private.exists() else None
    tags = _tag_spec("key-pair", _created_tags(s, now, s.key_name or ""))
    if s.public_key_file:
        try:
            material = Path(s.public_key_file).expanduser().read_bytes()
        except OSError as exc:
            raise CloudError(
                f"provision: public_key_file {s.public_key_file}: {exc.strerror}"
            ) from None
        _call(
            "import_key_pair",
            ec2.import_key_pair,
            KeyName=s.key_name,
            PublicKeyMaterial=material,
            TagSpecifications=tags,
        )
        log(f"key pair {s.key_name}: imported {s.public_key_file}")
        return None
    made = _call(
        "create_key_pair",
        ec2.create_key_pair,
        KeyName=s.key_name,
        KeyType="ed25519",
        TagSpecifications=tags,
    )
    key_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(made["KeyMaterial"])
    log(f"key pair {s.key_name}: created, private key in {private} (mode 600)")
    return str(private)


def _launch(
    ec2: Any,
    s: LaunchSettings,
    n: int,
    first_index: int,
    ami: str,
    subnet_id: str | None,
    group_id: str | None,
    now: datetime,
    root_device: str = "/dev/xvda",
) -> list[str]:
    ids: list[str] = []
    for i in range(first_index, first_index + n):
        # One call per instance so each gets its own Name; a failure part-way still leaves the
        # already-launched ids in `ids` for the caller to terminate.
        tags = {**s.tags(now), "Name": f"socketlab-{s.campaign}-{i}"}
        kw: dict[str, Any] = {
            "ImageId": ami,
            "InstanceType": s.instance_type,
            "MinCount": 1,
            "MaxCount": 1,
            "TagSpecifications": _tag_spec("instance", tags) + _tag_spec("volume", tags),
            "BlockDeviceMappings": [
                {
                    "DeviceName": root_device,
                    "Ebs": {
                        "VolumeSize": s.root_volume_gb,
                        "VolumeType": "gp3",
                        "DeleteOnTermination": True,
                    },
                }
            ],
            "InstanceInitiatedShutdownBehavior": "terminate",
        }
        if s.key_name:
            kw["KeyName"] = s.key_name
        # Public IPs come from the subnet's MapPublicIpOnLaunch (set on networks we create).
        if subnet_id:
            kw["SubnetId"] = subnet_id
        elif s.availability_zone:  # the default VPC: its subnet in that zone
            kw["Placement"] = {"AvailabilityZone": s.availability_zone}
        if group_id:
            kw["SecurityGroupIds"] = [group_id]
        try:
            out = _call("run_instances", ec2.run_instances, **kw)
        except CloudError as exc:
            raise _PartialLaunch(ids, exc) from None
        ids.extend(inst["InstanceId"] for inst in out["Instances"])
    return ids


class _PartialLaunch(Exception):
    def __init__(self, ids: list[str], error: CloudError) -> None:
        super().__init__(str(error))
        self.ids, self.error = ids, error


def _describe(ec2: Any, ids: list[str]) -> list[dict]:
    if not ids:
        return []
    out = _call("describe_instances", ec2.describe_instances, InstanceIds=ids)
    return [i for r in out["Reservations"] for i in r["Instances"]]


def wait_running(ec2: Any, ids: list[str], timeout: float, poll: float) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        insts = _describe(ec2, ids)
        states = {i["InstanceId"]: i["State"]["Name"] for i in insts}
        bad = [f"{k}={v}" for k, v in states.items() if v not in ("pending", "running")]
        if bad:
            raise CloudError(f"instances left the pending/running states: {', '.join(bad)}")
        if all(v == "running" for v in states.values()):
            return insts
        if time.monotonic() >= deadline:
            raise CloudError(f"instances not running within {timeout:g} s: {states}")
        time.sleep(poll)


def wait_status_ok(ec2: Any, ids: list[str], timeout: float, poll: float) -> None:
    """Both EC2 status checks (system and instance reachability) pass for every instance."""
    deadline = time.monotonic() + timeout
    while True:
        out = _call(
            "describe_instance_status",
            ec2.describe_instance_status,
            InstanceIds=ids,
            IncludeAllInstances=True,
        )["InstanceStatuses"]
        pending = sorted(
            st["InstanceId"]
            for st in out
            if st.get("InstanceStatus", {}).get("Status") != "ok"
            or st.get("SystemStatus", {}).get("Status") != "ok"
        )
        pending += sorted(set(ids) - {st["InstanceId"] for st in out})
        if not pending:
            return
        if time.monotonic() >= deadline:
            raise CloudError(f"status checks not passed within {timeout:g} s: {', '.join(pending)}")
        time.sleep(poll)


def ssh_banner(address: str, port: int, timeout: float) -> bool:
    """True when an SSH server answers there (its banner starts with 'SSH-')."""
    try:
        with socket.create_connection((address, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            return sock.recv(4).startswith(b"SSH-")
    except OSError:
        return False


def wait_ssh(targets: dict[str, str | None], port: int, timeout: float, poll: float) -> None:
    deadline = time.monotonic() + timeout
    waiting = dict(targets)
    while True:
        no_address = sorted(k for k, v in waiting.items() if not v)
        if no_address:
            raise CloudError(
                f"no address to reach SSH on for {', '.join(no_address)} "
                "(check ssh_address and the subnet's public IPs)"
            )
        for iid, addr in list(waiting.items()):
            left = max(0.2, min(5.0, deadline - time.monotonic()))
            if ssh_banner(addr, port, left):
                del waiting[iid]
        if not waiting:
            return
        if time.monotonic() >= deadline:
            where = ", ".join(f"{k} ({v}:{port})" for k, v in sorted(waiting.items()))
            raise CloudError(f"SSH not ready within {timeout:g} s on {where}")
        time.sleep(min(poll, max(0.0, deadline - time.monotonic())))


def terminate(ec2: Any, ids: list[str], timeout: float = 600.0, poll: float = 5.0) -> list[str]:
    """Terminates and waits until each is 'terminated' (or the timeout); returns the ids."""
    if not ids:
        return []
    _call("terminate_instances", ec2.terminate_instances, InstanceIds=ids)
    deadline = time.monotonic() + timeout
    while True:
        left = [i["InstanceId"] for i in _describe(ec2, ids) if i["State"]["Name"] != "terminated"]
        if not left or time.monotonic() >= deadline:
            if left:
                raise CloudError(
                    f"teardown: still not terminated after {timeout:g} s: {', '.join(left)}"
                )
            return ids
        time.sleep(poll)


def _next_index(instances: list[dict], campaign: str) -> int:
    used = []
    prefix = f"socketlab-{campaign}-"
    for inst in instances:
        name = tag_dict(inst).get("Name", "")
        if name.startswith(prefix) and name[len(prefix) :].isdigit():
            used.append(int(name[len(prefix) :]))
    return max(used, default=-1) + 1


def provision(
    target: CloudTarget,
    s: LaunchSettings,
    *,
    key_dir: Path,
    log: Log = _quiet,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Makes the campaign have s.count live instances, ready for SSH. Returns a JSON-able result.

    Raises CloudError (after terminating what it launched) when anything after launch fails.
    """
    now = now or datetime.now(UTC)
    ec2 = target.client("ec2")
    existing = campaign_instances(ec2, s.campaign)
    plan = plan_launch(s, [i["InstanceId"] for i in existing])
    log(
        f"campaign {s.campaign}: {len(existing)} live, launching {plan.to_launch} "
        f"({plan.instance_hours:g} instance-hours of {s.max_instance_hours:g} allowed)"
    )
    launched: list[str] = []
    created_key = None
    preflight = None
    if plan.to_launch:
        # Everything that can refuse (zone, quota, image) is asked before anything is created.
        preflight = run_preflight(target, ec2, s, plan.to_launch, _subnet_zone(ec2, s), _call)
        for note in preflight.notes:
            log(note)
        if preflight.zone and not s.subnet_id:
            s = dataclasses.replace(s, availability_zone=preflight.zone)
        log(
            f"zone {preflight.zone or '(subnet)'} offers {s.instance_type}"
            f" ({preflight.vcpus_per_instance} vCPUs each; quota {preflight.quota or 'unchecked'})"
        )
        ami = s.ami or lookup_ami(ec2, s.ami_name, s.ami_owner)
        root_device = s.root_device or root_device_of(ec2, ami)
        subnet_id = s.subnet_id or (ensure_network(ec2, s, now, log) if s.create_network else None)
        group_id = s.security_group_id or (
            ensure_security_group(ec2, s, subnet_id, now, log) if s.create_security_group else None
        )
        created_key = ensure_key_pair(ec2, s, now, key_dir, log)
        try:
            launched = _launch(
                ec2,
                s,
                plan.to_launch,
                _next_index(existing, s.campaign),
                ami,
                subnet_id,
                group_id,
                now,
                root_device,
            )
        except _PartialLaunch as part:
            _rollback(ec2, part.ids, log)
            code = getattr(part.error, "code", None)
            if code in CAPACITY_CODES:
                raise CloudError(
                    capacity_message(
                        code, s.instance_type, s.availability_zone, preflight.offered_zones
                    )
                ) from None
            raise CloudError(
                f"provision: {part.error}; terminated the {len(part.ids)} "
                "instance(s) launched before it"
            ) from None
        log(f"launched {', '.join(launched)} ({s.instance_type}, {ami})")
    ids = [i["InstanceId"] for i in existing] + launched
    insts = _wait_usable(ec2, s, ids, launched, log)
    hosts = [_host(i, s, created_key) for i in insts]
    return {
        "changed": bool(launched),
        "campaign": s.campaign,
        "launched": launched,
        "existing": plan.facts()["existing"],
        "plan": plan.facts(),
        "preflight": preflight.facts() if preflight else None,
        "hosts": hosts,
        "target": target.describe(),
    }


def _wait_usable(
    ec2: Any, s: LaunchSettings, ids: list[str], launched: list[str], log: Log
) -> list[dict]:
    """The instances once running, status ok and answering SSH; on any failure the ones this
    run launched are terminated."""
    try:
        insts = wait_running(ec2, ids, s.status_timeout_s, s.poll_s)
        wait_status_ok(ec2, ids, s.status_timeout_s, s.poll_s)
        wait_ssh(
            {i["InstanceId"]: ssh_address(i, s.ssh_address) for i in insts},
            s.ssh_port,
            s.ssh_timeout_s,
            s.poll_s,
        )
    except Exception as exc:
        # Anything at all going wrong after launch (also a bug of ours) must not leave
        # instances running that nobody is waiting for.
        if launched:
            _rollback(ec2, launched, log)
            raise CloudError(
                f"provision: {exc}; terminated the {len(launched)} instance(s) "
                f"launched by this run: {', '.join(launched)}"
            ) from None
        if isinstance(exc, CloudError):
            raise CloudError(f"provision: {exc}") from None
        raise
    return insts


def _subnet_zone(ec2: Any, s: LaunchSettings) -> str | None:
    """The zone of the subnet the instances will use, when one already exists."""
    if s.subnet_id:
        found = _call("describe_subnets", ec2.describe_subnets, SubnetIds=[s.subnet_id])
        return found["Subnets"][0]["AvailabilityZone"]
    if s.create_network:  # a network made by an earlier provision of the campaign
        flt = [{"Name": f"tag:{TAG_CAMPAIGN}", "Values": [s.campaign]}]
        subnets = _call("describe_subnets", ec2.describe_subnets, Filters=flt)["Subnets"]
        found = _find_tagged(subnets, s.campaign)
        return found["AvailabilityZone"] if found else None
    return None


def _rollback(ec2: Any, ids: list[str], log: Log) -> None:
    if ids:
        log(f"terminating {', '.join(ids)} after the failure")
        with contextlib.suppress(CloudError):
            terminate(ec2, ids, timeout=300.0)


def _host(inst: dict, s: LaunchSettings, created_key: str | None) -> dict[str, Any]:
    tags = tag_dict(inst)
    return {
        "name": tags.get("Name", inst["InstanceId"]),
        "instance_id": inst["InstanceId"],
        "instance_type": inst.get("InstanceType"),
        "address": ssh_address(inst, s.ssh_address),
        "public_ip": inst.get("PublicIpAddress"),
        "private_ip": inst.get("PrivateIpAddress"),
        "port": s.ssh_port,
        "user": s.ssh_user,
        "python": s.remote_python,
        "key_file": s.ssh_private_key_file or created_key,
        "expires_at": tags.get("socketlab:expires-at"),
        "availability_zone": inst.get("Placement", {}).get("AvailabilityZone"),
    }


def teardown(
    target: CloudTarget,
    campaign: str,
    *,
    key_dir: Path | None = None,
    log: Log = _quiet,
    timeout: float = 900.0,
    poll: float = 5.0,
) -> dict[str, Any]:
    """Terminates the campaign's instances and deletes what provision created for it."""
    ec2 = target.client("ec2")
    ids = [i["InstanceId"] for i in campaign_instances(ec2, campaign)]
    if ids:
        log(f"terminating {', '.join(ids)}")
    terminate(ec2, ids, timeout=timeout, poll=poll)
    deleted = _delete_created(ec2, campaign, log, key_dir)
    return {
        "changed": bool(ids or deleted),
        "campaign": campaign,
        "terminated": ids,
        "deleted": deleted,
        "target": target.describe(),
    }


def _delete_created(ec2: Any, campaign: str, log: Log, key_dir: Path | None) -> list[str]:
    flt = [
        {"Name": f"tag:{TAG_CAMPAIGN}", "Values": [campaign]},
        {"Name": f"tag:{TAG_CREATED}", "Values": ["socketlab"]},
    ]
    deleted: list[str] = []

    def gone(kind: str, rid: str) -> None:
        deleted.append(f"{kind} {rid}")
        log(f"deleted {kind} {rid}")

    for sg in _call("describe_security_groups", ec2.describe_security_groups, Filters=flt)[
        "SecurityGroups"
    ]:
        _call("delete_security_group", ec2.delete_security_group, GroupId=sg["GroupId"])
        gone("security-group", sg["GroupId"])
    for kp in _call("describe_key_pairs", ec2.describe_key_pairs, Filters=flt)["KeyPairs"]:
        _call("delete_key_pair", ec2.delete_key_pair, KeyName=kp["KeyName"])
        gone("key-pair", kp["KeyName"])
        if key_dir:  # the private key provision saved for a key pair it created
            (key_dir / f"{kp['KeyName']}.pem").unlink(missing_ok=True)
    for sn in _call("describe_subnets", ec2.describe_subnets, Filters=flt)["Subnets"]:
        _call("delete_subnet", ec2.delete_subnet, SubnetId=sn["SubnetId"])
        gone("subnet", sn["SubnetId"])
    for rt in _call("describe_route_tables", ec2.describe_route_tables, Filters=flt)["RouteTables"]:
        for assoc in rt.get("Associations", []):
            if not assoc.get("Main"):
                _call(
                    "disassociate_route_table",
                    ec2.disassociate_route_table,
                    AssociationId=assoc["RouteTableAssociationId"],
                )
        _call("delete_route_table", ec2.delete_route_table, RouteTableId=rt["RouteTableId"])
        gone("route-table", rt["RouteTableId"])
    for igw in _call("describe_internet_gateways", ec2.describe_internet_gateways, Filters=flt)[
        "InternetGateways"
    ]:
        for att in igw.get("Attachments", []):
            _call(
                "detach_internet_gateway",
                ec2.detach_internet_gateway,
                InternetGatewayId=igw["InternetGatewayId"],
                VpcId=att["VpcId"],
            )
        _call(
            "delete_internet_gateway",
            ec2.delete_internet_gateway,
            InternetGatewayId=igw["InternetGatewayId"],
        )
        gone("internet-gateway", igw["InternetGatewayId"])
    for vpc in _call("describe_vpcs", ec2.describe_vpcs, Filters=flt)["Vpcs"]:
        _call("delete_vpc", ec2.delete_vpc, VpcId=vpc["VpcId"])
        gone("vpc", vpc["VpcId"])
    return deleted


def list_instances(
    target: CloudTarget,
    *,
    campaign: str | None = None,
    price_per_hour: float | None = None,
    now: datetime | None = None,
) -> list[InstanceRow]:
    now = now or datetime.now(UTC)
    ec2 = target.client("ec2")
    return [instance_row(i, now, price_per_hour) for i in campaign_instances(ec2, campaign)]


def reap(
    target: CloudTarget,
    *,
    campaign: str | None = None,
    dry_run: bool = False,
    now: datetime | None = None,
    log: Log = _quiet,
) -> list[InstanceRow]:
    """Terminates tagged instances past their socketlab:expires-at; returns those rows."""
    rows = [r for r in list_instances(target, campaign=campaign, now=now) if r.expired]
    if rows and not dry_run:
        ids = [r.instance_id for r in rows]
        log(f"reaping {', '.join(ids)}")
        terminate(target.client("ec2"), ids)
    return rows


def leftover_campaigns(ec2: Any, campaign: str | None = None) -> list[str]:
    """Campaigns with resources provision created (group, key pair, network) and no live
    instance left: what reap can delete without touching anything still in use."""
    flt = [{"Name": f"tag:{TAG_CREATED}", "Values": ["socketlab"]}]
    if campaign:
        flt.append({"Name": f"tag:{TAG_CAMPAIGN}", "Values": [campaign]})
    found: set[str] = set()
    for action, key in (
        ("describe_security_groups", "SecurityGroups"),
        ("describe_vpcs", "Vpcs"),
        ("describe_key_pairs", "KeyPairs"),
        ("describe_subnets", "Subnets"),
    ):
        for item in _call(action, getattr(ec2, action), Filters=flt)[key]:
            name = tag_dict(item).get(TAG_CAMPAIGN)
            if name:
                found.add(name)
    return sorted(c for c in found if not campaign_instances(ec2, c))


def reap_leftovers(
    target: CloudTarget,
    *,
    campaign: str | None = None,
    dry_run: bool = False,
    key_dir: Path | None = None,
    log: Log = _quiet,
) -> dict[str, list[str]]:
    """campaign -> what was deleted (or, dry run, would be) of campaigns with no live instance."""
    ec2 = target.client("ec2")
    out: dict[str, list[str]] = {}
    for name in leftover_campaigns(ec2, campaign):
        if dry_run:
            out[name] = ["security group, key pair and network tagged with the campaign"]
        else:
            out[name] = _delete_created(ec2, name, log, key_dir)
    return out
