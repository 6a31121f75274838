"""site.yml end to end on two pristine hosts (tests/support/pristine.py): their own root
filesystem (Debian bullseye, python3 3.9, no numpy, no socketlab, no gcc), ec2-user with sudo,
nothing of the controller visible. moto's EC2 "launches" them (its private addresses are the
hosts' addresses) and its S3 takes the push.

prep installs the packages with the hosts' apt, facts, isolate, verify, then campaign-oct's quick
profile trimmed to one point of every experiment kind (native command, collector, layer stage on
a shipped dump, tile balance, controller-side stage-plan, and kinds this CPU lacks), push, pull,
report, restore on the hosts, teardown. The report has a verdict per kind and no Python or
missing-file error; after restore the hosts' filesystems differ from the fresh image only by the
state folder and what prep installed (the overlay's upper layer, compared with right after boot).

Also (what tests/test_site_isolate_e2e.py checked on hosts that shared this machine's files):
the steps in order with the estimate first, prep's per-tool line, `orchestrate hosts` saying
"not isolated" at the facts step and "isolated ...; verified ..." after verify, the campaign's
progress lines while it runs, and `pull` into a fresh folder giving the same report, whose
provenance says each host was isolated and verified.

The kernel is this machine's, so isolate changes its knobs: the test holds the knob lock,
snapshots the knobs first and checks restore.yml (run against the hosts, where the records are)
put them back.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from socketlab.paths import PLAYBOOKS
from tests.support.moto import aws_client, moto_server, planted_env, run_logged
from tests.support.pristine import PristineHostPool, changed, pristine_available, snapshot
from tests.test_cloud_ec2 import (
    BIN,
    REGION,
    REPO,
    SECRET,
    ec2_var,
    ever,
    live,
    orchestrate,
    teardown,
)
from tests.test_isolation_playbooks import assert_same_knobs, knob_snapshot

pytestmark = [
    pytest.mark.root,
    pytest.mark.slow,
    pytest.mark.skipif(not (BIN / "moto_server").exists(), reason="moto[server] missing"),
    pytest.mark.skipif(pristine_available() is not None, reason=str(pristine_available())),
    pytest.mark.skipif(not Path("/proc/irq").is_dir(), reason="no /proc/irq on this machine"),
]

CAMPAIGN = "campaign-oct"
BUCKET = "pristine-e2e"
#: one point of every kind, at quick sizes (the quick profile's overrides replaced)
ONE_POINT = {
    "latency": {"sweep": {"matrix": {"target": ["next-core"]}}, "repetitions": 1},
    "exchange": {
        "sweep": {"matrix": {"scope": ["one-node"], "mode": ["diss"]}, "exclude": []},
        "repetitions": 1,
    },
    "layer-p2": {
        "sweep": {
            "matrix": {
                "layer": ["E2B L0"],
                "context": [2048],
                "all_gather": [True],
                "gemv": ["avx"],
                "steps": [12],
            },
            "exclude": [],
        },
        "repetitions": 1,
    },
    "tile-balance": {"sweep": {"matrix": {"stage": ["E2B L0 2K"], "kernel": ["avx512-bf16"]}}},
    "kvstream": {"sweep": {"matrix": {"layer": ["E2B L4"], "context": [2048]}}, "repetitions": 1},
    "layer-p2-amx": {  # the published cell: on a rig whose compiler lacks AMX, "not available"
        "sweep": {
            "matrix": {
                "layer": ["E2B L0"],
                "context": [2048],
                "all_gather": [True],
                "gemv": ["amx"],
                "steps": [12],
            },
            "exclude": [],
        },
        "repetitions": 1,
    },
    "noise-idle": {"command": ["sleep", "2"]},
    "stage-plan": {},
}


def trimmed_spec(path: Path) -> Path:
    doc = yaml.safe_load((REPO / "experiments" / "campaign-oct.yaml").read_text())
    doc["experiments"] = [e for e in doc["experiments"] if e["name"] in ONE_POINT]
    # the quick profile alone: the others name experiments this trimmed spec leaves out
    doc["profiles"] = {"quick": doc["profiles"]["quick"]}
    doc["profiles"]["quick"]["experiments"] = {k: v for k, v in ONE_POINT.items() if v}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("pristine-e2e")


@pytest.fixture(scope="module")
def moto(work):
    with moto_server(work) as server:
        yield server


def _playbook(work, env, moto, name: str, timeout: float, **extra) -> subprocess.CompletedProcess:
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
    return run_logged(work, env, argv, timeout=timeout)


def _on(host, command: str) -> str:
    return subprocess.run(
        host.ssh_argv(command), capture_output=True, text=True, timeout=120
    ).stdout


def test_site_on_pristine_hosts_from_prep_to_report_and_restore(work, moto, kernel_knobs_lock):
    t0 = time.monotonic()
    pool = PristineHostPool(work / "hosts")
    try:
        # moto hands out the subnet's addresses from .4 on: the hosts are there before launch
        hosts = [pool.add(address=pool.subnet_address(4 + i)) for i in range(2)]
        booted = {h.name: snapshot(h) for h in hosts}
        for h in hosts:  # what a fresh image has: no socketlab, no numpy, Python 3.9
            assert _on(h, "python3 --version").startswith("Python 3.9")
            assert "absent" in _on(h, "python3 -c 'import numpy' 2>/dev/null || echo absent")
        env = planted_env(
            work,
            "AKIASOCKETLABTEST0001",
            SECRET,
            SOCKETLAB_RESULTS=str(work / "results"),
            ANSIBLE_LOG_PATH=str(work / "ansible.log"),
            ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
            ANSIBLE_LOCAL_TEMP=str(work / "ansible-tmp"),
            ANSIBLE_SSH_ARGS="-C -o ControlMaster=no",
            PATH=f"{BIN}:{os.environ.get('PATH', '')}",
        )
        aws_client("s3", moto.url, "AKIASOCKETLABTEST0001", SECRET).create_bucket(Bucket=BUCKET)
        spec = trimmed_spec(work / "campaign-oct.yaml")
        inventory = work / "inventory" / f"{CAMPAIGN}.yml"
        (inventory.parent / "group_vars").mkdir(parents=True)
        (inventory.parent / "group_vars" / "all.yml").write_text(
            yaml.safe_dump({"socketlab_housekeeping_per_node": 1, "socketlab_noise_seconds": 1})
        )
        v = {
            "campaign": CAMPAIGN,
            "owner": "tester",
            "count": 2,
            "hours": 3,
            "max_instance_hours": 6,
            "create_network": "true",
            "vpc_cidr": pool.subnet,
            "subnet_cidr": pool.subnet,
            "create_security_group": "true",
            "ssh_cidr": pool.subnet,
            "key_name": "kp-pristine",
            "public_key_file": f"{pool.key}.pub",
            "ssh_private_key_file": str(pool.key),
            "ssh_user": "ec2-user",
            "ssh_port": 22,
            "ssh_address": "private",
            "ssh_timeout_s": 30,
            "poll_s": 0.5,
            "root_volume_gb": 64,
            "socketlab_inventory_file": str(inventory),
            "campaign_spec": str(spec),
            "results_s3": f"s3://{BUCKET}/fleet",
            "profile": "quick",
            # restore runs on the hosts before teardown: keep them past site.yml
            "keep_instances": "true",
        }
        before = knob_snapshot()
        try:
            p = _playbook(work, env, moto, "site.yml", 1500, **v)
            out = p.stdout
            log = work / "results" / CAMPAIGN / "run.log"
            run_log = log.read_text() if log.exists() else ""
            print(run_log[-4000:])
            assert p.returncode == 0, out[-6000:] + p.stderr[-2000:]
        finally:
            restored = subprocess.run(
                [
                    str(BIN / "ansible-playbook"),
                    "-i",
                    str(inventory),
                    str(PLAYBOOKS / "restore.yml"),
                    "-e",
                    "socketlab_become=true",
                ],
                cwd=REPO,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            print(restored.stdout[-3000:])
            down = teardown(work, env, moto, CAMPAIGN, inventory=str(inventory))
            print(down.stdout[-1500:])
        assert restored.returncode == 0, restored.stdout[-3000:] + restored.stderr[-2000:]
        assert re.search(r"restored \d+ knob\(s\)", restored.stdout), restored.stdout[-3000:]
        assert_same_knobs(before, knob_snapshot())
        assert down.returncode == 0 and "terminated 2 instance(s)" in down.stdout, down.stdout

        # nothing of socketlab was needed on a host, nothing failed for want of a file
        for bad in ("No module named", "Traceback", "No such file or directory"):
            assert bad not in run_log, run_log
        assert re.search(r"layer dump gemma4-e2b-l0-c2048-b16-s1-\w+: copied \d+ files", run_log)
        ec2 = aws_client("ec2", moto.url, "AKIASOCKETLABTEST0001", SECRET)
        assert "keep_instances=true" in out and live(ec2, CAMPAIGN) == []
        assert len(ever(ec2, CAMPAIGN)) == 2

        # the steps in order, the estimate before paying; prep's per-tool line from the hosts
        assert "estimated time: at most" in out
        order = [
            "Check the spec and estimate",
            "Provision the instances",
            "Install and check the",
            "Gather host facts",
            "Isolate the sockets",
            "Verify the isolation",
            "Show each host's isolation now",
            "Follow the campaign",
            "Push the results",
        ]
        at = [out.index(x) for x in order]
        assert at == sorted(at), at
        assert "gcc: /usr/bin/gcc" in out
        names = sorted(f"socketlab-{CAMPAIGN}-{i}" for i in range(2))
        facts = json.loads((work / "results" / CAMPAIGN / "cloud-hosts.json").read_text())
        assert [h["isolated_now"]["text"] for h in facts["hosts"]] == ["not isolated"] * 2, facts
        shown = out[out.index("Show each host's isolation now") : out.index("Build the native")]
        shown = " ".join(shown.split()).replace("''", "'")  # the YAML callback wraps and quotes
        for name in names:
            assert re.search(
                rf"{name}: isolated: isolate\.yml's plan \(housekeeping 0, workers "
                r"1\); verified \d{4}-\d\d-\d\dT[\d:]+Z: 0 drifted knobs",
                shown,
            ), shown
        # progress lines went by while the campaign ran, and its end was seen
        follow = out[out.index("Follow the campaign") : out.index("Collect the campaign")]
        assert re.search(r"\[\d+/16\] socketlab-campaign-oct-\d: ", follow), follow
        assert "campaign finished: exit 0" in follow

        # the report: one verdict per kind
        rep = orchestrate(work, env, moto, "report", CAMPAIGN)
        assert rep.returncode in (0, 1), rep.stdout[-2000:] + rep.stderr[-2000:]
        text = (work / "results" / CAMPAIGN / "report.md").read_text()
        for name in names:  # each host's provenance: isolated with the plan, and verified
            assert re.search(
                rf"{name}.*applied; plan: housekeeping 0, workers 1; verified ", text
            ), text[:3000]
        # pulled from S3 into a fresh folder: the same report
        fresh = work / "pulled"
        pulled = orchestrate(
            work,
            {**env, "SOCKETLAB_RESULTS": str(fresh)},
            moto,
            "pull",
            f"s3://{BUCKET}/fleet",
            "--json",
        )
        assert pulled.returncode == 0, pulled.stderr
        assert json.loads(pulled.stdout)["added_runs"] == 16
        again = orchestrate(
            work, {**env, "SOCKETLAB_RESULTS": str(fresh)}, moto, "report", CAMPAIGN
        )
        assert again.returncode == rep.returncode, again.stderr[-2000:]

        def comparable(results: Path) -> str:
            body = (results / CAMPAIGN / "report.md").read_text().replace(str(results), "<R>")
            return re.sub(r"(?im)^.*generated.*$", "<generated>", body)

        assert comparable(fresh) == comparable(work / "results")
        from socketlab.report.gather import build_report

        report = build_report(CAMPAIGN, results=work / "results", spec_path=spec)
        by_exp: dict[str, list] = {}
        for row in report.rows:
            by_exp.setdefault(row.cell.experiment, []).append(row)
        shown = {}
        for exp in ONE_POINT:
            rows = by_exp.get(exp, [])
            measured = [r for r in rows if r.measured is not None]
            pick = (measured or rows or [None])[0]
            shown[exp] = f"{pick.cell.id}: {pick.verdict}" if pick else "(no published cell)"
        print("one verdict per kind:\n" + "\n".join(f"  {k}: {t}" for k, t in shown.items()))
        for exp in ("latency", "layer-p2", "stage-plan"):  # run here, on every x86 host
            assert any(r.measured is not None for r in by_exp[exp]), (exp, shown[exp])
        assert "No module named" not in text and "Traceback" not in text

        # after restore: the hosts differ from the fresh image only by the state folder,
        # Ansible's own temp folder and what prep installed. What installing those packages
        # changes (maintainer scripts write alternatives, .pyc files, mime caches: paths no
        # dpkg list names) is measured on a third fresh host that installs only them.
        installed = json.loads(
            _on(hosts[0], "sudo cat /var/lib/socketlab/host_packages.json") or "{}"
        ).get("installed", [])
        print(f"prep installed on {hosts[0].name}: {installed}")
        assert installed, "prep recorded nothing it installed"
        reference = pool.add(address=pool.subnet_address(40))
        ref_booted = snapshot(reference)
        install = " && ".join(
            f"sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q {pkg}" for pkg in installed
        )
        got = subprocess.run(
            reference.ssh_argv(f"sudo apt-get update -q && {install}"),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert got.returncode == 0, got.stdout[-2000:] + got.stderr[-2000:]
        by_packages = set(changed(ref_booted, snapshot(reference)))
        print(f"{reference.name} (reference, only apt-get install): {len(by_packages)} paths")
        for h in hosts:
            diff = changed(booted[h.name], snapshot(h))
            other = sorted(
                rel
                for rel in diff
                if rel not in by_packages
                and not rel.startswith(
                    ("var/lib/socketlab/", "var/lib/socketlab", "home/ec2-user/.ansible/")
                )
            )
            state = [rel for rel in diff if rel.startswith("var/lib/socketlab")]
            print(
                f"{h.name}: {len(diff)} paths changed since boot; {len(state)} in the state "
                f"folder {state}; not from the packages or the state folder: {other}"
            )
            assert other == [], other
        print(f"whole test: {time.monotonic() - t0:.0f} s")
    finally:
        pool.close()
