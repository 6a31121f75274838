"""socketlab.session: `plan`, `run --dry-run` and `run` take one path (facts gathered once, the
same points and run keys), the library writes provenance and host-failure notes, and facts
gathering passes the inventory's socketlab_state_dir to collectors/host_facts.py."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from pathlib import Path

import pytest
import yaml

from socketlab import session
from socketlab.cli import main
from socketlab.errors import HostError
from socketlab.inventory import InventoryHost, load_inventory
from socketlab.spec.hosts import gather_host_facts
from socketlab.spec.load import load_spec
from tests.support.campaign import EMIT, PY, stored, write_spec


def counting_python(tmp_path: Path) -> tuple[Path, Path]:
    """An interpreter that logs each start's arguments: host_facts.py is the one piped on
    stdin ("-"); the runner's tools start as `python -I -S <file>`."""
    log, wrapper = tmp_path / "starts.log", tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> {log}\nexec {PY} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return wrapper, log


def inventory(tmp_path: Path, python: str = PY, **hosts: dict) -> Path:
    local = {
        "ansible_connection": "local",
        "ansible_python_interpreter": python,
        "socketlab_workroot": str(tmp_path / "work"),
    }
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": local, **hosts}}}))
    return path


def spec_file(tmp_path: Path) -> Path:
    return write_spec(
        tmp_path / "spec.yaml",
        {
            "campaign": "one-path",
            "experiments": [
                {
                    "name": "argv",
                    "command": [PY, "-c", EMIT, "{{ word }}"],
                    "sweep": {"matrix": {"word": ["a", "b"]}},
                    "repetitions": 2,
                }
            ],
        },
    )


def test_plan_dry_run_and_run_share_the_points_and_gather_facts_once(tmp_path, capsys):
    python, log = counting_python(tmp_path)
    inv, spec, results = inventory(tmp_path, str(python)), spec_file(tmp_path), tmp_path / "res"
    args = [str(spec), "--inventory", str(inv), "--results", str(results)]

    assert main(["plan", *args, "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)["points"]
    assert main(["run", *args, "--dry-run"]) == 0
    dry = capsys.readouterr().out
    assert not results.exists()  # a dry run creates nothing
    keys = [line.split()[0] for line in dry.splitlines() if line.startswith("  ")]
    assert len(keys) == len(planned) == 4 and "host localhost: 4 runs to do" in dry

    log.write_text("")
    assert main(["run", *args, "--plain"]) == 0
    capsys.readouterr()
    runs = stored(results, "one-path")
    assert sorted(k[:12] for k in runs) == sorted(keys)  # the keys the dry run showed
    assert [line for line in log.read_text().splitlines() if line.split()[:1] == ["-"]] == ["-"]
    # provenance, written by the library: the spec as run, the host's facts, last-run.json
    folder = results / "one-path"
    spec_sha = load_spec(spec).sha256
    assert (folder / "specs" / f"{spec_sha[:16]}.yaml").read_bytes() == spec.read_bytes()
    assert json.loads((folder / "hosts" / "localhost.json").read_text())["topology"]
    last = json.loads((folder / "last-run.json").read_text())
    assert last == {"spec": str(spec.resolve()), "spec_sha256": spec_sha, "profile": None}

    assert main(["run", *args, "--dry-run"]) == 0  # everything stored: nothing to do
    assert "host localhost: 0 runs to do" in capsys.readouterr().out


def test_unreachable_host_is_noted_by_the_session_and_cleared_when_reached(tmp_path, capsys):
    down = {"ansible_host": "127.0.0.1", "ansible_port": 1, "ansible_python_interpreter": PY}
    inv, spec, results = inventory(tmp_path, downhost=down), spec_file(tmp_path), tmp_path / "r"
    campaign = session.prepare(spec, pattern="all", inventory=inv)
    assert set(campaign.facts) == set(campaign.hosts) == {"localhost"}
    assert list(campaign.unreachable) == ["downhost"]
    assert {p.host for p in campaign.plan.points} == {"localhost"}
    runner = session.run(campaign, results)
    assert runner.summary.ok and len(stored(results, "one-path")) == 4
    with sqlite3.connect(results / "one-path" / "store.sqlite") as db:
        rows = db.execute("SELECT host, stage, reason FROM host_failures").fetchall()
    assert [(h, s) for h, s, _ in rows] == [("downhost", "facts")]
    assert "downhost" in rows[0][2]
    # the CLI shows the skipped host and exits 1; once the host answers, the note goes
    assert (
        main(
            ["run", str(spec), "--hosts", "all", "--inventory", str(inv), "--results", str(results)]
        )
        == 1
    )
    assert "orchestrate: host downhost skipped: " in capsys.readouterr().out
    up = {"ansible_connection": "local", "ansible_python_interpreter": PY}
    assert (
        main(
            [
                "run",
                str(spec),
                "--hosts",
                "all",
                "--inventory",
                str(inventory(tmp_path, downhost=up)),
                "--results",
                str(results),
            ]
        )
        == 0
    )
    with sqlite3.connect(results / "one-path" / "store.sqlite") as db:
        assert db.execute("SELECT count(*) FROM host_failures").fetchone() == (0,)


def test_no_host_reachable_is_one_line_for_plan(tmp_path, capsys):
    down = {"ansible_host": "127.0.0.1", "ansible_port": 1}
    path = tmp_path / "inv.yml"
    path.write_text(yaml.safe_dump({"all": {"hosts": {"downhost": down}}}))
    spec = write_spec(
        tmp_path / "s.yaml", {"campaign": "c", "experiments": [{"name": "e", "command": "true"}]}
    )
    assert main(["plan", str(spec), "--inventory", str(path), "--hosts", "downhost"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("orchestrate: error: no host could be reached (1 tried); first: ")
    assert "\n" not in err


def _verify_record(folder: Path, name: str) -> dict:
    record = {"host": name, "passed": True, "time": "2026-12-01T10:00:00Z"}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"verify-{name}.json").write_text(json.dumps(record))
    return record


def test_custom_state_dir_reaches_host_facts(tmp_path):
    """A host's socketlab_state_dir (inventory var, as the playbooks read it) is where facts
    gathering looks for verify.yml's record; without it, the default folder is read."""
    name = f"state-dir-test-{os.getpid()}"
    state = tmp_path / "my state"  # a space: the path is passed as one argument
    record = _verify_record(state, name)
    inv = tmp_path / "inv.yml"
    inv.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        name: {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": PY,
                            "socketlab_state_dir": str(state),
                        }
                    }
                }
            }
        )
    )
    (host,) = load_inventory(inv)
    spec = load_spec(spec_file(tmp_path))
    assert gather_host_facts(spec, [host])[name]["isolation_verify"] == record
    plain = InventoryHost(name, "local", "localhost", 22, None, None, "", PY)
    assert "isolation_verify" not in gather_host_facts(spec, [plain])[name]


def test_templated_state_dir_is_refused_in_one_line(tmp_path):
    host = InventoryHost(
        "h",
        "local",
        "localhost",
        22,
        None,
        None,
        "",
        PY,
        vars={"socketlab_state_dir": "{{ somewhere }}/x"},
    )
    errors: dict = {}
    assert gather_host_facts(load_spec(spec_file(tmp_path)), [host], errors) == {}
    assert "socketlab_state_dir='{{ somewhere }}/x' is a template" in str(errors["h"])
    with pytest.raises(HostError, match="expected a literal path"):
        gather_host_facts(load_spec(spec_file(tmp_path)), [host])


@pytest.mark.netns
def test_custom_state_dir_over_ssh(ssh_pool, tmp_path):
    """Over SSH the remote shell parses the command: the folder (with a space) arrives whole."""
    host = ssh_pool.hosts[0]
    state = tmp_path / "ssh state"
    record = _verify_record(state, host.name)
    extra = {host.name: {"socketlab_state_dir": str(state)}}
    inv = ssh_pool.inventory(tmp_path / "inv.yml", extra=extra)
    (entry,) = [h for h in load_inventory(inv) if h.name == host.name]
    spec = load_spec(spec_file(tmp_path))
    assert gather_host_facts(spec, [entry])[host.name]["isolation_verify"] == record
