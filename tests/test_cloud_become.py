"""socketlab_become over SSH: orchestrate's agent on the host runs through `sudo -n`, uploads
into the folders it made still land (staged, then moved), and each run records who ran it.

As root (the netns hosts' login; sudo keeps root) and as a real non-root user with a NOPASSWD
rule in /etc/sudoers.d (tests/support/netns.py login_user; removed afterwards): its tools are
its own, its runs are root's. Where sudo would ask for a password the host is skipped at fact
gathering with one line saying what to configure, before anything is uploaded or run."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from socketlab.cli import main
from tests.support.campaign import stored, write_spec
from tests.support.netns import login_user

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(
        shutil.which("sudo") is None, reason="sudo missing (scripts/system-deps.sh installs it)"
    ),
]

#: metric sudo = 1 when the command runs under sudo (sudo sets SUDO_COMMAND for its child)
SUDO = (
    "import json, os; print(json.dumps({'type': 'metric', 'name': 'sudo', 'unit': '1', "
    "'value': float('SUDO_COMMAND' in os.environ)}))"
)


def test_become_runs_the_agent_through_sudo_and_records_who_ran(ssh_pool, tmp_path):
    host = ssh_pool.hosts[0]
    extra = {
        h.name: {"socketlab_workroot": str(tmp_path / "work"), "socketlab_become": True}
        for h in ssh_pool.hosts
    }
    inv = ssh_pool.inventory(tmp_path / "hosts.yml", group="testhosts", extra=extra)
    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "campaign": "become",
            "hosts": {"pattern": host.name},
            "builds": {"native": {"source": ".", "target": "build/cc/ladder"}},
            "defaults": {"timeout_s": 60, "collectors": ["proc_noise"]},
            "experiments": [
                {
                    "name": "who",
                    "command": ["/usr/bin/python3", "-c", SUDO],
                    "metrics": {"parser": "jsonl"},
                },
                {
                    "name": "ladder",
                    "build": "native",
                    "command": "build/cc/ladder --kernel avx2-read --size 16K --seconds 0.05 "
                    "--reps 1",
                    "metrics": {"parser": "jsonl"},
                    "sanity": {"required_metrics": ["bw_total"]},
                },
            ],
        },
    )
    results = tmp_path / "results"
    assert (
        main(["run", str(spec), "--results", str(results), "--inventory", str(inv), "--plain"]) == 0
    )
    runs = {r.experiment: r for r in stored(results, "become").values()}
    assert {r.status for r in runs.values()} == {"ok"}, {k: r.reason for k, r in runs.items()}
    raw = Path(runs["who"].raw_dir)
    assert '"value": 1.0' in (raw / "stdout").read_text()  # the command ran under sudo
    provenance = json.loads((raw / "run.json").read_text())
    assert provenance["orchestrator"]["run_as"] == "root"


#: the run's effective uid (metric) and the user sudo was asked by (stdout)
WHO = (
    "import json, os; print(json.dumps({'type': 'metric', 'name': 'uid', 'unit': '1', "
    "'value': float(os.geteuid())})); print(json.dumps({'sudo_user': os.environ.get("
    "'SUDO_USER')}))"
)


def user_campaign(tmp_path, host, name: str) -> tuple[Path, Path, Path]:
    """Inventory (host as its login user, socketlab_become), spec and a work root the login
    user owns (it installs the tools before the root agent starts; /tmp/pytest-of-root is
    root's only)."""
    workroot = Path(tempfile.mkdtemp(prefix="slab-become-"))
    shutil.chown(workroot, host.user, host.user)
    vars_ = {**host.inventory_vars(), "socketlab_workroot": str(workroot), "socketlab_become": True}
    import yaml

    inv = tmp_path / f"{name}.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {host.name: vars_}}}))
    spec = write_spec(
        tmp_path / f"{name}-spec.yaml",
        {
            "campaign": name,
            "hosts": {"pattern": host.name},
            "builds": {"native": {"source": ".", "target": "build/cc/ladder"}},
            "defaults": {"timeout_s": 60},
            "experiments": [
                {
                    "name": "who",
                    "command": ["/usr/bin/python3", "-c", WHO],
                    "metrics": {"parser": "jsonl"},
                },
                {
                    "name": "ladder",
                    "build": "native",
                    "command": "build/cc/ladder --kernel avx2-read --size 16K --seconds 0.05 "
                    "--reps 1",
                    "metrics": {"parser": "jsonl"},
                    "sanity": {"required_metrics": ["bw_total"]},
                },
            ],
        },
    )
    return inv, spec, workroot


def orchestrate_run(spec: Path, inv: Path, results: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            str(Path(sys.executable).parent / "orchestrate"),
            "run",
            str(spec),
            "--results",
            str(results),
            "--inventory",
            str(inv),
            "--plain",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_non_root_login_with_nopasswd_sudo_runs_as_root(ssh_pool, tmp_path):
    with login_user(ssh_pool.hosts[0], sudo="nopasswd") as host:
        inv, spec, workroot = user_campaign(tmp_path, host, "becomeuser")
        try:
            results = tmp_path / "results"
            proc = orchestrate_run(spec, inv, results)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            # the tools were uploaded by the login user itself, before the root agent ran
            tools = workroot / host.name / "tools"
            assert tools.owner() == host.user and (tools / "_runwrap.py").owner() == host.user
        finally:
            shutil.rmtree(workroot, ignore_errors=True)
    runs = {r.experiment: r for r in stored(results, "becomeuser").values()}
    assert {r.status for r in runs.values()} == {"ok"}, {k: r.reason for k, r in runs.items()}
    raw = Path(runs["who"].raw_dir)
    assert '"value": 0.0' in (raw / "stdout").read_text()  # uid 0: it ran as root ...
    assert json.dumps({"sudo_user": host.user}) in (raw / "stdout").read_text()  # ... via sudo
    for run in runs.values():
        provenance = json.loads((Path(run.raw_dir) / "run.json").read_text())
        assert provenance["orchestrator"]["run_as"] == "root"


def test_sudo_that_asks_for_a_password_is_one_line_and_nothing_runs(ssh_pool, tmp_path):
    with login_user(ssh_pool.hosts[0], sudo="password") as host:
        inv, spec, workroot = user_campaign(tmp_path, host, "becomepw")
        try:
            results = tmp_path / "results"
            proc = orchestrate_run(spec, inv, results)
            uploaded = sorted(workroot.rglob("*"))
        finally:
            shutil.rmtree(workroot, ignore_errors=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    output = proc.stdout + proc.stderr
    errors = [line for line in output.splitlines() if host.name in line]
    assert len(errors) == 1 and "Traceback" not in output, output
    assert errors[0] == (
        f"orchestrate: host {host.name} skipped: {host.name} (ssh {host.user}@{host.address}:22): "
        f"socketlab_become is set but `sudo -n` fails for {host.user} (sudo asks for a password, "
        f"or is missing): give {host.user} passwordless sudo (a NOPASSWD rule in /etc/sudoers.d), "
        "log in as root, or set socketlab_become: false"
    )
    # nothing half-done: nothing uploaded to the host, no run stored
    assert uploaded == []
    assert stored(results, "becomepw") == {}
