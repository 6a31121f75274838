"""The isolation planner (socketlab.placement.isolation) on every topology fixture, and the Ansible
filters that expose it to the playbooks."""

from __future__ import annotations

import copy
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from socketlab import paths
from socketlab.cpulist import parse_cpulist, parse_cpumask
from socketlab.errors import PlanError
from socketlab.placement import plan_isolation
from socketlab.topology import topology_from_snapshot
from tests.fixtures.topology import FIXTURES, NAMES, snapshot, topo

#: the collection's filter plugin, as Ansible's loader names it (the checkout's root is on sys.path)
filters = importlib.import_module("ansible_collections.socketlab.lab.plugins.filter.isolation")


def test_c8i_default_plan_is_exactly_the_campaigns():
    p = plan_isolation(topo("c8i-metal-48xl")).facts()
    assert p["housekeeping"] == [0, 1, 32, 33, 64, 65, 96, 97, 128, 129, 160, 161]
    assert p["workers"] == parse_cpulist("2-31,34-63,66-95")
    assert p["workers_list"] == "2-31,34-63,66-95"
    assert p["workqueue_mask"] == "00000003,00000003,00000003,00000003,00000003,00000003"
    assert p["siblings_list"] == "98-127,130-159,162-191"
    assert p["housekeeping_list"] == "0-1,32-33,64-65,96-97,128-129,160-161"
    assert p["workers_by_node"] == {
        "0": list(range(2, 32)),
        "1": list(range(34, 64)),
        "2": list(range(66, 96)),
    }
    assert p["housekeeping_by_node_list"] == {
        "0": "0-1,96-97",
        "1": "32-33,128-129",
        "2": "64-65,160-161",
    }
    assert len(p["workers"]) == 90  # one worker per remaining physical core
    assert p["chosen_by"] == {
        "0": "lowest core ids",
        "1": "lowest core ids",
        "2": "lowest core ids",
    }


def test_c8i_one_housekeeping_core_per_node():
    p = plan_isolation(topo("c8i-metal-48xl"), housekeeping_per_node=1).facts()
    assert p["housekeeping_list"] == "0,32,64,96,128,160"
    assert p["workers_list"] == "1-31,33-63,65-95"
    assert p["workqueue_mask"] == ",".join(["00000001"] * 6)


def test_6543p_b_single_node():
    p = plan_isolation(topo("xeon-6543p-b")).facts()
    assert p["housekeeping_list"] == "0-1,32-33"
    assert p["workers_list"] == "2-31"
    assert p["siblings_list"] == "34-63"
    assert p["workqueue_mask"] == "00000003,00000003"
    assert p["workers_by_node"] == {"0": list(range(2, 32))}


def test_two_socket_interleaved_numbering():
    # Node 0 = socket 0 = even CPUs; its two lowest core ids are on CPUs 0 and 2 (+16 siblings).
    p = plan_isolation(topo("two-socket")).facts()
    assert p["housekeeping_by_node"] == {"0": [0, 2, 16, 18], "1": [1, 3, 17, 19]}
    assert p["housekeeping_list"] == "0-3,16-19"
    assert p["workers_by_node"] == {"0": [4, 6, 8, 10, 12, 14], "1": [5, 7, 9, 11, 13, 15]}
    assert p["siblings_list"] == "20-31"
    assert p["workqueue_mask"] == "000f000f"


def test_this_machine_one_housekeeping_core():
    p = plan_isolation(topo("this-machine"), housekeeping_per_node=1).facts()
    assert (p["housekeeping"], p["workers"], p["siblings"]) == ([0], [1], [])
    assert p["siblings_list"] == "" and p["workqueue_mask"] == "1"


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("h", [1, 2, 3])
@pytest.mark.parametrize("prefer_irq", [False, True])
def test_plan_partitions_every_cpu_by_whole_cores(name, h, prefer_irq):
    t = topo(name)
    min_cores = min(len(t.cores_in_node(n)) for n in t.nodes if t.nodes[n])
    if h >= min_cores:
        with pytest.raises(PlanError):
            plan_isolation(t, h, prefer_irq)
        return
    p = plan_isolation(t, h, prefer_irq)
    hk, workers, sibs = set(p.housekeeping), set(p.workers), set(p.siblings)
    assert not (hk & workers) and not (hk & sibs) and not (workers & sibs)
    assert hk | workers | sibs == {c.id for c in t.cpus}
    for core in t.cores:
        cpus = set(core.cpus)
        if cpus & hk:
            assert cpus <= hk  # SMT-complete housekeeping
        else:
            assert cpus & workers == {core.cpus[0]}  # one worker per core, on its first thread
            assert cpus - workers <= sibs
    for node, cpus in p.housekeeping_by_node.items():
        assert len(cpus) == h * t.threads_per_core
        assert set(cpus) <= set(t.nodes[node])
    assert parse_cpumask(p.workqueue_mask) == p.housekeeping
    f = p.facts()
    assert parse_cpulist(f["workers_list"]) == f["workers"]
    assert parse_cpulist(f["isolated_list"]) == sorted(workers | sibs)


def test_prefer_irq_cores_on_c8i():
    # NIC IRQs of node 0 are delivered to CPUs 5 (twice) and 6; NVMe IRQs of node 1 to CPU 40
    # and its sibling 136; node 2 has no device IRQs and keeps the lowest core ids.
    p = plan_isolation(topo("c8i-metal-48xl"), prefer_irq_cores=True).facts()
    assert p["housekeeping_by_node_list"] == {
        "0": "5-6,101-102",
        "1": "32,40,128,136",
        "2": "64-65,160-161",
    }
    assert p["chosen_by"] == {"0": "device IRQs", "1": "device IRQs", "2": "lowest core ids"}
    assert 2 in p["workers"] and 5 not in p["workers"] and 33 in p["workers"]


def test_prefer_irq_cores_ignores_irqs_allowed_everywhere():
    snap = copy.deepcopy(snapshot("c8i-metal-48xl"))
    for irq in snap["irqs"]:
        irq["effective_affinity_list"] = None  # an old kernel: only smp_affinity (all CPUs)
    p = plan_isolation(topology_from_snapshot(snap), prefer_irq_cores=True).facts()
    assert p["housekeeping_list"] == "0-1,32-33,64-65,96-97,128-129,160-161"


def test_prefer_irq_cores_without_irq_list_falls_back():
    p = plan_isolation(topo("two-socket"), prefer_irq_cores=True).facts()
    assert p["housekeeping_list"] == "0-3,16-19"
    assert set(p["chosen_by"].values()) == {"lowest core ids"}


def test_housekeeping_must_leave_workers_in_every_node():
    t = topo("c8i-metal-48xl")
    assert len(plan_isolation(t, 31).workers) == 3  # one worker core left per node
    with pytest.raises(PlanError) as err:
        plan_isolation(t, 32)
    msg = str(err.value)
    assert msg == (
        "c8i-metal-48xl: housekeeping_per_node=32 leaves no worker cores on NUMA node 0, "
        "which has 32 physical cores; expected at most 31"
    )


def test_this_machine_default_is_a_clear_error():
    with pytest.raises(PlanError, match=r"housekeeping_per_node=2 .* NUMA node 0, which has 2 "):
        plan_isolation(topo("this-machine"))


@pytest.mark.parametrize("h", [0, -1, "2", 1.5, True, None])
def test_housekeeping_count_must_be_a_whole_number(h):
    with pytest.raises(PlanError, match="housekeeping_per_node: expected a whole number >= 1"):
        plan_isolation(topo("c8i-metal-48xl"), h)


def test_memory_only_nodes_are_skipped():
    snap = copy.deepcopy(snapshot("xeon-6543p-b"))
    snap["nodes"]["1"] = {"cpulist": "", "hugepages_2m": "0"}  # a CXL memory expander
    p = plan_isolation(topology_from_snapshot(snap)).facts()
    assert list(p["workers_by_node"]) == ["0"]


# -- the Ansible filters -----------------------------------------------------------------------


def test_filter_functions():
    snap = snapshot("c8i-metal-48xl")
    plan = filters.isolation_plan(snap)
    assert plan == plan_isolation(topology_from_snapshot(snap)).facts()
    # the snapshot may come as JSON text (a registered stdout), and numbers as strings (-e)
    same = filters.isolation_plan(json.dumps(snap), "2", "false")
    assert same == plan
    assert filters.isolation_plan(snap, 2, "yes")["chosen_by"]["0"] == "device IRQs"
    assert filters.cpulist([5, 0, 1, 2]) == "0-2,5"
    assert filters.cpulist("2-3,1") == "1-3"
    assert filters.parse_cpulist("0-2,5") == [0, 1, 2, 5]
    assert filters.cpumask([0, 1], 40) == "00,00000003"
    assert filters.parse_cpumask("00000003,00000001") == [0, 32, 33]
    assert filters.topology(snap)["cores"] == 96
    assert set(filters.FilterModule().filters()) >= {"isolation_plan", "cpulist", "cpumask"}


def test_filter_can_return_the_planners_message_instead_of_raising():
    # The isolation_plan role fails with this message alone (no Ansible templating preamble).
    got = filters.isolation_plan(snapshot("this-machine"), 2, False, on_error="return")
    assert got == {
        "error": "this-machine: housekeeping_per_node=2 leaves no worker cores on NUMA node 0, "
        "which has 2 physical cores; expected at most 1"
    }
    bad_h = filters.isolation_plan(snapshot("c8i-metal-48xl"), "x", on_error="return")
    assert bad_h == {
        "error": "socketlab.lab: housekeeping_per_node: expected a whole number, got 'x'"
    }
    ok = filters.isolation_plan(snapshot("this-machine"), 1, on_error="return")
    assert "error" not in ok and ok["workers"] == [1]


def test_filter_errors_are_ansible_filter_errors():
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match="expected at most 1"):
        filters.isolation_plan(snapshot("this-machine"))
    with pytest.raises(AnsibleFilterError, match="housekeeping_per_node: expected a whole number"):
        filters.isolation_plan(snapshot("c8i-metal-48xl"), "two")
    with pytest.raises(AnsibleFilterError, match="not JSON"):
        filters.isolation_plan("{nope")
    with pytest.raises(AnsibleFilterError):
        filters.cpumask([64], 64)


def test_filters_in_a_real_playbook(tmp_path):
    # ansible-playbook finds the checkout's collection through ansible_env()'s collections path.
    playbook = tmp_path / "plan.yml"
    out = tmp_path / "plan.json"
    playbook.write_text(
        f"""
- name: Plan from a fixture
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Plan
      ansible.builtin.copy:
        dest: {out}
        content: "{{{{ lookup('file', '{FIXTURES / "c8i-metal-48xl.json"}') | from_json
                    | socketlab.lab.isolation_plan(housekeeping_per_node=2) | to_json }}}}"
        mode: "0644"
    - name: Bad H fails with the planner's message
      ansible.builtin.debug:
        msg: "{{{{ lookup('file', '{FIXTURES / "c8i-metal-48xl.json"}') | from_json
                 | socketlab.lab.isolation_plan(housekeeping_per_node=40) }}}}"
      register: bad
      ignore_errors: true
    - name: Check
      ansible.builtin.assert:
        that:
          - bad is failed
          - "'expected at most 31' in bad.msg"
          - "([0, 1, 32, 33] | socketlab.lab.cpumask(64)) == '00000003,00000003'"
          - "([0, 1, 2, 7] | socketlab.lab.cpulist) == '0-2,7'"
"""
    )
    bindir = Path(sys.executable).parent
    proc = subprocess.run(
        [str(bindir / "ansible-playbook"), "-i", str(paths.DEFAULT_INVENTORY), str(playbook)],
        capture_output=True,
        text=True,
        timeout=300,
        env=paths.ansible_env(),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    plan = json.loads(out.read_text())
    assert plan["workers_list"] == "2-31,34-63,66-95"
    assert plan["workqueue_mask"] == ",".join(["00000003"] * 6)


# ---------------------------------------------------------------- knob targets per role
def _targets(snap: dict, **over):
    plan = filters.isolation_plan(snap)
    args = {
        "sys_root": "/sys",
        "proc_root": "/proc",
        "thp_mode": "madvise",
        "numa_balancing": "0",
        "hugepages_per_node": "4",
        "governor": "performance",
        **over,
    }
    return plan, filters.isolation_targets(json.dumps(snap), plan, **args)


def test_targets_give_each_role_its_knobs_on_c8i():
    plan, t = _targets(snapshot("c8i-metal-48xl"))
    assert t["workqueue_mask"] == [
        {
            "name": "workqueue cpumask",
            "path": "/sys/devices/virtual/workqueue/cpumask",
            "value": plan["workqueue_mask"],
            "kind": "cpumask",
        }
    ]
    assert [(k["path"], k["value"], k["kind"]) for k in t["vm_tuning"]] == [
        ("/sys/kernel/mm/transparent_hugepage/enabled", "madvise", "choice"),
        ("/proc/sys/kernel/numa_balancing", "0", "int"),
    ]
    assert [k["path"] for k in t["hugepages"]] == [
        f"/sys/devices/system/node/node{n}/hugepages/hugepages-2048kB/nr_hugepages"
        for n in (0, 1, 2)
    ]
    assert {k["value"] for k in t["hugepages"]} == {"4"}
    govs = t["cpufreq_governor"]
    assert len(govs) == 192 and govs[10]["path"].endswith("/cpu10/cpufreq/scaling_governor")
    assert govs[10]["name"] == "cpu10 cpufreq governor" and govs[10]["kind"] == "text"
    assert t["knobs"] == t["workqueue_mask"] + t["vm_tuning"] + t["hugepages"] + govs
    assert t["summary"][-1] == "cpufreq governor = performance on 192 CPU(s)"
    assert "node2 2 MiB huge pages = 4" in t["summary"]


def test_targets_follow_the_settings_and_the_host():
    snap = copy.deepcopy(snapshot("c8i-metal-48xl"))
    for cpu in snap["cpus"].values():
        cpu["scaling_governor"] = None  # a VM without cpufreq
    _, t = _targets(
        snap,
        hugepages_per_node=0,
        sys_root="/tmp/s",
        proc_root="/tmp/p",
        thp_mode="never",
        numa_balancing=1,
    )
    assert t["hugepages"] == [] and t["cpufreq_governor"] == []
    assert [(k["path"], k["value"]) for k in t["vm_tuning"]] == [
        ("/tmp/s/kernel/mm/transparent_hugepage/enabled", "never"),
        ("/tmp/p/sys/kernel/numa_balancing", "1"),
    ]
    assert t["summary"][-1] == "cpufreq governor = performance on 0 CPU(s)"


@pytest.mark.parametrize(
    ("over", "message"),
    [
        (
            {"thp_mode": "sometimes"},
            "thp_mode: expected one of always, madvise, never, got 'sometimes'",
        ),
        ({"hugepages_per_node": "many"}, "hugepages_per_node: expected a whole number, got 'many'"),
    ],
)
def test_targets_refuse_bad_settings_in_one_line(over, message):
    with pytest.raises(filters.AnsibleFilterError) as exc:
        _targets(snapshot("c8i-metal-48xl"), **over)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_no_jinja_loop_builds_knob_lists():
    """isolate.yml is the sequence of roles: the knob lists come from the filter above."""
    text = (paths.COLLECTION / "playbooks/isolate.yml").read_text()
    assert "{%" not in text and "selectattr" not in text and "search" not in text
    for role in ("workqueue_mask", "vm_tuning", "hugepages", "cpufreq_governor"):
        assert f'isolation_{role}_knobs: "{{{{ socketlab_iso_targets.{role} }}}}"' in text
