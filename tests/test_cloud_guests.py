"""Hosts on one cloud, guests on another, through the same provision.yml / teardown.yml (issue 17
item 6, seed 003's "single profile swap").

Two moto servers over HTTP stand for "AWS" and "the guest cloud". One AWS config file names both
as profiles (`aws` and `spinifex`, each with its own endpoint_url and keys), so the two launches
differ in the campaign, the tier and the profile only: no endpoint variable at all. Both write
one inventory: the hosts in platform_hosts, the guests in platform_guests, each guest paired
with its host and every machine with its iperf3 peer, as experiments/platform.yaml reads them.
The instances' SSH is the loopback sshd of tests/support/moto.py (moto gives both clouds'
instances 127.0.0.4 and .5, and the sshd answers there), so `orchestrate plan` really gathers
facts from all four machines.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from socketlab.cloud import inventory
from socketlab.errors import CloudError
from socketlab.inventory import load_inventory
from tests.support.moto import aws_client, loopback_sshd, moto_server, planted_env, run_logged

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
REGION = "us-east-1"
KEYS = {
    "aws": ("AKIASOCKETLABAWS0001", "aws-profile-key"),
    "spinifex": ("AKIASOCKETLABSPX0001", "spinifex-profile-key"),
}

pytestmark = pytest.mark.skipif(not (BIN / "moto_server").exists(), reason="moto[server] missing")


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("guests")


@pytest.fixture(scope="module")
def clouds(work):
    """name -> moto server: "aws" for the hosts, "spinifex" for the guests."""
    (work / "aws").mkdir()
    (work / "spinifex").mkdir()
    with moto_server(work / "aws") as aws, moto_server(work / "spinifex") as spx:
        yield {"aws": aws, "spinifex": spx}


@pytest.fixture(scope="module")
def sshd(work):
    with loopback_sshd(work / "sshd", ["127.0.0.4", "127.0.0.5"]) as server:
        yield server


@pytest.fixture(scope="module")
def env(work, clouds) -> dict[str, str]:
    config = work / "aws-config"
    config.write_text(
        "".join(
            f"[profile {name}]\nregion = {REGION}\nendpoint_url = {clouds[name].url}\n"
            f"aws_access_key_id = {KEYS[name][0]}\naws_secret_access_key = {KEYS[name][1]}\n"
            for name in ("aws", "spinifex")
        )
    )
    # No key in the environment: each launch signs with its profile's keys, as a swap would.
    base = planted_env(work, "unused", "unused")
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        base.pop(key)
    return {
        **base,
        "AWS_CONFIG_FILE": str(config),
        "SOCKETLAB_RESULTS": str(work / "results"),
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_LOCAL_TEMP": str(work / "ansible-tmp"),
        "ANSIBLE_SSH_ARGS": "-C -o ControlMaster=no",
    }


def ec2_of(clouds, name: str):
    return aws_client("ec2", clouds[name].url, *KEYS[name], REGION)


def live(ec2, campaign: str) -> list[str]:
    out = ec2.describe_instances(
        Filters=[
            {"Name": "tag:socketlab:campaign", "Values": [campaign]},
            {
                "Name": "instance-state-name",
                "Values": ["pending", "running", "stopping", "stopped"],
            },
        ]
    )
    return sorted(i["InstanceId"] for r in out["Reservations"] for i in r["Instances"])


def ever(ec2, campaign: str) -> int:
    out = ec2.describe_instances(Filters=[{"Name": "tag:socketlab:campaign", "Values": [campaign]}])
    return sum(len(r["Instances"]) for r in out["Reservations"])


def common(work: Path, sshd) -> dict[str, str]:
    """Everything both launches share (the region comes from the profile)."""
    return {
        "owner": "tester",
        "count": "2",
        "hours": "2",
        "max_instance_hours": "4",
        "create_network": "true",
        "vpc_cidr": "127.0.0.0/16",
        "subnet_cidr": "127.0.0.0/24",
        "create_security_group": "true",
        "ssh_cidr": "127.0.0.0/8",
        "ssh_private_key_file": str(sshd.key_file),
        "ssh_user": "root",
        "ssh_port": str(sshd.port),
        "ssh_address": "private",
        "ssh_timeout_s": "20",
        "poll_s": "0.5",
        "remote_python": "/usr/bin/python3",
    }


def playbook(work, env, name: str, inv: Path, **settings: str):
    argv = [
        str(BIN / "ansible-playbook"),
        f"playbooks/{name}",
        "-e",
        f"socketlab_inventory_file={inv}",
    ]
    for k, v in settings.items():
        argv += ["-e", f"socketlab_ec2_{k}={v}"]
    return run_logged(work, env, argv)


def launch(work, env, sshd, inv: Path, campaign: str, tier: str, profile: str):
    return playbook(
        work,
        env,
        "provision.yml",
        inv,
        campaign=campaign,
        tier=tier,
        aws_profile=profile,
        **common(work, sshd),
    )


def test_hosts_on_one_cloud_guests_on_another_one_inventory(work, env, clouds, sshd):
    aws, spx = ec2_of(clouds, "aws"), ec2_of(clouds, "spinifex")
    inv = work / "inventory" / "platform.yml"
    hosts = launch(work, env, sshd, inv, "plat-hosts", "host", "aws")
    assert hosts.returncode == 0, hosts.stdout + hosts.stderr
    guests = launch(work, env, sshd, inv, "plat-guests", "guest", "spinifex")
    assert guests.returncode == 0, guests.stdout + guests.stderr
    host_ids, guest_ids = live(aws, "plat-hosts"), live(spx, "plat-guests")
    assert len(host_ids) == 2 and len(guest_ids) == 2
    assert ever(spx, "plat-hosts") == 0 and ever(aws, "plat-guests") == 0  # each on its cloud

    # One inventory, read as orchestrate reads it (ansible-inventory): tiers, pairs, peers.
    machines = {h.name: h for h in load_inventory(inv)}
    tier = {
        n: (
            "host"
            if "platform_hosts" in h.groups
            else "guest"
            if "platform_guests" in h.groups
            else None
        )
        for n, h in machines.items()
    }
    assert tier == {
        "socketlab-plat-hosts-0": "host",
        "socketlab-plat-hosts-1": "host",
        "socketlab-plat-guests-0": "guest",
        "socketlab-plat-guests-1": "guest",
    }
    v = {n: h.vars for n, h in machines.items()}
    assert sorted(v[n]["ec2_instance_id"] for n in v if tier[n] == "host") == host_ids
    assert sorted(v[n]["ec2_instance_id"] for n in v if tier[n] == "guest") == guest_ids
    assert all(v[n]["socketlab_tier"] == tier[n] for n in v)
    for i in (0, 1):
        guest = v[f"socketlab-plat-guests-{i}"]
        assert guest["socketlab_host"] == f"socketlab-plat-hosts-{i}"
        assert guest["socketlab_peer"] == f"socketlab-plat-guests-{1 - i}"
        assert v[f"socketlab-plat-hosts-{i}"]["socketlab_peer"] == f"socketlab-plat-hosts-{1 - i}"
        assert "socketlab_host" not in v[f"socketlab-plat-hosts-{i}"]
    # the S3 endpoint is each cloud's own, resolved from the profile alone
    assert {v[n]["socketlab_s3_endpoint"] for n in v if tier[n] == "host"} == {clouds["aws"].url}
    assert {v[n]["socketlab_s3_endpoint"] for n in v if tier[n] == "guest"} == {
        clouds["spinifex"].url
    }
    assert {v[n]["ec2_profile"] for n in v} == {"aws", "spinifex"}

    # Re-provisioning either launches nothing and leaves the inventory as it was.
    before = inv.read_text()
    for campaign, tier_name, profile in (
        ("plat-hosts", "host", "aws"),
        ("plat-guests", "guest", "spinifex"),
    ):
        again = launch(work, env, sshd, inv, campaign, tier_name, profile)
        assert again.returncode == 0, again.stdout + again.stderr
        assert "launched 0," in again.stdout and "changed=0" in again.stdout, again.stdout
    assert inv.read_text() == before
    assert live(aws, "plat-hosts") == host_ids and live(spx, "plat-guests") == guest_ids
    assert ever(aws, "plat-hosts") == 2 and ever(spx, "plat-guests") == 2

    # The platform spec plans over that inventory (facts gathered over SSH from all four).
    plan = run_logged(
        work,
        env,
        [
            str(BIN / "orchestrate"),
            "plan",
            "experiments/platform.yaml",
            "--inventory",
            str(inv),
            "--profile",
            "quick",
            "--json",
        ],
    )
    assert plan.returncode == 0, plan.stdout[-2000:] + plan.stderr[-2000:]
    points = json.loads(plan.stdout)["points"]
    assert {p["host"] for p in points} == set(machines)
    pairs = {p["host"]: p["extra"]["together"] for p in points if p["experiment"] == "iperf3"}
    assert pairs == {
        **dict.fromkeys(
            ["socketlab-plat-hosts-0", "socketlab-plat-hosts-1"],
            "iperf3-socketlab-plat-hosts-0+socketlab-plat-hosts-1",
        ),
        **dict.fromkeys(
            ["socketlab-plat-guests-0", "socketlab-plat-guests-1"],
            "iperf3-socketlab-plat-guests-0+socketlab-plat-guests-1",
        ),
    }
    s3 = {p["host"]: p["extra"]["together"] for p in points if p["experiment"] == "s3"}
    assert s3 == {n: f"s3-{tier[n]}" for n in machines}
    for p in points:
        if p["experiment"] == "s3":
            assert clouds["aws" if tier[p["host"]] == "host" else "spinifex"].url in p["argv"]

    # A guest teardown with the hosts' profile is refused before it terminates anything.
    wrong = playbook(work, env, "teardown.yml", inv, campaign="plat-guests", aws_profile="aws")
    assert wrong.returncode != 0 and "campaign plat-guests there was launched on" in wrong.stdout
    assert live(spx, "plat-guests") == guest_ids and inv.read_text() == before

    # Tearing down the guests leaves the hosts, running and in the inventory.
    td = playbook(
        work, env, "teardown.yml", inv, campaign="plat-guests", aws_profile="spinifex", poll_s="0.5"
    )
    assert td.returncode == 0, td.stdout + td.stderr
    assert live(spx, "plat-guests") == [] and live(aws, "plat-hosts") == host_ids
    left = {h.name: h for h in load_inventory(inv)}
    assert sorted(left) == ["socketlab-plat-hosts-0", "socketlab-plat-hosts-1"]
    assert all(h.vars == v[n] for n, h in left.items())
    assert "platform_guests" not in inv.read_text()
    assert not inventory.known_hosts_path(inv, "plat-guests").exists()
    td = playbook(
        work, env, "teardown.yml", inv, campaign="plat-hosts", aws_profile="aws", poll_s="0.5"
    )
    assert td.returncode == 0, td.stdout + td.stderr
    assert live(aws, "plat-hosts") == [] and not inv.exists()


def test_guests_need_hosts_and_their_own_campaign_refused_before_launch(work, env, clouds, sshd):
    spx = ec2_of(clouds, "spinifex")
    alone = work / "inventory" / "alone.yml"
    p = launch(work, env, sshd, alone, "lonely", "guest", "spinifex")
    assert p.returncode != 0
    assert "holds no host-tier machines to pair the guests with" in p.stdout, p.stdout
    assert ever(spx, "lonely") == 0 and not alone.exists()
    # The guests under the hosts' campaign name would collide with them: refused, nothing made.
    inv = work / "inventory" / "same.yml"
    hosts = launch(work, env, sshd, inv, "same", "host", "aws")
    assert hosts.returncode == 0, hosts.stdout + hosts.stderr
    p = launch(work, env, sshd, inv, "same", "guest", "spinifex")
    assert p.returncode != 0 and "campaign same there was launched on" in p.stdout, p.stdout
    assert ever(spx, "same") == 0
    bad = playbook(
        work,
        env,
        "provision.yml",
        inv,
        campaign="same",
        tier="vm",
        aws_profile="aws",
        **common(work, sshd),
    )
    assert bad.returncode != 0 and "value of socketlab_ec2_tier must be one of" in bad.stdout, (
        bad.stdout
    )
    td = playbook(work, env, "teardown.yml", inv, campaign="same", aws_profile="aws")
    assert td.returncode == 0 and not inv.exists(), td.stdout


def _host(name: str) -> dict:
    return {
        "name": name,
        "instance_id": f"i-{name}",
        "instance_type": "t",
        "address": "192.0.2.1",
        "public_ip": "192.0.2.1",
        "private_ip": "10.0.0.9",
        "port": 22,
        "user": "ec2-user",
        "key_file": None,
        "expires_at": "x",
        "availability_zone": "z",
    }


def test_pairing_rules():
    names = [f"g-{i}" for i in range(5)]
    paired = inventory.pair(names, "guest", ["h-0", "h-1"])
    assert [paired[n].get("socketlab_peer") for n in names] == ["g-1", "g-0", "g-3", "g-2", None]
    assert [paired[n]["socketlab_host"] for n in names] == ["h-0", "h-1", "h-0", "h-1", "h-0"]
    with pytest.raises(CloudError, match="no host-tier machine"):
        inventory.pair(names, "guest", [])
    assert "socketlab_host" not in inventory.pair(["h-0"], "host", [])["h-0"]
    # name order is numeric: the 10th instance comes after the 2nd
    assert sorted(["x-10", "x-2", "x-1"], key=inventory.natural) == ["x-1", "x-2", "x-10"]
    # the fabric address is the private one, not the public SSH address
    text = inventory.render(
        "c",
        [_host("socketlab-c-0")],
        {"region": "r"},
        Path("/k"),
        platform=inventory.Platform("host", "https://s3.example"),
    )
    entry = yaml.safe_load(text)["all"]["children"]["socketlab_cloud"]["children"]["campaign_c"]
    assert entry["hosts"]["socketlab-c-0"]["socketlab_fabric_address"] == "10.0.0.9"
    for bad, msg in (
        ({"tier": "vm"}, "expected host or guest"),
        ({"tier": "host", "s3_endpoint": "s3.example"}, "expected a URL"),
        ({"s3_profile": "p"}, "need socketlab_ec2_tier"),
    ):
        with pytest.raises(CloudError, match=msg):
            inventory.platform_from_args(dict(bad))
