"""`orchestrate plan` through the real CLI: localhost, two sshd hosts, and past-run estimates."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

GOOD = Path(__file__).parent / "specs" / "good"
LOCAL_INVENTORY = (
    "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
    '      ansible_python_interpreter: "{{ ansible_playbook_python }}"\n'
)


def orchestrate(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "socketlab.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def inventory(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("inv") / "hosts.yml"
    path.write_text(LOCAL_INVENTORY)
    return path


def test_plan_prints_every_point_counts_and_skips(inventory, tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        """\
schema_version: 1
campaign: plan-text
experiments:
  - name: sweep
    command: ["echo", "{{ n }}", "{{ mode }}"]
    sweep: {matrix: {n: [1, 2, 3]}, zip: {mode: [fast, slow]}}
    repetitions: 2
    warmup: 1
  - name: needs-unicorn
    command: "true"
    requires: {flags: [unicorn_cpu_flag]}
"""
    )
    proc = orchestrate("plan", str(spec), "--inventory", str(inventory))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    lines = [line for line in out.splitlines() if line.startswith("  sweep ")]
    assert len(lines) == 3 * 2 * (2 + 1)  # points x (repetitions + warm-up)
    assert sum("warm-up 1" in line for line in lines) == 6
    assert "  sweep            rep 1      n=3 mode=slow: echo 3 slow" in out
    assert "localhost        sweep                     6     12        6" in out
    assert "total: 18 runs (12 measured, 6 warm-up) on 1 host(s)" in out
    assert "needs-unicorn        host localhost lacks CPU flags unicorn_cpu_flag" in out
    # no past runs: the estimate comes from the spec (echo has no --seconds: a ceiling of
    # timeout_s per run, 18 runs with the warm-ups)
    assert "estimated time: at most " in out
    assert "18 runs without --seconds counted at their timeout_s" in out


def test_plan_json_and_repetitions_override(inventory):
    proc = orchestrate(
        "plan",
        str(GOOD / "full.yaml"),
        "--inventory",
        str(inventory),
        "--json",
        "--repetitions",
        "1",
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["campaign"] == "full-example" and len(doc["spec_sha256"]) == 64
    host = doc["hosts"]["localhost"]
    assert len(host["profile_sha256"]) == 64
    assert host["profile"]["topology"]["cpu_online"]
    # housekeeping_per_node: 1 from the spec reaches the planner
    if host["profile"]["isolation"]:
        assert host["profile"]["isolation"]["housekeeping_per_node"] == 1
    assert doc["total_runs"] == len(doc["points"])
    stage = [p for p in doc["points"] if p["experiment"] == "stage"]
    assert len([p for p in stage if p["repetition"] == 0]) == 5  # 6 combos minus 1 excluded
    assert not [p for p in stage if p["repetition"] > 0]
    first = stage[0]
    assert first["argv"][:5] == ["./sram_stage", "--size", "32K", "--threads", "1"]
    assert first["build"] == "sram" and first["collectors"] == ["proc_noise"]
    assert first["env"] == {"OMP_PROC_BIND": "close", "OMP_NUM_THREADS": "1"}
    assert first["sanity"]["required_metrics"] == ["bandwidth"]
    assert doc["estimate"]["source"] == "spec" and doc["estimate"]["past_runs"] == 0


def test_hosts_option_overrides_the_spec(inventory):
    proc = orchestrate(
        "plan", str(GOOD / "minimal.yaml"), "--inventory", str(inventory), "--hosts", "web*"
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("orchestrate: error: --hosts: unknown hosts 'web*'")


def test_estimate_comes_from_past_runs(inventory, tmp_path):
    from socketlab.store import RunRecord, Store, store_path

    results = tmp_path / "results"
    with Store(store_path("minimal", results)) as store:
        for i, seconds in enumerate((2.0, 4.0, 30.0)):
            store.add_run(
                RunRecord(
                    run_key=f"k{i}",
                    campaign="minimal",
                    experiment="hello",
                    host="localhost",
                    repetition=i,
                    params={},
                    status="ok",
                    duration_s=seconds,
                )
            )
    env = {"SOCKETLAB_RESULTS": str(results)}
    args = ("plan", str(GOOD / "minimal.yaml"), "--inventory", str(inventory))
    text = orchestrate(*args, "--repetitions", "5", env=env)
    assert text.returncode == 0, text.stderr
    assert "estimated time: 0m 20s (from 3 past runs; 0 runs unknown)" in text.stdout
    doc = json.loads(orchestrate(*args, "--json", "--results", str(results)).stdout)
    assert doc["estimate"]["seconds"] == 4.0 and doc["estimate"]["past_runs"] == 3
    empty = json.loads(orchestrate(*args, "--json", "--results", str(tmp_path / "none")).stdout)
    assert empty["estimate"]["source"] == "spec"  # no store there: from the spec


@pytest.mark.netns
def test_plan_fans_out_over_two_ssh_hosts(ssh_pool, tmp_path):
    down = {**ssh_pool.hosts[0].inventory_vars(), "ansible_host": "127.0.0.1", "ansible_port": "1"}
    inv = ssh_pool.inventory(tmp_path / "inv.yml", extra={})
    inventory = yaml.safe_load(inv.read_text())
    inventory["all"]["children"]["testhosts"]["hosts"]["downhost"] = down
    inv.write_text(yaml.safe_dump(inventory))
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        """\
schema_version: 1
campaign: fan-out
hosts: {group: testhosts}
isolation: {housekeeping_per_node: 1}
experiments:
  - name: hello
    command: ["echo", "{{ host }}", "{{ facts.source }}", "{{ x }}"]
    sweep: {matrix: {x: [a, b]}}
"""
    )
    proc = orchestrate("plan", str(spec), "--inventory", str(inv), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    names = [h.name for h in ssh_pool.hosts]
    assert sorted(doc["hosts"]) == sorted(names)  # downhost has no profile: no facts
    (skip,) = doc["skipped"]
    assert skip["host"] == "downhost" and skip["reason"].startswith("host unreachable: ")
    for name in names:
        argvs = [p["argv"] for p in doc["points"] if p["host"] == name]
        # facts.source is the hostname each sshd host reports from inside its namespace
        assert argvs == [["echo", name, name, "a"], ["echo", name, name, "b"]]
    assert doc["counts"] == {n: {"hello": {"points": 2, "runs": 2, "warmups": 0}} for n in names}


def test_profile_applies_like_run(inventory, tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        """\
schema_version: 1
campaign: profiled
profiles:
  quick: {defaults: {repetitions: 1}, experiments: {e: {sweep: {matrix: {n: [1]}}}}}
defaults: {repetitions: 3}
experiments:
  - {name: e, command: "echo {{ n }}", sweep: {matrix: {n: [1, 2, 3]}}}
"""
    )
    args = ("plan", str(spec), "--inventory", str(inventory), "--json")
    full = json.loads(orchestrate(*args).stdout)
    quick = json.loads(orchestrate(*args, "--profile", "quick").stdout)
    assert (full["total_runs"], quick["total_runs"]) == (9, 1)
    missing = orchestrate(*args, "--profile", "slow")
    assert missing.returncode == 2 and "slow" in missing.stderr
