"""Pure planning of socketlab.cloud: settings, the money guard, tags, ages/costs, inventory text."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from socketlab.cloud import inventory
from socketlab.cloud.plan import (
    TAG_CAMPAIGN,
    TAG_EXPIRES,
    TAG_OWNER,
    instance_row,
    plan_launch,
    settings_from_args,
)
from socketlab.cloud.s3store import digest, parse_s3_url
from socketlab.cloud.target import resolve_target
from socketlab.errors import CloudError

BASE = {"campaign": "oct", "owner": "me", "count": 2, "hours": 3, "max_instance_hours": 6}
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def test_guard_counts_every_instance_for_its_whole_life():
    s = settings_from_args({**BASE, "price_per_hour": "2.5"})
    plan = plan_launch(s, [])
    assert (plan.to_launch, plan.instance_hours, plan.estimated_cost) == (2, 6, 15.0)
    assert plan_launch(s, ["i-1"]).to_launch == 1
    assert plan_launch(s, ["i-1", "i-2", "i-3"]).to_launch == 0
    with pytest.raises(
        CloudError, match=r"2 x 3.5 = 7 instance-hours exceeds max_instance_hours=6"
    ):
        plan_launch(settings_from_args({**BASE, "hours": 3.5}), [])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"max_instance_hours": None}, "max_instance_hours is required"),
        ({"hours": None}, "hours is required"),
        ({"campaign": None}, "campaign is required"),
        ({"campaign": "a b"}, "campaign 'a b': expected letters"),
        ({"owner": None}, "owner is required"),
        ({"count": "two"}, "count: expected a whole number"),
        ({"count": 0}, "count: expected a positive value"),
        ({"create_security_group": "true"}, "ssh_cidr is required"),
        ({"create_security_group": True, "ssh_cidr": "::/0"}, "whole internet"),
        ({"create_security_group": True, "ssh_cidr": "1.2.3"}, "expected a CIDR"),
        ({"create_network": "maybe"}, "create_network: expected true or false"),
        ({"public_key_file": "/x.pub"}, "key_name is required"),
        ({"ssh_address": "ipv6"}, "ssh_address: expected auto, public or private"),
        ({"aws_secret_access_key": "x"}, "unknown setting(s) aws_secret_access_key"),
    ],
)
def test_bad_settings_name_the_field(change, message):
    args = {k: v for k, v in {**BASE, **change}.items() if v is not None}
    with pytest.raises(CloudError, match=message.replace("(", r"\(").replace(")", r"\)")):
        settings_from_args(args)


def test_tags_carry_campaign_owner_and_expiry():
    tags = settings_from_args({**BASE, "extra_tags": {"team": "perf"}}).tags(NOW)
    assert tags == {
        "team": "perf",
        TAG_CAMPAIGN: "oct",
        TAG_OWNER: "me",
        TAG_EXPIRES: "2026-11-29T15:00:00Z",
    }


def test_instance_row_age_cost_and_expiry():
    inst = {
        "InstanceId": "i-1",
        "InstanceType": "c8i.metal-48xl",
        "State": {"Name": "running"},
        "LaunchTime": NOW - timedelta(hours=2),
        "Tags": [
            {"Key": TAG_CAMPAIGN, "Value": "oct"},
            {"Key": TAG_EXPIRES, "Value": "2026-11-29T11:59:00Z"},
        ],
    }
    row = instance_row(inst, NOW, 3.0)
    assert (row.age_hours, row.estimated_cost, row.expired) == (2.0, 6.0, True)
    assert instance_row(inst, NOW, None).estimated_cost is None  # no price, no guess
    inst["Tags"][1]["Value"] = "garbage"
    assert instance_row(inst, NOW, None).expired is False  # unreadable expiry: never reaped


def test_endpoint_switch_from_arguments_or_environment(monkeypatch):
    for k in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(k, raising=False)
    with pytest.raises(CloudError, match="aws_region is not set"):
        resolve_target()
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    assert resolve_target().region == "eu-west-1"
    t = resolve_target("us-east-2", None, "http://spinifex.local:8443")
    assert (t.region, t.endpoint_url) == ("us-east-2", "http://spinifex.local:8443")
    with pytest.raises(CloudError, match="is not a URL"):
        resolve_target("us-east-1", None, "spinifex.local")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    client = resolve_target("us-east-1").client("s3")
    assert client.meta.endpoint_url == "http://127.0.0.1:1"


def test_inventory_text_has_hosts_and_no_key_material(tmp_path: Path):
    host = {
        "name": "socketlab-oct-0",
        "instance_id": "i-1",
        "instance_type": "c8i.metal-48xl",
        "address": "203.0.113.9",
        "public_ip": "203.0.113.9",
        "private_ip": "10.0.0.4",
        "port": 22,
        "user": "ec2-user",
        "key_file": "/home/me/.ssh/k.pem",
        "expires_at": "2026-11-29T15:00:00Z",
        "availability_zone": "us-east-1a",
    }
    text = inventory.render(
        "oct", [host], {"region": "us-east-1", "endpoint_url": None}, tmp_path / "oct.known_hosts"
    )
    doc = yaml.safe_load(text)
    group = doc["all"]["children"]["socketlab_cloud"]["children"]["campaign_oct"]
    h = group["hosts"]["socketlab-oct-0"]
    assert (h["ansible_host"], h["ansible_user"], h["ansible_become"]) == (
        "203.0.113.9",
        "ec2-user",
        True,
    )
    assert h["ansible_ssh_private_key_file"] == "/home/me/.ssh/k.pem"
    assert "StrictHostKeyChecking=accept-new" in h["ansible_ssh_common_args"]
    path = tmp_path / "oct.yml"
    assert inventory.write(path, text) is True and inventory.write(path, text) is False
    assert inventory.remove(path) is True and inventory.remove(path) is False


def test_s3_url_and_digest():
    assert parse_s3_url("s3://b/x/y/", "push") == ("b", "x/y")
    assert parse_s3_url("s3://b", "push") == ("b", "")
    with pytest.raises(CloudError, match="expected s3://bucket/prefix"):
        parse_s3_url("/tmp/x", "push")
    m = [
        {"run_key": "k", "name": "bw", "unit": "GB/s", "dims": "{}", "parser": "", "value": 1.0},
        {"run_key": "k", "name": "lat", "unit": "ns", "dims": "{}", "parser": "", "value": 2.0},
    ]
    assert digest([{}], m) == digest([{}], m[::-1])  # order does not matter
    changed = [dict(m[0], value=1.0000001), m[1]]
    assert digest([{}], m)["metrics_sha256"] != digest([{}], changed)["metrics_sha256"]


def test_inventory_never_replaces_a_hand_made_file(tmp_path: Path):
    mine = tmp_path / "hosts.yml"
    mine.write_text("all: {}\n")
    with pytest.raises(CloudError, match="refusing to overwrite"):
        inventory.write(mine, "# Generated by playbooks/provision.yml for campaign x\n")
    with pytest.raises(CloudError, match="refusing to remove"):
        inventory.remove(mine)
    assert mine.read_text() == "all: {}\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["cloud", "list"], "orchestrate cloud: aws_region is not set"),
        (["cloud", "list", "--region", "us east"], "aws_region 'us east': expected a region name"),
        (["cloud", "list", "--profile", "nope"], "aws_profile 'nope': no such profile in "),
        # Pages are fetched lazily: the failure comes while iterating, and must still be a line.
        (["cloud", "reap", "--region", "us-east-1"], "describe_instances failed: Unable to locate"),
        (
            ["pull", "s3://b/p", "--region", "us-east-1"],
            "listing s3://b/p failed: Unable to locate",
        ),
    ],
)
def test_cli_errors_are_one_line(monkeypatch, capsys, tmp_path: Path, argv, message):
    from socketlab.cli import main

    for k in list(os.environ):
        if k.startswith("AWS_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    # Nothing listens there; no credentials means no request is even sent.
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"orchestrate: error: {message}") and err.count("\n") == 1, err
