"""The collection's plugins/module_utils/cpulist.py is a symlink to collectors/_cpulist.py: a real
ansible-playbook run over SSH (a network-namespace sshd host) packs it into a module that uses
it through module_utils/isolation.py (socketlab.lab.knob comparing CPU-list knobs), and it parses
there
as the package does."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from socketlab.paths import ansible_env

REPO = Path(__file__).resolve().parents[1]
PLAYBOOK = REPO / ".venv" / "bin" / "ansible-playbook"

pytestmark = pytest.mark.netns


def test_the_symlinked_cpulist_reaches_a_module_over_ssh(ssh_pool, tmp_path):
    host = ssh_pool.hosts[0]
    knob = tmp_path / "proc" / "irq" / "5" / "smp_affinity_list"
    knob.parent.mkdir(parents=True)
    knob.write_text("0-1\n")
    out = tmp_path / "results.json"
    args = {"path": str(knob), "state_file": str(tmp_path / "state.json")}
    steps = {"same": "1,0", "other": "0 2", "stride": "0-3:2/4"}
    tasks = [
        {
            "name": name,
            "socketlab.lab.knob": {**args, "value": value},
            "check_mode": True,
            "register": name,
            "ignore_errors": True,
        }
        for name, value in steps.items()
    ]
    tasks.append(
        {
            "name": "save",
            "ansible.builtin.copy": {
                "content": "{{ [same, other, stride] | to_json }}",
                "dest": str(out),
            },
            "check_mode": False,
        }
    )
    (tmp_path / "play.yml").write_text(
        json.dumps([{"name": "cpulist", "hosts": "all", "gather_facts": False, "tasks": tasks}])
    )
    inventory = ssh_pool.inventory(tmp_path / "hosts.yml")
    proc = subprocess.run(
        [str(PLAYBOOK), "-i", str(inventory), "-l", host.name, str(tmp_path / "play.yml")],
        capture_output=True,
        text=True,
        env=ansible_env(),
        cwd=REPO,
        timeout=300,
    )
    assert out.exists(), proc.stdout + proc.stderr
    assert f"ok: [{host.name}]" in proc.stdout or f"changed: [{host.name}]" in proc.stdout
    same, other, stride = json.loads(out.read_text())
    assert not same.get("failed") and same["changed"] is False, same  # "1,0" is "0-1"
    assert not other.get("failed") and other["changed"] is True, other
    # the kernel's stride syntax, which only the shared file's parser reads: 2 of every 4
    assert not stride.get("failed") and stride["changed"] is False, stride
    assert knob.read_text() == "0-1\n"  # check mode wrote nothing
