"""Opening SSH hosts for a run: each host in one login session, in parallel.

`orchestrate run` reads a host's facts, installs its tools, starts its agent, takes its lock
and runs every point through one login (collectors/_boot.py), where it once took six (facts,
mkdir, sftp, tar, rm, agent), each through the login shell and its rc files. The login user
here has a bash whose ~/.bashrc records each login with the host's name (every netns host has
its own hostname), so the count is the login shell's own."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

import pytest
import yaml

from socketlab.cli import main
from tests.support.campaign import PY, stored, write_spec
from tests.support.netns import login_user

pytestmark = pytest.mark.netns


def test_each_host_is_opened_in_one_login(ssh_pool, tmp_path):
    with login_user(ssh_pool.hosts[0], sudo=None) as first:
        user = first.user
        subprocess.run(["usermod", "--shell", "/bin/bash", user], check=True, capture_output=True)
        home = Path(f"~{user}").expanduser()
        logins = home / "logins"
        (home / ".bashrc").write_text(f'echo "$(hostname)" >> {logins}\n')
        workroot = Path(tempfile.mkdtemp(prefix="slab-setup-"))
        shutil.chown(workroot, user, user)
        try:
            hosts = {
                h.name: {
                    **h.inventory_vars(),
                    "ansible_user": user,
                    "socketlab_workroot": str(workroot),
                }
                for h in ssh_pool.hosts
            }
            inventory = tmp_path / "hosts.yml"
            inventory.write_text(yaml.safe_dump({"all": {"children": {"pair": {"hosts": hosts}}}}))
            spec = write_spec(
                tmp_path / "spec.yaml",
                {
                    "campaign": "one-login",
                    "hosts": {"group": "pair"},
                    "experiments": [
                        {
                            "name": "e",
                            "command": [PY, "-c", "print(1)", "{{ n }}"],
                            "sweep": {"matrix": {"n": [1, 2, 3]}},
                        }
                    ],
                },
            )
            results = tmp_path / "results"
            assert (
                main(
                    [
                        "run",
                        str(spec),
                        "--results",
                        str(results),
                        "--inventory",
                        str(inventory),
                        "--plain",
                    ]
                )
                == 0
            )
            seen = Counter(logins.read_text().split())
        finally:
            shutil.rmtree(workroot, ignore_errors=True)
    runs = stored(results, "one-login").values()
    assert sorted(r.host for r in runs if r.status == "ok") == sorted([*hosts] * 3)
    assert seen == {name: 1 for name in hosts}, seen
