"""The host model (socketlab.topology) on recorded fixtures, on trees written from them, and on
this machine; and the snapshot script collectors/host_facts.py run as a program."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from socketlab.cpulist import parse_cpulist
from socketlab.errors import HostError
from socketlab.topology import host_facts_module, read_topology, topology_from_snapshot
from tests.fixtures.topology import FIXTURES, NAMES, snapshot, topo

REPO = Path(__file__).resolve().parents[1]


def test_fixtures_are_what_the_generator_writes(tmp_path):
    # The synthetic fixtures are reproducible: regenerating gives the committed bytes.
    subprocess.run(
        [sys.executable, str(FIXTURES / "make_fixtures.py"), "--out", str(tmp_path)], check=True
    )
    for name in ("c8i-metal-48xl", "xeon-6543p-b", "two-socket"):
        assert (tmp_path / f"{name}.json").read_text() == (FIXTURES / f"{name}.json").read_text()


def test_c8i_matches_the_documented_layout():
    t = topo("c8i-metal-48xl")
    f = t.facts()
    assert f["cpu_model"] == "INTEL(R) XEON(R) 6975P-C"
    assert (f["sockets"], f["nodes"], f["cores"], f["threads"], f["threads_per_core"]) == (
        1,
        3,
        96,
        192,
        2,
    )
    assert f["node_cpus"] == {"0": "0-31,96-127", "1": "32-63,128-159", "2": "64-95,160-191"}
    for cpu in t.cpus:  # sibling = cpu + 96
        first = cpu.id % 96
        assert cpu.siblings == (first, first + 96)
        assert cpu.node == first // 32
    assert f["caches"]["L1d"] == {
        "size_bytes": 48 << 10,
        "size": "48 KiB",
        "instances": 96,
        "shared_by": 2,
    }
    assert f["caches"]["L2"] == {
        "size_bytes": 2 << 20,
        "size": "2 MiB",
        "instances": 96,
        "shared_by": 2,
    }
    assert f["caches"]["L3"] == {
        "size_bytes": 480 << 20,
        "size": "480 MiB",
        "instances": 1,
        "shared_by": 192,
    }
    assert f["llcs"] == 1 and f["llc_cpus"] == {"0": "0-191"}  # SNC: one L3 id socket-wide
    for flag in ("amx_tile", "amx_bf16", "amx_int8", "avx512_bf16"):
        assert flag in f["flags"]
    assert f["amx"] is True and f["avx512_bf16"] is True
    assert f["ncpus"] == 192
    assert f["service_manager"] == "systemd"
    assert (f["thp"], f["numa_balancing"]) == ("always", 1)
    assert f["irqbalance"] == {"running": True, "pids": [1423]}
    assert f["cpufreq"] == {
        "present": True,
        "driver": "intel_pstate",
        "governors": {"powersave": "0-191"},
    }
    assert [i["irq"] for i in f["irqs"]] == [0, 160, 161, 162, 200, 201]
    assert f["irqs"][1]["node"] == 0 and f["irqs"][1]["effective"] == "5"


def test_single_node_6543p_b():
    f = topo("xeon-6543p-b").facts()
    assert (f["sockets"], f["nodes"], f["cores"], f["threads"]) == (1, 1, 32, 64)
    assert f["node_cpus"] == {"0": "0-63"}
    assert f["caches"]["L3"]["size"] == "128 MiB"
    assert f["amx"] is True


def test_two_socket_cores_are_keyed_by_package_and_core_id():
    # core_id restarts on each socket and CPUs alternate sockets: keying by core_id alone would
    # merge the two sockets' cores.
    t = topo("two-socket")
    f = t.facts()
    assert (f["sockets"], f["nodes"], f["cores"], f["threads"], f["llcs"]) == (2, 2, 16, 32, 2)
    assert f["socket_cpus"] == {
        "0": ",".join(str(c) for c in range(0, 32, 2)),
        "1": ",".join(str(c) for c in range(1, 32, 2)),
    }
    keys = {c.key for c in t.cores}
    assert keys == {(p, cid) for p in (0, 1) for cid in (0, 1, 2, 3, 8, 9, 10, 11)}
    assert t.cpu(0).siblings == (0, 16) and t.cpu(1).siblings == (1, 17)
    assert t.cpu(0).core_id == t.cpu(1).core_id == 0 and t.cpu(0).package != t.cpu(1).package
    assert f["caches"]["L3"]["instances"] == 2 and f["caches"]["L3"]["size"] == "22.5 MiB"
    assert f["irqs_readable"] is False and f["irqs"] == []
    assert f["cpufreq"]["present"] is False


def test_this_machine_fixture():
    f = topo("this-machine").facts()
    assert (f["sockets"], f["nodes"], f["cores"], f["threads"], f["smt"]) == (1, 1, 2, 2, False)
    assert f["service_manager"] == "process_api"
    assert f["amx"] is False and f["avx512_bf16"] is True


@pytest.mark.parametrize("name", NAMES)
def test_tree_round_trip(name, tmp_path):
    # Writing a snapshot out as a sysfs/procfs tree and reading it back with read_topology gives
    # the same model: the reader and the recorded fixtures agree on every file.
    snap = snapshot(name)
    host_facts_module().write_tree(snap, str(tmp_path))
    again = read_topology(tmp_path)
    expected = topology_from_snapshot(snap).facts()
    assert again.facts() == expected


def test_host_facts_script_reads_a_tree(tmp_path):
    snap = snapshot("two-socket")
    host_facts_module().write_tree(snap, str(tmp_path))
    out = subprocess.run(
        ["python3", str(REPO / "collectors" / "host_facts.py"), "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    printed = json.loads(out.stdout)
    assert printed["cpus"] == snap["cpus"]
    assert printed["nodes"] == snap["nodes"]


def test_host_facts_script_rejects_a_missing_root(tmp_path):
    out = subprocess.run(
        ["python3", str(REPO / "collectors" / "host_facts.py"), "--root", str(tmp_path / "no")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "not a directory" in out.stderr


def test_this_machine_live():
    t = read_topology("/")
    f = t.facts()
    online = parse_cpulist(Path("/sys/devices/system/cpu/online").read_text())
    assert [c.id for c in t.cpus] == online
    assert f["threads"] == len(online) == os.cpu_count()
    assert sum(len(c.cpus) for c in t.cores) == f["threads"]
    # every CPU is in exactly one node and one core
    assert sorted(c for cpus in t.nodes.values() for c in cpus) == online
    with open("/proc/cpuinfo") as fh:
        models = {line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")}
    assert f["cpu_model"] in models
    assert f["kernel"] == os.uname().release
    assert f["service_manager"] == Path("/proc/1/comm").read_text().strip()


def test_this_machine_devices_are_what_exists():
    # the fixed device set, each reported as present exactly when the path exists here
    # (resctrl: when mounted)
    devices = read_topology("/").facts()["devices"]
    for dev in host_facts_module().DEVICE_PATHS:
        if dev == "/sys/fs/resctrl":
            mounted = any(
                line.split()[1:3] == [dev, "resctrl"]
                for line in Path("/proc/mounts").read_text().splitlines()
            )
            assert (dev in devices) == mounted
        else:
            assert (dev in devices) == os.path.exists(dev), dev
    print(f"devices here: {devices}")


def test_host_facts_script_as_a_program_matches_the_module():
    out = subprocess.run(
        ["python3", str(REPO / "collectors" / "host_facts.py")],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    printed = topology_from_snapshot(json.loads(out.stdout)).facts()
    live = read_topology("/").facts()
    for key in ("cpu_model", "flags", "cores", "threads", "node_cpus", "caches", "kernel"):
        assert printed[key] == live[key]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s.update(format="something/2"), "format: expected"),
        (lambda s: s["cpus"]["3"].update(core_id="x"), "cpus.3.core_id: expected an integer"),
        (lambda s: s["cpus"]["5"].update(physical_package_id=None), "cpus.5.physical_package_id"),
        (lambda s: s["nodes"]["1"].update(cpulist="32-"), "nodes.1.cpulist"),
        (
            lambda s: s["cpus"]["0"]["cache"]["index2"].update(size="2 MB"),
            "cpus.0.cache.index2.size",
        ),
        (lambda s: s.update(cpus={}), "cpus: expected at least one online CPU"),
        (lambda s: s.update(numa_balancing="on"), "numa_balancing: expected an integer"),
    ],
)
def test_bad_snapshots_give_one_line_naming_the_field(edit, message):
    snap = copy.deepcopy(snapshot("c8i-metal-48xl"))
    edit(snap)
    with pytest.raises(HostError) as err:
        topology_from_snapshot(snap)
    text = str(err.value)
    assert message in text and "\n" not in text
    assert text.startswith("c8i-metal-48xl: ")


def test_snapshot_without_numa_directory_is_one_node():
    snap = copy.deepcopy(snapshot("two-socket"))
    snap["nodes"] = {}
    t = topology_from_snapshot(snap)
    assert list(t.nodes) == [0] and len(t.nodes[0]) == 32


def test_offline_cpus_are_left_out():
    snap = copy.deepcopy(snapshot("xeon-6543p-b"))
    snap["cpu_online"] = "0-31"  # SMT switched off at runtime
    t = topology_from_snapshot(snap)
    assert [c.id for c in t.cpus] == list(range(32))
    assert t.threads_per_core == 1 and len(t.cores) == 32
    assert t.ncpus == 64  # masks still span nr_cpu_ids
