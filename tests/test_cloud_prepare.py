"""playbooks/prepare.yml (roles/host_packages) on a netns SSH host whose interpreter is the
oldest Python here (Amazon Linux 2023's python3 is 3.9): the tools check runs there and names,
per tool, its path or the package that brings it. Check-only (host_packages_install=false):
netns hosts share this machine's filesystem, so installing would change this machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.test_collectors_py39 import OLDEST

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.netns


def test_prepare_checks_tools_and_names_packages(ssh_pool, tmp_path):
    host = ssh_pool.hosts[0]
    python = OLDEST[0] if OLDEST else "/usr/bin/python3"
    print(f"host interpreter: {python}")
    hostvars = {**host.inventory_vars(), "ansible_python_interpreter": python}
    inv = tmp_path / "inv.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {host.name: hostvars}}}))
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"),
        "ANSIBLE_SSH_ARGS": "-o ControlMaster=no",
        "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
    }
    p = subprocess.run(
        [
            str(BIN / "ansible-playbook"),
            "-i",
            str(inv),
            "playbooks/prepare.yml",
            "-e",
            "host_packages_install=false",
            "-e",
            f"host_packages_record_file={tmp_path / 'record.json'}",
            "-v",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    line = next(x for x in out.splitlines() if "gcc: " in x and "make: " in x)
    for tool in ("gcc", "make", "perf", "turbostat", "kernel-headers", "python", "tar"):
        assert f"{tool}: " in line, line
    # this machine has gcc and make; whatever is missing is named with its Debian package
    assert "gcc: /usr/bin/gcc" in line or "gcc: /bin/gcc" in line, line
    if "MISSING" in line:
        assert "not installed: " in line and "host_packages_install=false" in line, line
    assert not (tmp_path / "record.json").exists()  # check-only records nothing
    print(line.strip())
