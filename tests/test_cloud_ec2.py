"""provision.yml / teardown.yml / site.yml and `orchestrate cloud` against moto's real server.

Everything goes over HTTP through boto3 as it would to AWS: ansible-playbook runs the action
plugins, which call socketlab.cloud, which talks to moto_server on a localhost port. The
instances' SSH is a real sshd on the loopback addresses moto gives them (tests/support/moto.py).
A fake secret is planted in AWS_SECRET_ACCESS_KEY for every command and must never be written.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from socketlab.cloud.ec2 import lookup_ami
from socketlab.cloud.plan import DEFAULT_AMI_NAME, LaunchSettings
from tests.support.moto import (
    aws_client,
    cloud_fixtures,
    files_containing,
    loopback_sshd,
    planted_env,
    run_logged,
)

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SECRET = f"planted-secret-{uuid.uuid4().hex}"
REGION = "us-east-1"
#: moto hands out private IPs from .4 on; a few per campaign network is plenty here.
LOOPBACK = [f"127.0.0.{i}" for i in range(4, 12)]

pytestmark = pytest.mark.skipif(not (BIN / "moto_server").exists(), reason="moto[server] missing")


work, moto, sshd = cloud_fixtures("cloud", LOOPBACK)


@pytest.fixture(scope="module")
def env(work, moto) -> dict[str, str]:
    return planted_env(
        work,
        "AKIASOCKETLABTEST0001",
        SECRET,
        SOCKETLAB_RESULTS=str(work / "results"),
        ANSIBLE_LOG_PATH=str(work / "ansible.log"),
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_LOCAL_TEMP=str(work / "ansible-tmp"),
        # No ControlPersist ssh masters left behind by the ping (we could not stop them by PID).
        ANSIBLE_SSH_ARGS="-C -o ControlMaster=no",
        PATH=f"{BIN}:{os.environ.get('PATH', '')}",
    )


@pytest.fixture(scope="module")
def ec2(moto):
    return aws_client("ec2", moto.url, "AKIASOCKETLABTEST0001", SECRET, REGION)


#: The ec2 roles' settings, passed as socketlab_ec2_<name> (roles/ec2_*/meta/argument_specs.yml).
EC2_VARS = set(LaunchSettings.__dataclass_fields__) | {
    "aws_region",
    "aws_profile",
    "aws_endpoint_url",
    "teardown_timeout_s",
}


def ec2_var(name: str) -> str:
    return f"socketlab_ec2_{name}" if name in EC2_VARS else name


def playbook(work, env, name: str, moto, **extra) -> subprocess.CompletedProcess:
    argv = [
        str(BIN / "ansible-playbook"),
        f"playbooks/{name}",
        "-e",
        f"socketlab_ec2_aws_region={REGION}",
        "-e",
        f"socketlab_ec2_aws_endpoint_url={moto.url}",
    ]
    for k, v in extra.items():
        argv += ["-e", f"{ec2_var(k)}={v}"]
    return run_logged(work, env, argv)


def teardown(work, env, moto, campaign: str, inventory: str | None = None, **extra):
    if inventory:
        extra["socketlab_inventory_file"] = inventory
    return playbook(work, env, "teardown.yml", moto, campaign=campaign, **extra)


def orchestrate(work, env, moto, *args: str) -> subprocess.CompletedProcess:
    # The endpoint comes from the environment here, the way a profile swap would give it.
    return run_logged(
        work,
        {**env, "AWS_ENDPOINT_URL": moto.url, "AWS_REGION": REGION},
        [str(BIN / "orchestrate"), *args],
    )


def live(ec2, campaign: str) -> list[dict]:
    out = ec2.describe_instances(
        Filters=[
            {"Name": "tag:socketlab:campaign", "Values": [campaign]},
            {
                "Name": "instance-state-name",
                "Values": ["pending", "running", "stopping", "stopped"],
            },
        ]
    )
    return [i for r in out["Reservations"] for i in r["Instances"]]


def ever(ec2, campaign: str) -> list[dict]:
    out = ec2.describe_instances(Filters=[{"Name": "tag:socketlab:campaign", "Values": [campaign]}])
    return [i for r in out["Reservations"] for i in r["Instances"]]


def minimal_spec(campaign: str) -> str:
    """A spec that loads (site.yml estimates it before provisioning when `run` is a step)."""
    return yaml.safe_dump(
        {
            "schema_version": 1,
            "campaign": campaign,
            "experiments": [
                {
                    "name": "noop",
                    "command": ["/usr/bin/python3", "-c", "pass"],
                    "metrics": {"parser": "jsonl"},
                }
            ],
        }
    )


def launch_vars(work: Path, sshd, campaign: str, **over) -> dict:
    v = {
        "campaign": campaign,
        "owner": "tester",
        "count": 2,
        "hours": 3,
        "max_instance_hours": 6,
        "create_network": "true",
        "vpc_cidr": "127.0.0.0/16",
        "subnet_cidr": "127.0.0.0/24",
        "create_security_group": "true",
        "ssh_cidr": "127.0.0.0/8",
        "key_name": f"kp-{campaign}",
        "public_key_file": f"{sshd.key_file}.pub",
        "ssh_private_key_file": str(sshd.key_file),
        "ssh_user": "root",
        "ssh_port": sshd.port,
        "ssh_address": "private",
        "ssh_timeout_s": 20,
        "poll_s": 0.5,
        "root_volume_gb": 64,
        # Not `inventory_file`: that is Ansible's magic variable (the inventory in use).
        "socketlab_inventory_file": str(work / "inventory" / f"{campaign}.yml"),
    }
    v.update(over)
    return v


def test_provision_inventory_rerun_list_teardown(work, env, moto, sshd, ec2):
    campaign = "alpha"
    v = launch_vars(work, sshd, campaign)
    p = playbook(work, env, "provision.yml", moto, **v)
    assert p.returncode == 0, p.stdout + p.stderr
    insts = live(ec2, campaign)
    assert len(insts) == 2
    tags = [{t["Key"]: t["Value"] for t in i["Tags"]} for i in insts]
    now = datetime.now(UTC)
    for t, inst in zip(tags, insts, strict=True):
        assert t["socketlab:campaign"] == campaign and t["socketlab:owner"] == "tester"
        expires = datetime.fromisoformat(t["socketlab:expires-at"].replace("Z", "+00:00"))
        assert timedelta(hours=2.9) < expires - now <= timedelta(hours=3)
        assert inst["InstanceType"] == "c8i.metal-48xl"
        assert inst["ImageId"] == lookup_ami(ec2, DEFAULT_AMI_NAME, "amazon")
        assert inst["KeyName"] == f"kp-{campaign}"
        vol = inst["BlockDeviceMappings"][0]["Ebs"]["VolumeId"]
        assert ec2.describe_volumes(VolumeIds=[vol])["Volumes"][0]["Size"] == 64
    # The security group lets SSH in from the given CIDR only.
    groups = {g["GroupId"] for i in insts for g in i["SecurityGroups"]}
    assert len(groups) == 1
    sg = ec2.describe_security_groups(GroupIds=list(groups))["SecurityGroups"][0]
    assert [(r["FromPort"], [x["CidrIp"] for x in r["IpRanges"]]) for r in sg["IpPermissions"]] == [
        (sshd.port, ["127.0.0.0/8"])
    ]

    # The inventory holds the hosts, reachable for real with the given key.
    inv_path = Path(v["socketlab_inventory_file"])
    inv = yaml.safe_load(inv_path.read_text())
    hosts = inv["all"]["children"]["socketlab_cloud"]["children"]["campaign_alpha"]["hosts"]
    assert sorted(h["ec2_instance_id"] for h in hosts.values()) == sorted(
        i["InstanceId"] for i in insts
    )
    assert sorted(h["ansible_host"] for h in hosts.values()) == sorted(
        i["PrivateIpAddress"] for i in insts
    )
    assert all(h["ansible_port"] == sshd.port for h in hosts.values())
    ping = run_logged(
        work,
        env,
        [str(BIN / "ansible"), "-i", str(inv_path), "campaign_alpha", "-m", "ansible.builtin.ping"],
    )
    assert ping.returncode == 0 and ping.stdout.count("SUCCESS") == 2, ping.stdout + ping.stderr

    # Idempotent: a second run launches nothing and keeps the same instances.
    before = inv_path.read_text()
    again = playbook(work, env, "provision.yml", moto, **v)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "launched 0," in again.stdout and "changed=0" in again.stdout
    assert sorted(i["InstanceId"] for i in live(ec2, campaign)) == sorted(
        i["InstanceId"] for i in insts
    )
    assert len(ever(ec2, campaign)) == 2
    assert inv_path.read_text() == before

    # `orchestrate cloud list`: age and a cost only from the given price.
    ls = orchestrate(
        work, env, moto, "cloud", "list", "--campaign", campaign, "--json", "--price-per-hour", "10"
    )
    assert ls.returncode == 0, ls.stderr
    rows = [yaml.safe_load(line) for line in ls.stdout.splitlines()]
    assert sorted(r["instance_id"] for r in rows) == sorted(i["InstanceId"] for i in insts)
    for r in rows:
        assert 0 <= r["age_hours"] < 0.5 and r["estimated_cost"] == round(r["age_hours"] * 10, 2)
        assert r["expired"] is False
    table = orchestrate(work, env, moto, "cloud", "list", "--campaign", campaign)
    assert "n/a" in table.stdout and "--price-per-hour" in table.stdout

    # Teardown terminates and deletes what provision created; a second teardown does nothing.
    td = teardown(work, env, moto, campaign, v["socketlab_inventory_file"], poll_s=0.5)
    assert td.returncode == 0, td.stdout + td.stderr
    assert live(ec2, campaign) == []
    assert not inv_path.exists()
    assert (
        ec2.describe_security_groups(
            Filters=[{"Name": "tag:socketlab:campaign", "Values": [campaign]}]
        )["SecurityGroups"]
        == []
    )
    assert (
        ec2.describe_key_pairs(Filters=[{"Name": "key-name", "Values": [v["key_name"]]}])[
            "KeyPairs"
        ]
        == []
    )
    assert (
        ec2.describe_vpcs(Filters=[{"Name": "tag:socketlab:campaign", "Values": [campaign]}])[
            "Vpcs"
        ]
        == []
    )
    td2 = teardown(work, env, moto, campaign, v["socketlab_inventory_file"])
    assert td2.returncode == 0 and "changed=0" in td2.stdout, td2.stdout


def test_ssh_never_ready_leaves_nothing_running(work, env, moto, sshd, ec2):
    campaign = "nossh"
    # The real sshd's key, but port 1, where nothing listens on the instances' addresses.
    v = launch_vars(work, dataclasses.replace(sshd, port=1), campaign, ssh_timeout_s=2, count=1)
    p = playbook(work, env, "provision.yml", moto, **v)
    assert p.returncode != 0
    assert "SSH not ready within 2 s" in p.stdout and "terminated the 1 instance(s)" in p.stdout
    assert len(ever(ec2, campaign)) == 1  # it did launch ...
    assert live(ec2, campaign) == []  # ... and nothing is left running
    assert not Path(v["socketlab_inventory_file"]).exists()
    # Teardown with the default inventory path (the network it made). Regression: it once took
    # Ansible's magic `inventory_file` for its own and removed inventory/localhost.yml.
    default_inventory = REPO / "inventory" / "localhost.yml"
    before = default_inventory.read_bytes()
    td = teardown(work, env, moto, campaign)
    assert td.returncode == 0, td.stdout
    assert default_inventory.read_bytes() == before
    # A hand-made file at the inventory path is neither overwritten nor removed.
    mine = work / "hand-made.yml"
    mine.write_text("all:\n  hosts:\n    keep-me: {}\n")
    td = teardown(work, env, moto, campaign, str(mine))
    assert td.returncode != 0 and "refusing to remove it" in td.stdout
    assert mine.read_text().endswith("keep-me: {}\n")


def test_budget_over_max_instance_hours_launches_nothing(work, env, moto, sshd, ec2):
    campaign = "toodear"
    p = playbook(
        work,
        env,
        "provision.yml",
        moto,
        **launch_vars(work, sshd, campaign, count=3, hours=4, max_instance_hours=10),
    )
    assert p.returncode != 0
    assert "refusing to launch" in p.stdout
    assert "3 x 4 = 12 instance-hours exceeds max_instance_hours=10" in p.stdout
    assert ever(ec2, campaign) == []
    assert (
        ec2.describe_vpcs(Filters=[{"Name": "tag:socketlab:campaign", "Values": [campaign]}])[
            "Vpcs"
        ]
        == []
    )


def test_missing_settings_are_named(work, env, moto, sshd, ec2):
    v = launch_vars(work, sshd, "nocap")
    del v["max_instance_hours"]
    p = playbook(work, env, "provision.yml", moto, **v)
    assert p.returncode != 0 and "max_instance_hours is required" in p.stdout
    p = playbook(
        work, env, "provision.yml", moto, **launch_vars(work, sshd, "world", ssh_cidr="0.0.0.0/0")
    )
    assert p.returncode != 0 and "refusing to open SSH to the whole internet" in p.stdout
    p = playbook(
        work,
        env,
        "provision.yml",
        moto,
        **launch_vars(work, sshd, "badtype", instance_type="c8i.bogus"),
    )
    # refused by the zone-offering check, before anything is created
    assert (
        p.returncode != 0
        and "instance_type c8i.bogus: no availability zone of us-east-1 offers it" in p.stdout
    ), p.stdout
    assert ever(ec2, "badtype") == []


def test_reap_terminates_only_expired(work, env, moto, ec2):
    ami = lookup_ami(ec2, DEFAULT_AMI_NAME, "amazon")
    past = (datetime.now(UTC) - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    future = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")

    def launch(expires: str | None) -> str:
        tags = [{"Key": "socketlab:campaign", "Value": "reapme"}]
        if expires:
            tags.append({"Key": "socketlab:expires-at", "Value": expires})
        out = ec2.run_instances(
            ImageId=ami,
            InstanceType="c8i.metal-48xl",
            MinCount=1,
            MaxCount=1,
            TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
        )
        return out["Instances"][0]["InstanceId"]

    old, young, untagged = launch(past), launch(future), launch(None)
    # The dry run reaches moto through a profile alone, the "single profile swap" of an
    # AWS-compatible cloud: region, endpoint and (other, not planted) keys all come from it.
    config = work / "spinifex-config"
    config.write_text(
        f"[profile spinifex]\nregion = {REGION}\nendpoint_url = {moto.url}\n"
        "aws_access_key_id = AKIASPINIFEXPROFILE1\naws_secret_access_key = profile-key\n"
    )
    dry = run_logged(
        work,
        {**env, "AWS_CONFIG_FILE": str(config)},
        [str(BIN / "orchestrate"), "cloud", "reap", "--profile", "spinifex"]
        + ["--campaign", "reapme", "--dry-run", "--json"],
    )
    assert dry.returncode == 0, dry.stderr
    assert [yaml.safe_load(x)["instance_id"] for x in dry.stdout.splitlines()] == [old]
    assert {i["InstanceId"] for i in live(ec2, "reapme")} == {old, young, untagged}
    reap = orchestrate(work, env, moto, "cloud", "reap", "--campaign", "reapme")
    assert reap.returncode == 0 and "terminated 1 instance(s)" in reap.stdout, reap.stdout
    assert {i["InstanceId"] for i in live(ec2, "reapme")} == {young, untagged}
    again = orchestrate(work, env, moto, "cloud", "reap", "--campaign", "reapme")
    assert "no tagged instances past expires-at" in again.stdout
    ec2.terminate_instances(InstanceIds=[young, untagged])


def test_site_tears_down_when_a_step_fails(work, env, moto, ec2):
    # An sshd that lets nobody in: provisioning succeeds (SSH answers), the facts step after it
    # fails to log in, and the always: block must still terminate everything.
    campaign = "sitefail"
    spec = work / "spec.yaml"
    spec.write_text(minimal_spec("sitefail"))
    with loopback_sshd(work / "sshd-locked", LOOPBACK, authorize=False) as locked:
        v = launch_vars(work, locked, campaign, count=1, campaign_spec=str(spec))
        p = playbook(work, env, "site.yml", moto, **v)
    assert p.returncode != 0
    out = p.stdout
    assert "launched 1," in out
    # prep is the first step after provisioning, and fails to log in
    assert out.index("Install and check the") < out.index("Tear down the instances")
    assert "Gather host facts" not in out and "Isolate the sockets" not in out
    assert "terminated 1 instance(s)" in out
    assert len(ever(ec2, campaign)) == 1 and live(ec2, campaign) == []
    assert not Path(v["socketlab_inventory_file"]).exists()


def test_site_facts_step_on_the_new_hosts_then_teardown(work, env, moto, sshd, ec2):
    # Provision for real, gather facts over SSH from the new hosts (here: this machine through
    # the loopback sshd), then stop before isolation (which would change this machine) and
    # check the always: block tore everything down.
    campaign = "sitefacts"
    spec = work / "spec-facts.yaml"
    spec.write_text("campaign: sitefacts\n")
    v = launch_vars(work, sshd, campaign, count=1, campaign_spec=str(spec), steps="facts")
    p = playbook(work, env, "site.yml", moto, **v)
    assert p.returncode == 0, p.stdout + p.stderr
    facts = json.loads((work / "results" / campaign / "cloud-hosts.json").read_text())
    assert "socketlab-sitefacts-0" in json.dumps(facts)
    assert "Isolate the sockets" in p.stdout and "terminated 1 instance(s)" in p.stdout
    assert len(ever(ec2, campaign)) == 1 and live(ec2, campaign) == []


def test_site_keep_instances(work, env, moto, sshd, ec2):
    campaign = "sitekeep"
    v = launch_vars(
        work,
        sshd,
        campaign,
        count=1,
        keep_instances="true",
        campaign_spec=str(work / "missing.yaml"),
    )
    p = playbook(work, env, "site.yml", moto, **v)
    assert p.returncode != 0
    assert "needs -e socketlab_ec2_campaign=NAME and -e campaign_spec=FILE" in p.stdout
    assert ever(ec2, campaign) == []  # refused before paying for anything
    wrong = work / "spec-other.yaml"
    wrong.write_text("campaign: other\n")
    v["campaign_spec"] = str(wrong)
    p = playbook(work, env, "site.yml", moto, **v)
    assert p.returncode != 0 and "campaign=sitekeep but" in p.stdout
    assert (
        "campaign: other; pass -e socketlab_ec2_campaign equal to the spec's campaign id"
        in p.stdout
    )
    assert ever(ec2, campaign) == []  # a name mismatch is refused before paying too
    spec = work / "spec-keep.yaml"
    spec.write_text(minimal_spec("sitekeep"))
    v["campaign_spec"] = str(spec)
    v["ssh_private_key_file"] = str(work / "not-a-key")  # the facts step fails to log in
    p = playbook(work, env, "site.yml", moto, **v)
    assert p.returncode != 0 and "are still running" in p.stdout
    assert len(live(ec2, campaign)) == 1
    td = teardown(work, env, moto, campaign, v["socketlab_inventory_file"])
    assert td.returncode == 0 and live(ec2, campaign) == []


def test_site_refuses_bad_steps_and_specs_before_paying(work, env, moto, sshd, ec2):
    spec = work / "spec-refuse.yaml"
    spec.write_text(minimal_spec("refuse"))
    v = launch_vars(work, sshd, "refuse", count=1, campaign_spec=str(spec), steps="facts,runn")
    p = playbook(work, env, "site.yml", moto, **v)
    assert (
        p.returncode != 0
        and "steps=facts,runn: expected a comma-separated subset of "
        "prep,facts,isolate,verify,run,push"
        in p.stdout
    ), p.stdout
    # a spec that does not load is refused by the estimate, before provisioning
    spec.write_text("schema_version: 1\ncampaign: refuse\nexperiments: []\n")
    v["steps"] = "run"
    p = playbook(work, env, "site.yml", moto, **v)
    assert p.returncode != 0 and "Check the spec and estimate" in p.stdout
    assert "Provision the instances" not in p.stdout
    assert ever(ec2, "refuse") == []


# site.yml end to end (estimate, provision, prep, facts, isolate, verify, the campaign, push,
# teardown, then pull gives the same report, which says "verified") is in
# tests/test_site_pristine_e2e.py (on pristine hosts): it changes this machine's kernel knobs, so
# it holds the
# machine-wide knob lock and restores them.


def test_no_credential_written_anywhere(work, env, moto, sshd, ec2):
    # A full cycle with maximum verbosity, then grep every file this module's commands wrote
    # (ansible log, transcripts of stdout/stderr, inventories, results) and moto's own log.
    campaign = "secret"
    v = launch_vars(work, sshd, campaign, count=1)
    p = run_logged(
        work,
        env,
        [
            str(BIN / "ansible-playbook"),
            "-vvv",
            "playbooks/provision.yml",
            "-e",
            f"socketlab_ec2_aws_region={REGION}",
            "-e",
            f"socketlab_ec2_aws_endpoint_url={moto.url}",
        ]
        + [a for k, val in v.items() for a in ("-e", f"{ec2_var(k)}={val}")],
    )
    assert p.returncode == 0, p.stdout + p.stderr
    orchestrate(work, env, moto, "cloud", "list", "--price-per-hour", "1")
    td = teardown(work, env, moto, campaign, v["socketlab_inventory_file"])
    assert td.returncode == 0
    assert "socketlab-secret-0" in p.stdout and "terminated 1 instance(s)" in td.stdout
    assert (work / "ansible.log").exists() and (work / "transcript.txt").exists()
    assert (work / "moto_server.log").stat().st_size > 0
    assert files_containing(work, SECRET) == []
    # The check can fail: an Ansible run in the same environment that does print the key
    # (through its env lookup) leaves it in exactly the log and transcript the scan reads.
    control = work.parent / f"{work.name}-control"
    control.mkdir()
    shown = run_logged(
        control,
        {**env, "ANSIBLE_LOG_PATH": str(control / "ansible.log")},
        [
            str(BIN / "ansible"),
            "localhost",
            "-m",
            "ansible.builtin.debug",
            "-a",
            "msg={{ lookup('ansible.builtin.env', 'AWS_SECRET_ACCESS_KEY') }}",
        ],
    )
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert files_containing(control, SECRET) == [
        str(control / "ansible.log"),
        str(control / "transcript.txt"),
    ]
