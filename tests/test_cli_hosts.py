"""`orchestrate hosts` run as the real CLI: on localhost, and over SSH against sshd test hosts in
network namespaces (tests/support/netns.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from socketlab.errors import HostError
from socketlab.inventory import load_inventory
from socketlab.topology import read_topology

ORCHESTRATE = str(Path(sys.executable).parent / "orchestrate")


def orchestrate(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([ORCHESTRATE, *args], capture_output=True, text=True, timeout=timeout)


def local_expectation(h: int) -> bool:
    """Whether this machine can be planned with h housekeeping cores per node."""
    t = read_topology("/")
    return all(len(t.cores_in_node(n)) > h for n in t.nodes if t.nodes[n])


def test_localhost_json():
    proc = orchestrate("hosts", "--json", "--housekeeping", "1")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    (host,) = report["hosts"]
    assert host["name"] == "localhost" and host["connection"] == "local"
    assert host["error"] is None
    topo = host["topology"]
    assert topo["threads"] == os.cpu_count()
    assert topo["kernel"] == os.uname().release
    if local_expectation(1):
        plan = host["isolation"]
        assert host["plan_error"] is None
        everything = sorted(plan["housekeeping"] + plan["workers"] + plan["siblings"])
        assert everything == [c.id for c in read_topology("/").cpus]
        assert len(plan["housekeeping"]) == topo["nodes"] * topo["threads_per_core"]
    else:
        assert host["isolation"] is None and "housekeeping_per_node=1" in host["plan_error"]


def test_localhost_default_plan_and_strict():
    # On a 2-core VM the default (2 per node) can't be planned: shown, exit 0; --strict: exit 1.
    plannable = local_expectation(2)
    proc = orchestrate("hosts", "--json")
    assert proc.returncode == 0, proc.stderr
    (host,) = json.loads(proc.stdout)["hosts"]
    assert (host["isolation"] is not None) == plannable
    if not plannable:
        assert "housekeeping_per_node=2 leaves no worker cores" in host["plan_error"]
    strict = orchestrate("hosts", "--json", "--strict")
    assert strict.returncode == (0 if plannable else 1)


def test_localhost_table():
    proc = orchestrate("hosts")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "localhost" in out and "layout" in out and "caches" in out
    t = read_topology("/")
    assert t.model_name in out
    assert ("workqueue mask" in out) == local_expectation(2)
    assert ("not possible" in out) != local_expectation(2)


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("orchestrate: error: ")
    assert "Traceback" not in proc.stderr
    return lines[0]


def test_unknown_limit_is_one_line_exit_2():
    line = one_line_error(orchestrate("hosts", "--limit", "nosuchhost"))
    assert "'nosuchhost' matches no host or group" in line


def test_missing_inventory_is_one_line_exit_2(tmp_path):
    line = one_line_error(orchestrate("hosts", "--inventory", str(tmp_path / "none.yml")))
    assert "none.yml: inventory not found" in line


def test_bad_housekeeping_is_one_line_exit_2():
    line = one_line_error(orchestrate("hosts", "--housekeeping", "0"))
    assert "--housekeeping: expected a whole number >= 1, got 0" in line


def test_inventory_groups_and_limit(tmp_path):
    inv = tmp_path / "inv.yml"
    inv.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "vars": {"ansible_user": "root"},
                    "children": {
                        "lab": {
                            "children": {
                                "xeon": {
                                    "hosts": {
                                        "box1": {"ansible_host": "10.0.0.1", "ansible_port": 2222},
                                        "box2": {"ansible_host": "10.0.0.2"},
                                    }
                                }
                            }
                        },
                        "local": {"hosts": {"localhost": {"ansible_connection": "local"}}},
                    },
                }
            }
        )
    )
    hosts = {h.name: h for h in load_inventory(inv)}
    assert sorted(hosts) == ["box1", "box2", "localhost"]
    assert hosts["box1"].groups == ("lab", "xeon")
    assert (hosts["box1"].connection, hosts["box1"].address, hosts["box1"].port) == (
        "ssh",
        "10.0.0.1",
        2222,
    )
    assert hosts["box1"].user == "root" and hosts["box1"].python == "/usr/bin/python3"
    assert hosts["localhost"].is_local
    assert [h.name for h in load_inventory(inv, "xeon:!box2")] == ["box1"]
    assert [h.name for h in load_inventory(inv, "lab")] == ["box1", "box2"]
    with pytest.raises(HostError, match="'nope' matches no host"):
        load_inventory(inv, "nope")
    bad = tmp_path / "bad.yml"
    bad.write_text("all: [this is not, an inventory\n")
    with pytest.raises(HostError, match="not a valid Ansible inventory"):
        load_inventory(bad)


@pytest.mark.netns
def test_hosts_over_ssh(ssh_pool, tmp_path):
    inv = ssh_pool.inventory(tmp_path / "inv.yml")
    first = ssh_pool.hosts[0]
    proc = orchestrate(
        "hosts", "--inventory", str(inv), "--limit", first.name, "--json", "--housekeeping", "1"
    )
    assert proc.returncode == 0, proc.stderr
    (host,) = json.loads(proc.stdout)["hosts"]
    assert host["name"] == first.name and host["connection"] == "ssh"
    assert host["address"] == first.address and host["groups"] == ["testhosts"]
    assert host["error"] is None
    topo = host["topology"]
    # The namespace host has its own hostname (UTS namespace) but this machine's kernel and CPUs.
    assert topo["source"] == first.name
    local = read_topology("/").facts()
    for key in ("cpu_model", "cores", "threads", "node_cpus", "caches", "kernel"):
        assert topo[key] == local[key]
    assert (host["isolation"] is not None) == local_expectation(1)

    table = orchestrate("hosts", "--inventory", str(inv))
    assert table.returncode == 0, table.stderr
    for h in ssh_pool.hosts:
        assert h.name in table.stdout


@pytest.mark.netns
def test_unreachable_host_is_reported_and_exit_1(ssh_pool, tmp_path):
    first = ssh_pool.hosts[0]
    inv = tmp_path / "inv.yml"
    down = {**first.inventory_vars(), "ansible_host": "127.0.0.1", "ansible_port": "1"}
    inv.write_text(
        yaml.safe_dump({"all": {"hosts": {first.name: first.inventory_vars(), "downhost": down}}})
    )
    proc = orchestrate("hosts", "--inventory", str(inv), "--json", "--housekeeping", "1")
    assert proc.returncode == 1
    hosts = {h["name"]: h for h in json.loads(proc.stdout)["hosts"]}
    assert hosts[first.name]["error"] is None
    assert hosts["downhost"]["topology"] is None
    assert "downhost (ssh root@127.0.0.1:1): gathering facts failed" in hosts["downhost"]["error"]
    table = orchestrate("hosts", "--inventory", str(inv))
    assert table.returncode == 1
    assert "downhost: unreachable:" in table.stdout
