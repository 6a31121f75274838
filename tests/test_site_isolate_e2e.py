"""site.yml end to end, isolation included, against moto's real server.

Estimate, provision two instances (this machine's loopback sshd, with the oldest Python here as
their interpreter, as Amazon Linux 2023's python3 is 3.9), prep, facts, isolate, verify, the
campaign with a collector (its progress shown while it runs), push to S3, teardown; then `pull`
into a fresh folder gives the same report, which says "verified".

The two "instances" are this machine, so isolate changes this machine's kernel knobs (as the
isolation playbook tests do, tests/test_isolation_playbooks.py): the test holds the machine-wide
knob lock, snapshots every knob first, and restores each host's record with restore.yml in a
finally, then checks the snapshot is back. Both hosts' state files hold the same originals (the
snapshot is one task, which runs on both hosts before any knob changes), so restoring them one
after another in any order gives the originals back. The hosts' shared settings (state folder,
one housekeeping core on this 2-CPU VM, 1 s of noise) are group_vars beside the generated
inventory, the way docs/fresh-instance.md says to give them.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import yaml

from socketlab.paths import DEFAULT_INVENTORY, PLAYBOOKS
from tests.support.moto import aws_client, cloud_fixtures, planted_env, run_logged
from tests.test_cloud_ec2 import (
    BIN,
    LOOPBACK,
    REPO,
    SECRET,
    ever,
    launch_vars,
    live,
    orchestrate,
    playbook,
)
from tests.test_collectors_py39 import OLDEST
from tests.test_isolation_playbooks import assert_same_knobs, knob_snapshot

pytestmark = [
    pytest.mark.root,
    pytest.mark.slow,
    pytest.mark.skipif(not (BIN / "moto_server").exists(), reason="moto[server] missing"),
    pytest.mark.skipif(os.geteuid() != 0, reason="isolation changes kernel knobs: needs root"),
    pytest.mark.skipif(not Path("/proc/irq").is_dir(), reason="no /proc/irq on this machine"),
]

SITE_BUCKET = "site-e2e"
EMIT = ("import json, sys; print(json.dumps({'type': 'metric', 'name': 'x', "
        "'value': float(sys.argv[1]), 'unit': '1'}))")  # fmt: skip


work, moto, sshd = cloud_fixtures("site-e2e", LOOPBACK)


@pytest.fixture(scope="module")
def env(work, moto) -> dict[str, str]:
    return planted_env(
        work, "AKIASOCKETLABTEST0001", SECRET,
        SOCKETLAB_RESULTS=str(work / "results"), ANSIBLE_LOG_PATH=str(work / "ansible.log"),
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_LOCAL_TEMP=str(work / "ansible-tmp"),
        # No ControlPersist ssh masters left behind (we could not stop them by PID).
        ANSIBLE_SSH_ARGS="-C -o ControlMaster=no",
        PATH=f"{BIN}:{os.environ.get('PATH', '')}",
    )  # fmt: skip


def site_report(work, env, moto, results: Path, campaign: str) -> str:
    out = orchestrate(work, {**env, "SOCKETLAB_RESULTS": str(results)}, moto, "report", campaign)
    assert out.returncode == 0, out.stdout + out.stderr
    text = (results / campaign / "report.md").read_text()
    return re.sub(r"(?im)^.*generated.*$", "<generated>", text.replace(str(results), "<R>"))


def restore_all(work, env, state: Path) -> list[str]:
    """restore.yml for every host's state file left in ``state`` (from localhost: the hosts are
    this machine, and the state file names what to put back); the hosts restored."""
    done = []
    for record in sorted(state.glob("isolation-*.json")):
        host = record.stem.removeprefix("isolation-")
        p = run_logged(work, env, [
            str(BIN / "ansible-playbook"), "-i", str(DEFAULT_INVENTORY),
            str(PLAYBOOKS / "restore.yml"), "-e", f"socketlab_state_dir={state}",
            "-e", f"socketlab_state_file={record}",
            "-e", f"socketlab_verify_file={state / f'verify-{host}.json'}",
        ])  # fmt: skip
        assert p.returncode == 0, p.stdout + p.stderr
        assert re.search(r"restored \d+ knob\(s\)", p.stdout), p.stdout
        done.append(host)
    return done


def test_site_prep_facts_isolate_verify_run_push_teardown_then_pull(
    work, env, moto, sshd, kernel_knobs_lock
):
    python = OLDEST[0] if OLDEST else "/usr/bin/python3"
    print(f"host interpreter: {python}")
    aws_client("s3", moto.url, "AKIASOCKETLABTEST0001", SECRET).create_bucket(Bucket=SITE_BUCKET)
    campaign = "e2e"
    spec = work / "spec-e2e.yaml"
    spec.write_text(yaml.safe_dump({
        "schema_version": 1, "campaign": campaign,
        # this 2-CPU VM: one housekeeping core, as the hosts' group_vars plan it
        "isolation": {"housekeeping_per_node": 1},
        "defaults": {"timeout_s": 60, "repetitions": 2, "collectors": ["proc_noise"]},
        "experiments": [{"name": "emit", "command": ["/usr/bin/python3", "-c", EMIT, "{{ v }}"],
                         "sweep": {"matrix": {"v": [1, 2]}}, "metrics": {"parser": "jsonl"},
                         # runs only on an isolated host: the run saw what isolate did
                         "requires": {"isolation": True}}],
    }))  # fmt: skip
    state = work / "state"
    inventory = work / "inventory" / f"{campaign}.yml"
    (inventory.parent / "group_vars").mkdir(parents=True)
    (inventory.parent / "group_vars" / "all.yml").write_text(yaml.safe_dump({
        "socketlab_state_dir": str(state), "socketlab_housekeeping_per_node": 1,
        "socketlab_noise_seconds": 1}))  # fmt: skip
    v = launch_vars(work, sshd, campaign, count=2, campaign_spec=str(spec),
                    results_s3=f"s3://{SITE_BUCKET}/fleet", remote_python=python,
                    host_packages_install="false", socketlab_inventory_file=str(inventory))  # fmt: skip
    before = knob_snapshot()
    try:
        p = playbook(work, env, "site.yml", moto, **v)
        out = p.stdout
        assert p.returncode == 0, out + p.stderr
        # both hosts isolated and verified, one record each (keyed by inventory name)
        hosts = sorted(f"socketlab-{campaign}-{i}" for i in range(2))
        assert sorted(x.stem.removeprefix("isolation-") for x in state.glob("isolation-*")) == hosts
        for host in hosts:
            record = json.loads((state / f"verify-{host}.json").read_text())
            assert record["passed"] is True and record["plan"]["workers_list"] == "1", record
    finally:
        restored = restore_all(work, env, state)
    assert restored == hosts
    assert not list(state.glob("isolation-*")) and not list(state.glob("verify-*"))
    assert_same_knobs(before, knob_snapshot())

    ec2 = aws_client("ec2", moto.url, "AKIASOCKETLABTEST0001", SECRET)
    # the estimate before paying, then the steps in order
    assert "estimated time: at most" in out
    order = ["Check the spec and estimate", "Provision the instances", "Install and check the",
             "Gather host facts", "Isolate the sockets", "Verify the isolation",
             "Show each host's isolation now", "Follow the campaign", "Push the results",
             "Tear down"]  # fmt: skip
    at = [out.index(x) for x in order]
    assert at == sorted(at), at
    assert "gcc: " in out  # prep's per-tool line, from the hosts
    # `orchestrate hosts`: not isolated at the facts step, isolated and verified after verify
    facts = json.loads((work / "results" / campaign / "cloud-hosts.json").read_text())
    assert [h["isolated_now"]["text"] for h in facts["hosts"]] == ["not isolated"] * 2, facts
    shown = out[out.index("Show each host's isolation now"):out.index("Build the native")]
    shown = " ".join(shown.split()).replace("''", "'")  # the YAML callback wraps and quotes
    for host in hosts:
        assert re.search(rf"{host}: isolated: isolate\.yml's plan \(housekeeping 0, workers 1\); "
                         r"verified \d{4}-\d\d-\d\dT[\d:]+Z: 0 drifted knobs; worker noise: ",
                         shown), shown  # fmt: skip
    # progress lines went by during the run, and its end was seen
    follow = out[out.index("Follow the campaign"):out.index("Collect the campaign")]
    assert re.search(r"\[\d/8\] socketlab-e2e-\d: emit", follow), follow
    assert "campaign finished: exit 0" in follow
    assert "terminated 2 instance(s)" in out and live(ec2, campaign) == []
    assert len(ever(ec2, campaign)) == 2

    ran = work / "results"
    fresh = work / "pulled"
    pulled = orchestrate(work, {**env, "SOCKETLAB_RESULTS": str(fresh)}, moto, "pull",
                         f"s3://{SITE_BUCKET}/fleet", "--json")  # fmt: skip
    assert pulled.returncode == 0, pulled.stderr
    assert json.loads(pulled.stdout)["added_runs"] == 8
    first = site_report(work, env, moto, ran, campaign)
    assert "irq_rate" in first and "runs: ok 8" in first, first  # collector metrics shown
    assert "not verified" not in first, first
    for host in hosts:  # the provenance line of each host: applied, the plan, verified
        assert re.search(rf"{host}.*applied; plan: housekeeping 0, workers 1; verified ", first), first
    assert site_report(work, env, moto, fresh, campaign) == first
