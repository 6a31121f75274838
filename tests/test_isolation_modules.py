"""The isolation modules (socketlab.lab.*, the collection's plugins/modules) run by real Ansible
against knob files in a temp tree.

The kernel's own knobs are exercised in test_isolation_playbooks.py; here the knobs are plain
files, so every rule (record before write, record once, restore exactly, check mode writes
nothing, missing knobs are "not available", drift is named) is shown without touching the host.
Steps are batched into one ansible-playbook run per test to keep the run short on 2 CPUs.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from socketlab.paths import ansible_env

REPO = Path(__file__).resolve().parents[1]
PLAYBOOK = REPO / ".venv" / "bin" / "ansible-playbook"
PR_SET_CHILD_SUBREAPER = 36


# the collection's module_utils, imported as Ansible's collection loader would name it (the
# checkout's root holds ansible_collections/ and is on sys.path for the tests)
utils = importlib.import_module("ansible_collections.socketlab.lab.plugins.module_utils.isolation")


def run_steps(tmp_path: Path, *steps: tuple) -> list[dict]:
    """Run (module, args[, task keywords]) steps in one play on localhost; return each result.

    Each step's result is registered and saved, failed or not; task keywords such as
    {"check_mode": True, "diff": True} apply to that step only.
    """
    out = tmp_path / "results.json"
    tasks = []
    for index, step in enumerate(steps):
        name, args, *keywords = step
        task = {
            "name": f"step {index}",
            name: args,
            "register": f"step{index}",
            "ignore_errors": True,
            **(keywords[0] if keywords else {}),
        }
        tasks.append(task)
    results = "[" + ", ".join(f"step{i}" for i in range(len(steps))) + "]"
    tasks.append(
        {
            "name": "save",
            "ansible.builtin.copy": {
                "content": "{{ " + results + " | to_json }}",
                "dest": str(out),
            },
            "check_mode": False,
            "diff": False,
        }
    )
    play = [{"name": "modules", "hosts": "localhost", "gather_facts": False, "tasks": tasks}]
    (tmp_path / "play.yml").write_text(json.dumps(play))
    proc = subprocess.run(
        [
            str(PLAYBOOK),
            "-c",
            "local",
            "-i",
            "localhost,",
            str(tmp_path / "play.yml"),
            "-e",
            "ansible_python_interpreter=/usr/bin/python3",
        ],
        capture_output=True,
        text=True,
        env=ansible_env(),
        cwd=REPO,
        timeout=300,
    )
    assert out.exists(), proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    out.unlink()
    return data


@pytest.fixture
def tree(tmp_path):
    """A fake sysfs/procfs: THP, numa_balancing, a workqueue mask and an IRQ folder."""
    files = {
        "thp": ("sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never"),
        "numa": ("proc/sys/kernel/numa_balancing", "1"),
        "wq": ("sys/devices/virtual/workqueue/cpumask", "f"),
        "irq1": ("proc/irq/1/smp_affinity_list", "0-3"),
        "irq2": ("proc/irq/2/smp_affinity_list", "3"),
        "irqdef": ("proc/irq/default_smp_affinity", "f"),
    }
    paths = {}
    for key, (rel, value) in files.items():
        path = tmp_path / "root" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(value + "\n")
        paths[key] = path
    (tmp_path / "root/proc/irq/1/virtio0-config").mkdir()
    paths["state"] = tmp_path / "state" / "isolation-test.json"
    return paths


def read(path: Path) -> str:
    return path.read_text().strip()


def test_values_compare_by_kind():
    assert utils.normalize("choice", "always [madvise] never") == "madvise"
    assert utils.same("choice", "always [madvise] never", "madvise")
    assert utils.same("cpumask", "00000003,00000003", "300000003")
    assert utils.same("cpulist", "0,1,2,5", "0-2,5")
    assert not utils.same("int", "1", "0")
    assert utils.kind_for("/proc/irq/9/smp_affinity_list") == "cpulist"
    assert utils.kind_for("/sys/devices/virtual/workqueue/cpumask") == "cpumask"


def test_state_file_is_replaced_atomically(tmp_path):
    path = tmp_path / "s" / "state.json"
    utils.write_state(str(path), {"a": 1})
    utils.write_state(str(path), {"a": 2})
    assert json.loads(path.read_text()) == {"a": 2}
    assert [p.name for p in path.parent.iterdir()] == ["state.json"]  # no temp file left
    assert path.stat().st_mode & 0o777 == 0o600


def test_record_once_write_check_mode_and_restore(tmp_path, tree):
    state = str(tree["state"])
    numa, thp, wq = str(tree["numa"]), str(tree["thp"]), str(tree["wq"])
    snap = {"path": state, "host": "test", "knobs": [thp, numa, wq, wq + ".missing"]}
    knob = {"path": numa, "value": "0", "state_file": state}
    (refused, first, check, wrote, again, thp_same, second, missing) = run_steps(
        tmp_path,
        ("socketlab.lab.knob", knob),
        ("socketlab.lab.isolation_state", snap),
        ("socketlab.lab.knob", knob, {"check_mode": True, "diff": True}),
        ("socketlab.lab.knob", knob),
        ("socketlab.lab.knob", knob),
        ("socketlab.lab.knob", {"path": thp, "value": "madvise", "state_file": state}),
        ("socketlab.lab.isolation_state", snap),
        ("socketlab.lab.knob", {"path": wq + ".missing", "value": "1", "state_file": state}),
    )
    # Nothing is written without a record to restore.
    assert refused["failed"] and "no isolation state file" in refused["msg"]
    assert first["changed"] and len(first["recorded"]) == 3
    assert first["unavailable"] == [wq + ".missing"]
    # Check mode reports the change with a diff and writes nothing (the write came later).
    assert check["changed"] and check["diff"]["after"] == f"{numa} = 0\n"
    assert wrote["changed"] and wrote["changed_paths"] == [f"{numa}: 1 -> 0"]
    assert not again["changed"]
    assert not thp_same["changed"]  # "always [madvise] never" already is madvise
    # A second snapshot keeps the original value (1), not the current one (0).
    assert not second["changed"]
    recorded = json.loads(tree["state"].read_text())["files"]
    assert recorded[numa] == {"value": "1", "kind": "int"}
    assert missing["skipped"] and "not available on this host" in missing["msg"]
    assert read(tree["numa"]) == "0"

    check_restore, restored, nothing = run_steps(
        tmp_path,
        ("socketlab.lab.isolation_state", {"path": state, "state": "absent"}, {"check_mode": True}),
        ("socketlab.lab.isolation_state", {"path": state, "state": "absent"}, {"diff": True}),
        ("socketlab.lab.isolation_state", {"path": state, "state": "absent"}),
    )
    assert check_restore["restored"] == [numa]
    assert restored["restored"] == [numa] and restored["diff"]["after"] == f"{numa} = 1\n"
    assert read(tree["numa"]) == "1" and read(tree["thp"]) == "always [madvise] never"
    assert not tree["state"].exists()
    assert not tree["state"].parent.exists()  # the snapshot made the folder; restore removes it
    assert nothing["nothing_to_restore"] and not nothing["changed"]
    assert nothing["msg"] == f"nothing to restore: no state file {state}"


def test_irq_affinity_keeps_locality_and_verify_names_drift(tmp_path, tree):
    tree["state"].parent.mkdir()  # a folder that was there before isolation stays after restore
    state = str(tree["state"])
    irq_dir = str(tree["irq1"].parent.parent)
    irqs = {"cpus": "0,2", "irq_dir": irq_dir, "state_file": state}
    numa = {"name": "numa", "path": str(tree["numa"]), "value": "1"}
    check_args = {"state_file": state, "irq_dir": irq_dir, "cpus": "0,2", "knobs": [numa]}
    globs = [irq_dir + "/*/smp_affinity_list", irq_dir + "/default_smp_affinity"]
    _, check, moved, again, ok = run_steps(
        tmp_path,
        ("socketlab.lab.isolation_state", {"path": state, "globs": globs}),
        ("socketlab.lab.irq_affinity", irqs, {"check_mode": True}),
        ("socketlab.lab.irq_affinity", irqs),
        ("socketlab.lab.irq_affinity", irqs),
        ("socketlab.lab.isolation_check", check_args),
    )
    assert check["changed"] and check["moved"] == ["1: 0-3 -> 0,2", "2: 3 -> 0,2"]
    # An IRQ keeps the housekeeping CPUs it already had (locality); others get all of them.
    assert moved["moved"] == ["1: 0-3 -> 0,2", "2: 3 -> 0,2"] and moved["refused"] == []
    assert (read(tree["irq1"]), read(tree["irq2"]), read(tree["irqdef"])) == (
        "0,2",
        "0,2",
        "00000005",
    )
    assert not again["changed"]
    assert not ok.get("failed") and {"irq affinity", "numa"} <= set(ok["checked"])

    tree["irq2"].write_text("1-3\n")
    tree["numa"].write_text("0\n")
    bad, _ = run_steps(
        tmp_path,
        ("socketlab.lab.isolation_check", check_args),
        ("socketlab.lab.isolation_state", {"path": state, "state": "absent"}),
    )
    assert bad["failed"]
    assert bad["drifted"] == [
        f"numa: expected 1, found 0 ({tree['numa']})",
        "irq affinity: 1 IRQ(s) outside housekeeping CPUs 0,2: 2=1-3",
    ]
    assert bad["msg"].startswith("2 knob(s) drifted from the isolation plan: numa: expected 1")
    assert (read(tree["irq1"]), read(tree["irq2"]), read(tree["irqdef"])) == ("0-3", "3", "f")
    assert not tree["state"].exists() and tree["state"].parent.is_dir()


def test_preflight_and_service_confinement_say_why(tmp_path, tree):
    preflight, cpuset = run_steps(
        tmp_path,
        ("socketlab.lab.isolation_preflight", {"irq_dir": str(tmp_path / "irq")}),
        ("socketlab.lab.systemd_cpuset", {"cpus": "0", "state_file": str(tree["state"])}),
    )
    assert preflight["failed"]
    assert preflight["msg"] == (
        f"this host has no {tmp_path / 'irq'}, so IRQ affinity can't be set: not isolating; "
        "nothing was changed"
    )
    pid1 = Path("/proc/1/comm").read_text().strip()
    if pid1 == "systemd":
        assert cpuset["applies"] is True
    else:
        assert cpuset["skipped"] and cpuset["applies"] is False
        assert f"PID 1 is '{pid1}', not systemd" in cpuset["msg"]


def test_irqbalance_is_stopped_by_pid_and_restarted_by_restore(tmp_path, tree):
    """irqbalance isn't installed here, so a stand-in process named irqbalance (a copy of sleep)
    plays it: found by name, stopped by its PID, started again by restore from its recorded argv.
    """
    names = [p.read_text().strip() for p in Path("/proc").glob("[0-9]*/comm") if p.exists()]
    if "irqbalance" in names:
        pytest.skip("a real irqbalance runs here; this test would stop it")
    binary = tmp_path / "bin" / "irqbalance"
    binary.parent.mkdir()
    shutil.copy("/bin/sleep", binary)
    stand_in = subprocess.Popen([str(binary), "300"], start_new_session=True)
    state = str(tree["state"])
    # Become the subreaper for the restarted stand-in (restore detaches it), so it can be reaped
    # here: PID 1 on this VM does not reap orphans.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    restarted = []
    try:
        snap, stop, check, _ = run_steps(
            tmp_path,
            ("socketlab.lab.isolation_state", {"path": state, "processes": ["irqbalance"]}),
            ("socketlab.lab.irqbalance", {"state_file": state}),
            (
                "socketlab.lab.isolation_check",
                {"state_file": state, "cpus": "0", "irq_dir": str(tmp_path / "none")},
            ),
            ("socketlab.lab.isolation_state", {"path": state, "state": "absent"}),
        )
        assert snap["state"]["processes"]["irqbalance"]["pids"] == [stand_in.pid]
        assert stop.get("stopped") == [stand_in.pid], stop
        assert stand_in.wait(timeout=10) == -15  # SIGTERM, to exactly that PID
        assert not check.get("failed") and "irqbalance stopped" in check["checked"]
        restarted = [
            int(p.parent.name)
            for p in Path("/proc").glob("[0-9]*/comm")
            if p.exists() and p.read_text().strip() == "irqbalance"
        ]
        assert len(restarted) == 1 and restarted[0] != stand_in.pid
        cmdline = Path(f"/proc/{restarted[0]}/cmdline").read_bytes().split(b"\0")
        assert cmdline[:2] == [str(binary).encode(), b"300"]
    finally:
        with contextlib.suppress(ProcessLookupError):
            stand_in.kill()
        for pid in restarted:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
                os.waitpid(pid, 0)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
