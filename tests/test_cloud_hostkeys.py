"""Host keys are pinned for Ansible as for orchestrate: a generated cloud inventory accepts a
new host's key once into its own known_hosts, and a changed key then makes Ansible fail
(ansible.cfg no longer sets host_key_checking = False, which would only warn)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from socketlab.cloud import inventory

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.netns


def ping(inv: Path, work: Path, **env: str) -> subprocess.CompletedProcess:
    environ = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_LOCAL_TEMP": str(work / "ansible-tmp"),
        "ANSIBLE_SSH_ARGS": "-o ControlMaster=no",
        **env,
    }
    return subprocess.run(
        [str(BIN / "ansible"), "-i", str(inv), "all", "-m", "ansible.builtin.ping"],
        cwd=REPO,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_changed_host_key_fails_ansible(ssh_pool, tmp_path):
    host = ssh_pool.hosts[0]
    inv = tmp_path / "keys.yml"
    known = inventory.known_hosts_path(inv)
    entry = {
        "name": "h0",
        "address": host.address,
        "port": host.port,
        "user": host.user,
        "key_file": str(host.key_file),
        "instance_id": "i-0",
        "instance_type": "t",
        "public_ip": None,
        "private_ip": host.address,
        "availability_zone": "z",
        "expires_at": "2099-01-01T00:00:00Z",
    }
    inv.write_text(inventory.render("keys", [entry], {"region": "r"}, known))
    first = ping(inv, tmp_path)
    assert first.returncode == 0 and "SUCCESS" in first.stdout, first.stdout + first.stderr
    pinned = known.read_text()
    # accept-new pinned it in the inventory's own file (hashed names: ask ssh-keygen)
    found = subprocess.run(
        ["ssh-keygen", "-F", host.address, "-f", str(known)], capture_output=True, text=True
    )
    assert found.returncode == 0 and "ssh-ed25519" in found.stdout, pinned

    # The host now shows another key (as a re-created instance behind the same address would).
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    fake = (other.with_suffix(".pub")).read_text().split()[:2]
    name = pinned.split()[0]
    known.write_text(f"{name} {' '.join(fake)}\n")
    changed = ping(inv, tmp_path)
    out = changed.stdout + changed.stderr
    assert changed.returncode != 0 and "SUCCESS" not in changed.stdout, out
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in out or "Host key verification failed" in out
    # What ansible.cfg used to say: with host key checking off, the same change only warns.
    lax = ping(inv, tmp_path, ANSIBLE_HOST_KEY_CHECKING="False")
    print(f"with host_key_checking=False: rc {lax.returncode}")
    assert lax.returncode == 0 and "SUCCESS" in lax.stdout, lax.stdout + lax.stderr
