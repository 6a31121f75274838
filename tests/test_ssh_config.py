"""orchestrate's SSH as the user's own: ~/.ssh/config (Host aliases, HostName, User, Port,
IdentityFile, ProxyJump), the ssh-agent, and the inventory's ansible_ssh_common_args.

Two network-namespace hosts: a bastion, and a target linked to the bastion alone (this machine
has no route to it). The inventory names the target by its ~/.ssh/config alias and nothing
else; `orchestrate run` gathers its facts and runs a point on it through the bastion, the
target's key coming from an ssh-agent. HOME is a folder of the test, so the user's real
~/.ssh is not touched; the agent is stopped by its PID.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from socketlab.execute import become_requested, become_variable
from socketlab.execute.sshconfig import ssh_options
from tests.support.campaign import stored, write_spec
from tests.support.netns import netns_available, ssh_hosts

BIN = Path(sys.executable).parent


def test_ssh_options_reads_what_ansible_passes_to_ssh():
    got = ssh_options(
        "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/k -J jump1,jump2 "
        "-i ~/.ssh/lab -oPort=2222 -o 'ProxyCommand=ssh -W %h:%p gw' -l me"
    )
    assert got == {
        "userknownhostsfile": ["/k"],
        "proxyjump": ["jump1,jump2"],
        "identityfile": ["~/.ssh/lab"],
        "port": ["2222"],
        "proxycommand": ["ssh -W %h:%p gw"],
        "user": ["me"],
    }
    assert ssh_options("") == {} and ssh_options("-o Compression=yes") == {}


def ssh_banner(address: str) -> bytes:
    """What answers on address:22 from this machine within 2 s (b"" when nothing does)."""
    try:
        with socket.create_connection((address, 22), timeout=2) as sock:
            sock.settimeout(2)
            return sock.recv(64)
    except OSError:
        return b""


def test_become_as_ansible_or_by_the_older_switch():
    """orchestrate's agent runs under sudo as the playbooks become: ansible_become from the
    inventory, unless socketlab_become is set, which decides."""
    assert not become_requested({}) and become_variable({}) == "ansible_become"
    assert become_requested({"ansible_become": True})
    assert become_requested({"ansible_become": "yes"})
    assert not become_requested({"ansible_become": True, "socketlab_become": False})
    assert become_requested({"ansible_become": False, "socketlab_become": "true"})
    assert become_variable({"socketlab_become": True}) == "socketlab_become"


@contextlib.contextmanager
def ssh_agent(folder: Path, key: Path):
    """An ssh-agent holding ``key``: its environment; stopped by its PID afterwards."""
    sock = folder / "agent.sock"
    proc = subprocess.run(
        ["ssh-agent", "-s", "-a", str(sock)], capture_output=True, text=True, check=True
    )
    pid = int(proc.stdout.split("SSH_AGENT_PID=", 1)[1].split(";", 1)[0])
    try:
        env = {"SSH_AUTH_SOCK": str(sock)}
        subprocess.run(
            ["ssh-add", "-q", str(key)], env={**os.environ, **env}, check=True, capture_output=True
        )
        yield env
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)


#: metric on_target = 1 when the command runs in the target's UTS namespace (its hostname)
ON_TARGET = (
    "import json, socket; print(json.dumps({'type': 'metric', 'name': 'on_target', "
    "'unit': '1', 'value': float(socket.gethostname() == '%s')}))"
)


@pytest.mark.netns
def test_run_through_a_bastion_from_ssh_config(tmp_path):
    reason = netns_available()
    if reason:
        pytest.skip(f"network-namespace test hosts unavailable: {reason}")
    with ssh_hosts(1, tmp_path / "pool") as pool:
        bastion = pool.hosts[0]
        target = pool.add_behind(bastion)
        # no sshd answers at the target's address from here (this machine's gateway may take the
        # TCP connection, but nothing behind it speaks SSH): only the bastion reaches it
        assert not ssh_banner(target.address), "the target must not be reachable directly"
        assert ssh_banner(bastion.address).startswith(b"SSH-2.0")
        home = tmp_path / "home"
        (home / ".ssh").mkdir(parents=True, mode=0o700)
        alias_b, alias_t = f"lab-bastion-{os.getpid()}", f"lab-target-{os.getpid()}"
        (home / ".ssh" / "config").write_text(
            f"Host {alias_b}\n  HostName {bastion.address}\n  User root\n  Port 22\n"
            f"  IdentityFile {bastion.key_file}\n"
            f"Host {alias_t}\n  HostName {target.address}\n  User root\n"
            f"  ProxyJump {alias_b}\n"
            # no IdentityFile: the target's key comes from the agent
            f"Host *\n  UserKnownHostsFile {pool.known_hosts}\n  StrictHostKeyChecking accept-new\n"
        )
        inventory = tmp_path / "hosts.yml"  # the alias and nothing else about the connection
        inventory.write_text(
            yaml.safe_dump(
                {
                    "all": {
                        "hosts": {
                            alias_t: {
                                "ansible_python_interpreter": "/usr/bin/python3",
                                "socketlab_workroot": str(tmp_path / "work"),
                            }
                        }
                    }
                }
            )
        )
        spec = write_spec(
            tmp_path / "spec.yaml",
            {
                "campaign": "bastion",
                "hosts": {"pattern": alias_t},
                "defaults": {"timeout_s": 60},
                "experiments": [
                    {
                        "name": "where",
                        "command": ["/usr/bin/python3", "-c", ON_TARGET % target.name],
                        "metrics": {"parser": "jsonl"},
                        "sanity": {"required_metrics": ["on_target"]},
                    }
                ],
            },
        )
        results, log = tmp_path / "results", tmp_path / "orchestrate.log"
        with ssh_agent(tmp_path, bastion.key_file) as agent:
            env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
            proc = subprocess.run(
                [
                    str(BIN / "orchestrate"),
                    "run",
                    str(spec),
                    "-i",
                    str(inventory),
                    "--results",
                    str(results),
                    "--plain",
                    "-v",
                    "--log-file",
                    str(log),
                ],
                env={**env, **agent, "HOME": str(home)},
                capture_output=True,
                text=True,
                timeout=300,
            )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run,) = stored(results, "bastion").values()
    assert run.status == "ok" and run.host == alias_t, (run.status, run.reason)
    assert '"value": 1.0' in (Path(run.raw_dir) / "stdout").read_text()  # ran on the target
    # the log file says how it got there (-v: each connection's settings)
    text = log.read_text()
    assert f"root@{target.address}:22 via ProxyJump root@{bastion.address}:22" in text, text
    print(json.dumps({"connection": [line for line in text.splitlines() if "ProxyJump" in line]}))
