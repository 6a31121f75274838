"""Become as Ansible users expect: a non-root login user with passwordless sudo, and
`ansible-playbook -b isolate.yml` from the repository root changes the knobs (`-b restore.yml`
puts them back); without -b the same run refuses in one line and changes nothing. The older
`-e socketlab_become=true` is covered in test_isolation_playbooks.py (with become_method su).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from socketlab.paths import REPO, ansible_env
from tests.support.netns import login_user
from tests.test_isolation_playbooks import (  # noqa: F401 - flipped_vm_knobs is a fixture
    ANSIBLE_PLAYBOOK,
    WORKQUEUE,
    assert_same_knobs,
    flipped_vm_knobs,
    knob_snapshot,
    recap,
)

pytestmark = [
    pytest.mark.root,
    pytest.mark.slow,
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="isolation changes kernel knobs: needs root"),
    pytest.mark.skipif(
        shutil.which("sudo") is None, reason="sudo missing (scripts/system-deps.sh)"
    ),
]


def test_dash_b_with_a_non_root_login_isolates(ssh_pool, tmp_path, flipped_vm_knobs):  # noqa: F811
    state = Path(tempfile.mkdtemp(prefix="slab-become-state-"))
    control = Path(tempfile.mkdtemp(prefix="slcp-"))
    env = {**ansible_env(), "ANSIBLE_SSH_CONTROL_PATH_DIR": str(control)}
    before = knob_snapshot()
    with login_user(ssh_pool.hosts[0], sudo="nopasswd") as host:
        inventory = tmp_path / "user.yml"
        inventory.write_text(yaml.safe_dump({"all": {"hosts": {host.name: host.inventory_vars()}}}))
        assert host.inventory_vars()["ansible_user"] != "root"

        def playbook(*args: str) -> subprocess.CompletedProcess:
            proc = subprocess.run(
                [
                    str(ANSIBLE_PLAYBOOK),
                    "-i",
                    str(inventory),
                    *args,
                    "-e",
                    f"socketlab_state_dir={state}",
                    "-e",
                    "socketlab_housekeeping_per_node=1",
                ],
                cwd=REPO,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            proc.output = proc.stdout + proc.stderr
            return proc

        try:
            refused = playbook("isolate.yml")  # the login user alone may not
            assert refused.returncode != 0, refused.output
            assert "needs root" in refused.output, refused.output
            assert knob_snapshot() == before
            applied = playbook("-b", "isolate.yml")
            assert applied.returncode == 0, applied.output
            assert recap(applied.output)[host.name]["changed"] > 0
            assert knob_snapshot()[str(WORKQUEUE)] in ("1", "00000001")  # cpu0: housekeeping
        finally:
            restored = playbook("-b", "restore.yml")
            for master in control.iterdir():  # no ControlPersist master left behind
                subprocess.run(
                    ["ssh", "-O", "exit", "-o", f"ControlPath={master}", host.address],
                    capture_output=True,
                    timeout=30,
                )
            shutil.rmtree(control, ignore_errors=True)
    assert restored.returncode == 0, restored.output
    assert not list(state.glob("isolation-*.json"))
    shutil.rmtree(state, ignore_errors=True)
    assert_same_knobs(before, knob_snapshot())
