"""socketlab_become over SSH: orchestrate's agent on the host runs through `sudo -n`, uploads
into the folders it made still land (staged, then moved), and each run records who ran it.

The netns hosts log in as root (sudo then keeps root), so this proves the sudo path, the staged
uploads into a build folder and the record; a login without passwordless sudo fails at the
agent's start with the hint (the refusal text is sudo's own)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from socketlab.cli import main
from tests.support.campaign import stored, write_spec

pytestmark = [pytest.mark.netns,
              pytest.mark.skipif(shutil.which("sudo") is None,
                                 reason="sudo missing (scripts/system-deps.sh installs it)")]  # fmt: skip

#: metric sudo = 1 when the command runs under sudo (sudo sets SUDO_COMMAND for its child)
SUDO = ("import json, os; print(json.dumps({'type': 'metric', 'name': 'sudo', 'unit': '1', "
        "'value': float('SUDO_COMMAND' in os.environ)}))")  # fmt: skip


def test_become_runs_the_agent_through_sudo_and_records_who_ran(ssh_pool, tmp_path):
    host = ssh_pool.hosts[0]
    extra = {h.name: {"socketlab_workroot": str(tmp_path / "work"), "socketlab_become": True}
             for h in ssh_pool.hosts}  # fmt: skip
    inv = ssh_pool.inventory(tmp_path / "hosts.yml", group="testhosts", extra=extra)
    spec = write_spec(tmp_path / "spec.yaml", {
        "campaign": "become", "hosts": {"pattern": host.name},
        "builds": {"native": {"source": ".", "target": "build/cc/ladder"}},
        "defaults": {"timeout_s": 60, "collectors": ["proc_noise"]},
        "experiments": [
            {"name": "who", "command": ["/usr/bin/python3", "-c", SUDO],
             "metrics": {"parser": "jsonl"}},
            {"name": "ladder", "build": "native",
             "command": "build/cc/ladder --kernel avx2-read --size 16K --seconds 0.05 --reps 1",
             "metrics": {"parser": "jsonl"}, "sanity": {"required_metrics": ["bw_total"]}},
        ],
    })  # fmt: skip
    results = tmp_path / "results"
    assert main(["run", str(spec), "--results", str(results), "--inventory", str(inv),
                 "--plain"]) == 0  # fmt: skip
    runs = {r.experiment: r for r in stored(results, "become").values()}
    assert {r.status for r in runs.values()} == {"ok"}, {k: r.reason for k, r in runs.items()}
    raw = Path(runs["who"].raw_dir)
    assert '"value": 1.0' in (raw / "stdout").read_text()  # the command ran under sudo
    provenance = json.loads((raw / "run.json").read_text())
    assert provenance["orchestrator"]["run_as"] == "root"
