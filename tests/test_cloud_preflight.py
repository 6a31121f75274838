"""What provision checks before it pays: zone offerings, the vCPU quota, the inventory path,
the image's kernel family and root device, and the capacity-error message.

Against moto's server over HTTP where moto has the API (instance type offerings, images,
subnets); the Service Quotas answer for EC2 (moto only knows VPC quotas) and the
InsufficientInstanceCapacity error (moto never runs out) are recorded AWS responses, fed to the
same code through botocore's Stubber or as the error object botocore raises.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from socketlab.cloud import ec2 as cloud_ec2
from socketlab.cloud.plan import DEFAULT_AMI_NAME, settings_from_args
from socketlab.cloud.preflight import (
    STANDARD_VCPU_QUOTA,
    capacity_message,
    check_inventory_path,
    check_vcpu_quota,
    choose_zone,
    error_code,
)
from socketlab.cloud.target import CloudTarget
from socketlab.errors import CloudError
from tests.support.moto import aws_client, cloud_fixtures
from tests.test_cloud_ec2 import BIN, LOOPBACK, REGION, ever, launch_vars, live, playbook

KEY_ID, SECRET = "AKIASOCKETLABTEST0002", "preflight-test-secret"
#: GetServiceQuota for L-1216C47A as AWS answers a new account (recorded shape, value 96)
QUOTA_RESPONSE = {
    "Quota": {
        "ServiceCode": "ec2",
        "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
        "QuotaArn": f"arn:aws:servicequotas:us-east-1:123456789012:ec2/{STANDARD_VCPU_QUOTA}",
        "QuotaCode": STANDARD_VCPU_QUOTA,
        "QuotaName": "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances",
        "Value": 96.0,
        "Unit": "None",
        "Adjustable": True,
        "GlobalQuota": False,
    }
}
#: RunInstances' error body when AWS is out of the type in a zone (recorded shape)
CAPACITY_ERROR = {
    "Error": {
        "Code": "InsufficientInstanceCapacity",
        "Message": (
            "We currently do not have sufficient c8i.metal-48xl capacity in the Availability Zone "
            "you requested (us-east-1a). Our system will be working on provisioning additional "
            "capacity."
        ),
    },
    "ResponseMetadata": {"HTTPStatusCode": 500},
}

pytestmark = pytest.mark.skipif(not (BIN / "moto_server").exists(), reason="moto[server] missing")


work, moto, sshd = cloud_fixtures("preflight", LOOPBACK)


@pytest.fixture(scope="module")
def env(work, moto) -> dict[str, str]:
    repo = Path(__file__).resolve().parents[1]
    return {
        **os.environ,
        "AWS_ACCESS_KEY_ID": KEY_ID,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "SOCKETLAB_RESULTS": str(work / "results"),
        "ANSIBLE_CONFIG": str(repo / "ansible.cfg"),
        "ANSIBLE_LOCAL_TEMP": str(work / "ansible-tmp"),
        "ANSIBLE_SSH_ARGS": "-C -o ControlMaster=no",
        "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
    }


@pytest.fixture(scope="module")
def ec2(moto):
    return aws_client("ec2", moto.url, KEY_ID, SECRET, REGION)


def vpcs_of(ec2, campaign: str) -> list:
    flt = [{"Name": "tag:socketlab:campaign", "Values": [campaign]}]
    return ec2.describe_vpcs(Filters=flt)["Vpcs"]


# ------------------------------------------------------------------ pure decisions
def test_zone_choice():
    offered = ["us-east-1b", "us-east-1a"]
    assert choose_zone(offered, None, "c8i.metal-48xl", REGION) == "us-east-1a"
    assert choose_zone(offered, "us-east-1b", "c8i.metal-48xl", REGION) == "us-east-1b"
    with pytest.raises(
        CloudError,
        match=r"availability_zone us-east-1e: does not offer "
        r"c8i.metal-48xl; zones of us-east-1 that do: "
        r"us-east-1a, us-east-1b",
    ):
        choose_zone(offered, "us-east-1e", "c8i.metal-48xl", REGION)


def test_vcpu_quota_against_a_recorded_new_account_answer():
    quota = QUOTA_RESPONSE["Quota"]["Value"]
    check_vcpu_quota(quota, 48, 2, 0, "c8i.12xlarge", REGION)  # 96 of 96: fits
    with pytest.raises(CloudError) as err:
        check_vcpu_quota(quota, 192, 1, 0, "c8i.metal-48xl", REGION)
    msg = str(err.value)
    assert "\n" not in msg and "is 96; 1 x c8i.metal-48xl needs 192 vCPUs" in msg
    assert "--quota-code L-1216C47A --desired-value 192" in msg
    with pytest.raises(CloudError, match="needs 192 vCPUs plus 8 in use; request 200"):
        check_vcpu_quota(199.0, 192, 1, 8, "c8i.metal-48xl", REGION)


def test_capacity_error_is_one_line_with_the_next_zone():
    import botocore.exceptions

    exc = botocore.exceptions.ClientError(CAPACITY_ERROR, "RunInstances")
    assert error_code(exc) == "InsufficientInstanceCapacity"
    msg = capacity_message(
        error_code(exc), "c8i.metal-48xl", "us-east-1a", ("us-east-1a", "us-east-1b", "us-east-1c")
    )
    assert msg == (
        "provision: no c8i.metal-48xl capacity in us-east-1a now "
        "(InsufficientInstanceCapacity); try another zone (-e socketlab_ec2_availability_zone="
        "us-east-1b; offering: us-east-1b, us-east-1c); nothing is left running"
    )


def test_inventory_path_checks(tmp_path):
    check_inventory_path(tmp_path / "new" / "deeper" / "c.yml")  # made on write
    with pytest.raises(CloudError, match=r"expected a \.yml or \.yaml file"):
        check_inventory_path(tmp_path / "c.txt")
    (tmp_path / "d.yml").mkdir()
    with pytest.raises(CloudError, match="is a directory"):
        check_inventory_path(tmp_path / "d.yml")
    (tmp_path / "file").write_text("x")
    with pytest.raises(CloudError, match="is not a writable directory"):
        check_inventory_path(tmp_path / "file" / "c.yml")


def test_default_image_is_one_kernel_family(ec2):
    image = cloud_ec2.newest_image(ec2, DEFAULT_AMI_NAME, "amazon")
    assert image["Name"].endswith("-kernel-6.18-x86_64"), image["Name"]
    assert cloud_ec2.root_device_of(ec2, image["ImageId"]) == image["RootDeviceName"]


# ------------------------------------------------------------------ provision.yml refuses
def test_unoffered_zone_is_refused_before_anything_is_made(work, env, moto, sshd, ec2):
    v = launch_vars(work, sshd, "nozone", count=1, availability_zone="us-east-1e")
    p = playbook(work, env, "provision.yml", moto, **v)
    assert p.returncode != 0
    assert (
        "availability_zone us-east-1e: does not offer c8i.metal-48xl; zones of us-east-1 "
        "that do: us-east-1a, us-east-1b, us-east-1c, us-east-1d, us-east-1f"
    ) in p.stdout
    assert ever(ec2, "nozone") == [] and vpcs_of(ec2, "nozone") == []


def test_bad_inventory_path_is_refused_before_launch(work, env, moto, sshd, ec2):
    (work / "inv-dir.yml").mkdir()
    v = launch_vars(
        work, sshd, "badinv", count=1, socketlab_inventory_file=str(work / "inv-dir.yml")
    )
    p = playbook(work, env, "provision.yml", moto, **v)
    assert (
        p.returncode != 0
        and f"socketlab_inventory_file {work / 'inv-dir.yml'}: is a directory" in p.stdout
    ), p.stdout
    assert ever(ec2, "badinv") == [] and vpcs_of(ec2, "badinv") == []


def test_zone_is_used_and_quota_unchecked_is_said(work, env, moto, sshd, ec2):
    v = launch_vars(work, sshd, "zoned", count=1, availability_zone="us-east-1b")
    p = playbook(work, env, "provision.yml", moto, **v)
    try:
        assert p.returncode == 0, p.stdout + p.stderr
        (inst,) = live(ec2, "zoned")
        assert inst["Placement"]["AvailabilityZone"] == "us-east-1b"
        # moto has no EC2 quotas: provision says it did not check, and goes on
        assert "vCPU quota not checked (service-quotas: NoSuchResource" in p.stdout
    finally:
        down = playbook(
            work,
            env,
            "teardown.yml",
            moto,
            campaign="zoned",
            socketlab_inventory_file=v["socketlab_inventory_file"],
        )
    assert down.returncode == 0 and live(ec2, "zoned") == []


class QuotaTarget(CloudTarget):
    """moto for EC2; Service Quotas answers with the recorded new-account quota."""

    def client(self, service: str):
        if service != "service-quotas":
            return super().client(service)
        from botocore.stub import Stubber

        quotas = aws_client("service-quotas", self.endpoint_url, KEY_ID, SECRET, REGION)
        stub = Stubber(quotas)
        stub.add_response(
            "get_service_quota",
            QUOTA_RESPONSE,
            {"ServiceCode": "ec2", "QuotaCode": STANDARD_VCPU_QUOTA},
        )
        stub.activate()
        return quotas


def test_quota_below_count_times_192_is_refused_before_launch(work, moto, sshd, ec2, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    v = launch_vars(work, sshd, "quota", count=1)
    v.pop("socketlab_inventory_file")
    settings = settings_from_args(v)
    target = QuotaTarget(region=REGION, endpoint_url=moto.url)
    with pytest.raises(CloudError) as err:
        cloud_ec2.provision(target, settings, key_dir=work / "keys")
    assert (
        "vCPU quota L-1216C47A (On-Demand Standard instances) in us-east-1 is 96; "
        "1 x c8i.metal-48xl needs 192 vCPUs" in str(err.value)
    )
    assert ever(ec2, "quota") == [] and vpcs_of(ec2, "quota") == []


def test_reap_also_deletes_what_provision_made_once_no_instance_uses_it(work, env, moto, sshd, ec2):
    import time

    v = launch_vars(work, sshd, "reaped", count=1, hours=0.0005, max_instance_hours=1)
    p = playbook(work, env, "provision.yml", moto, **v)
    assert p.returncode == 0, p.stdout + p.stderr
    assert vpcs_of(ec2, "reaped") and live(ec2, "reaped")
    time.sleep(2.0)  # past expires-at (1.8 s after launch)
    renv = {**env, "AWS_ENDPOINT_URL": moto.url, "AWS_REGION": REGION}
    dry = subprocess.run(
        [str(BIN / "orchestrate"), "cloud", "reap", "--campaign", "reaped", "--dry-run"],
        env=renv,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dry.returncode == 0 and "would terminate 1 instance(s)" in dry.stdout, dry.stdout
    assert live(ec2, "reaped") and vpcs_of(ec2, "reaped")
    reap = subprocess.run(
        [str(BIN / "orchestrate"), "cloud", "reap", "--campaign", "reaped"],
        env=renv,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert reap.returncode == 0, reap.stdout + reap.stderr
    assert "terminated 1 instance(s)" in reap.stdout
    line = next(x for x in reap.stdout.splitlines() if x.startswith("reaped: deleted "))
    assert "security-group sg-" in line and "vpc vpc-" in line and "key-pair kp-reaped" in line
    assert live(ec2, "reaped") == [] and vpcs_of(ec2, "reaped") == []
    again = subprocess.run(
        [str(BIN / "orchestrate"), "cloud", "reap", "--campaign", "reaped"],
        env=renv,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "reaped:" not in again.stdout  # nothing left to delete
