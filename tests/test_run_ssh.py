"""`orchestrate run` over two sshd hosts in network namespaces: fan-out, provenance, and a
host that goes away mid-campaign."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from socketlab.cli import main
from socketlab.store import Store, store_path
from tests.support.campaign import EMIT, PY, ok_count, stored, write_spec
from tests.support.procs import alive, wait_for
from tests.support.shell import bait_untouched, shell_bait

pytestmark = pytest.mark.netns


def inventory(pool, tmp_path: Path) -> Path:
    # Each host gets its own work folder: the namespaces share this machine's filesystem.
    extra = {h.name: {"socketlab_workroot": str(tmp_path / "work")} for h in pool.hosts}
    return pool.inventory(tmp_path / "hosts.yml", group="testhosts", extra=extra)


def one_experiment_spec(
    tmp_path: Path, campaign: str, name: str, command: list, matrix: dict | None = None
) -> Path:
    """tmp_path/spec.yaml: campaign on the testhosts group, one experiment (30 s timeout, JSON-lines
    metrics) swept over matrix where given."""
    sweep = {"sweep": {"matrix": matrix}} if matrix else {}
    experiment = {"name": name, "timeout_s": 30, "command": command, **sweep}
    return write_spec(
        tmp_path / "spec.yaml",
        {
            "campaign": campaign,
            "hosts": {"group": "testhosts"},
            "experiments": [{**experiment, "metrics": {"parser": "jsonl"}}],
        },
    )


def test_spec_fans_out_over_both_hosts_with_provenance(ssh_pool, tmp_path):
    keep, evil = shell_bait(tmp_path)
    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "campaign": "ssh-fanout",
            "hosts": {"group": "testhosts"},
            "builds": {"native": {"source": ".", "target": "build/cc/ladder"}},
            "defaults": {"timeout_s": 60, "collectors": ["proc_peakmem", "proc_noise"]},
            "experiments": [
                {
                    "name": "ladder",
                    "build": "native",
                    "repetitions": 2,
                    "command": "build/cc/ladder --kernel avx2-read --size 16K --seconds 0.05 "
                    "--reps 1",
                    "metrics": {"parser": "jsonl"},
                    "sanity": {"required_metrics": ["bw_total"]},
                },
                {
                    "name": "argv",
                    "command": [PY, "-c", EMIT, "{{ word }}"],
                    "sweep": {"matrix": {"word": [evil, "plain"]}},
                },
                {
                    "name": "hang",
                    "timeout_s": 1,
                    "collectors": [],
                    "command": [
                        "sh",
                        "-c",
                        f"sleep 60 & echo $! > {tmp_path}/{{{{ host }}}}.bg; wait",
                    ],
                },
            ],
        },
    )
    results = tmp_path / "results"
    argv = [
        "run",
        str(spec),
        "--results",
        str(results),
        "--inventory",
        str(inventory(ssh_pool, tmp_path)),
        "--plain",
    ]
    assert main(argv) == 1  # the hang runs time out
    runs = stored(results, "ssh-fanout")
    names = {h.name for h in ssh_pool.hosts}
    hung = {k: runs.pop(k) for k in [k for k, r in runs.items() if r.experiment == "hang"]}
    assert sorted(r.host for r in hung.values()) == sorted(names)
    for r in hung.values():  # killed on the host, whole group, by the agent
        assert r.status == "timeout" and "killed after 1 s" in r.reason
        background = int((tmp_path / f"{r.host}.bg").read_text())
        wait_for(lambda b=background: not alive(b), 5, f"PID {background} to be gone")
    assert len(runs) == 8  # (2 ladder reps + 2 argv points) x 2 hosts, each once
    assert {r.host for r in runs.values()} == names
    for host in names:
        mine = [r for r in runs.values() if r.host == host]
        assert sorted((r.experiment, r.repetition) for r in mine) == [
            ("argv", 0),
            ("argv", 0),
            ("ladder", 0),
            ("ladder", 1),
        ]
    assert {r.status for r in runs.values()} == {"ok"}
    profiles = {r.host: r.host_profile for r in runs.values()}
    assert len(set(profiles.values())) == 2  # same hardware, still distinct hosts
    for r in runs.values():
        raw = Path(r.raw_dir)
        assert {"proc_peakmem.jsonl", "proc_noise.jsonl"} <= set(r.extra["collectors"])
        assert (raw / "collectors" / "proc_noise.jsonl").stat().st_size > 0
        assert r.fingerprint_before and r.fingerprint_after and r.spec_sha256
        if r.experiment == "ladder":  # the manifest names the binary the host built and ran
            built = (
                tmp_path / "work" / r.host / "builds" / r.build["build_hash"] / "build/cc/ladder"
            )
            sha = hashlib.sha256(built.read_bytes()).hexdigest()
            assert r.build["binaries"]["build/cc/ladder"] == sha and r.build["compiler"]
        else:
            literal = json.loads((raw / "stdout").read_text().splitlines()[0])
            assert literal == [r.params["word"]]
    assert bait_untouched(tmp_path, keep)
    # each host built in its own work folder: one manifest per host, same source hash
    builds = {r.host: r.build for r in runs.values() if r.experiment == "ladder"}
    assert len({b["source_hash"] for b in builds.values()}) == 1
    # a second run finds everything stored and runs nothing (timeouts only with --rerun-failed)
    assert main(argv) == 0
    assert {k: r.attempts for k, r in stored(results, "ssh-fanout").items()} == {
        k: 1 for k in [*runs, *hung]
    }


@pytest.mark.slow
def test_host_lost_mid_campaign_then_rerun_failed(ssh_pool, tmp_path):
    points = 6
    command = [PY, "-c", "import time, sys; time.sleep(0.5); " + EMIT, "{{ i }}"]
    spec = one_experiment_spec(tmp_path, "ssh-outage", "slow", command, {"i": list(range(points))})
    results = tmp_path / "results"
    db = store_path("ssh-outage", results)
    pool = ssh_pool
    inv = inventory(pool, tmp_path)
    lost, other = pool.hosts[0], pool.hosts[1]
    veth = f"sl{pool.tag}o0"  # the outer end of host 0's link (tests/support/netns.py)
    run = ["run", str(spec), "--results", str(results), "--inventory", str(inv), "--plain"]
    restarted = False
    try:
        argv = [sys.executable, "-m", "socketlab.cli", *run]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for(lambda: ok_count(db, lost.name) >= 2, 90, "two runs on the first host")
            # The host vanishes: sshd stops and its link goes down (open sessions die too).
            pool.stop(lost)
            subprocess.run(["ip", "link", "set", veth, "down"], check=True)
            assert proc.wait(timeout=120) == 1
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            subprocess.run(["ip", "link", "set", veth, "up"], check=False)
        runs = stored(results, "ssh-outage")
        assert len(runs) == 2 * points
        mine = [r for r in runs.values() if r.host == other.name]
        assert len(mine) == points and {r.status for r in mine} == {"ok"}  # the other finished
        gone = [r for r in runs.values() if r.host == lost.name]
        failed = [r for r in gone if r.status != "ok"]
        assert 2 <= points - len(failed) < points and failed
        assert all(r.status == "failed" and "unreachable" in r.reason for r in failed)
        done_before = {r.run_key: r.started for r in gone if r.status == "ok"}

        pool.restart(lost)
        restarted = True
        assert main([*run, "--rerun-failed"]) == 0
        after = stored(results, "ssh-outage")
        assert len(after) == 2 * points and {r.status for r in after.values()} == {"ok"}
        for key, started in done_before.items():
            assert after[key].started == started and after[key].attempts == 1
        assert {after[r.run_key].attempts for r in failed} == {2}
    finally:  # the session's hosts serve other tests: bring this one back whatever happened
        subprocess.run(["ip", "link", "set", veth, "up"], check=False)
        if not restarted:
            pool.restart(lost)


def test_host_unreachable_at_facts_is_recorded_then_retried(ssh_pool, tmp_path, capsys):
    command = [PY, "-c", EMIT, "{{ i }}"]
    spec = one_experiment_spec(tmp_path, "ssh-facts-down", "emit", command, {"i": [1, 2]})
    results = tmp_path / "results"
    pool = ssh_pool
    dead, alive_host = pool.hosts[0], pool.hosts[1]
    base = ["--results", str(results)]
    run = ["run", str(spec), *base, "--inventory", str(inventory(pool, tmp_path)), "--plain"]
    restarted = False
    pool.stop(dead)  # down before facts are gathered: no point of it can even be planned
    try:
        assert main(run) == 1
        runs = stored(results, "ssh-facts-down")
        assert sorted((r.host, r.status) for r in runs.values()) == [(alive_host.name, "ok")] * 2
        with Store(store_path("ssh-facts-down", results), create=False) as store:
            [note] = store.host_failures("ssh-facts-down")
        assert (note.host, note.stage, note.attempts) == (dead.name, "facts", 1)
        assert dead.address in note.reason or dead.name in note.reason, note.reason
        capsys.readouterr()
        assert main(["status", "ssh-facts-down", *base]) == 0
        shown = capsys.readouterr().out
        assert "hosts not reached" in shown and f"{dead.name}: facts: {note.reason}" in shown
        assert main(["status", *base]) == 0
        assert "ssh-facts-down: ok 2; 1 host(s) not reached" in capsys.readouterr().out
        assert main(["report", "ssh-facts-down", *base]) == 0
        report = (results / "ssh-facts-down" / "report.md").read_text()
        assert "## Hosts not reached" in report and f"| {dead.name} | facts |" in report

        # still down: --rerun-failed tries it again (the note counts the sessions), and leaves
        # the reachable host's runs alone
        assert main([*run, "--rerun-failed"]) == 1
        with Store(store_path("ssh-facts-down", results), create=False) as store:
            [again] = store.host_failures("ssh-facts-down")
        assert again.attempts == 2 and again.first_failed == note.first_failed

        pool.restart(dead)
        restarted = True
        assert main(run) == 0  # a plain run reaches it, runs its points, clears the note
        after = stored(results, "ssh-facts-down")
        assert len(after) == 4 and {r.status for r in after.values()} == {"ok"}
        assert sorted(r.host for r in after.values()) == sorted([dead.name, alive_host.name] * 2)
        for key, r in runs.items():  # the first session's runs were not redone
            assert after[key].attempts == 1 and after[key].started == r.started
        with Store(store_path("ssh-facts-down", results), create=False) as store:
            assert store.host_failures("ssh-facts-down") == []
        capsys.readouterr()
        assert main(["status", "ssh-facts-down", *base]) == 0
        assert "not reached" not in capsys.readouterr().out
    finally:  # the session's hosts serve other tests
        if not restarted:
            pool.restart(dead)


def test_busy_host_is_noted_then_cleared_once_held(ssh_pool, tmp_path, capsys):
    from socketlab.execute.ssh import SshExecutor
    from socketlab.inventory import load_inventory

    spec = one_experiment_spec(tmp_path, "ssh-busy", "emit", [PY, "-c", EMIT, "1"])
    results = tmp_path / "results"
    inv = inventory(ssh_pool, tmp_path)
    busy = next(h for h in load_inventory(inv) if h.name == ssh_pool.hosts[0].name)
    run = ["run", str(spec), "--results", str(results), "--inventory", str(inv), "--plain"]
    other = SshExecutor(busy, workroot=str(tmp_path / "work"))  # a second orchestrator
    other.connect()
    try:
        other.install_tools(tmp_path / "scratch")
        other.lock({"campaign": "someone-else"})
        assert main(run) == 1
        with Store(store_path("ssh-busy", results), create=False) as store:
            [note] = store.host_failures("ssh-busy")
        assert (note.host, note.stage) == (busy.name, "lock")
        assert "busy" in note.reason and "someone-else" in note.reason
        assert [r.host for r in stored(results, "ssh-busy").values()] == [ssh_pool.hosts[1].name]
        capsys.readouterr()
        assert main(["status", "ssh-busy", "--results", str(results)]) == 0
        assert f"{busy.name}: lock: " in capsys.readouterr().out
    finally:
        other.close()  # the agent exits and frees the lock
    assert main(run) == 0
    assert sorted(r.host for r in stored(results, "ssh-busy").values()) == sorted(
        h.name for h in ssh_pool.hosts
    )
    with Store(store_path("ssh-busy", results), create=False) as store:
        assert store.host_failures("ssh-busy") == []
