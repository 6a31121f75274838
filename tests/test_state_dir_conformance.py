"""The state folder (/var/lib/socketlab) has one default per language layer: collectors/
host_facts.py's for Python, playbooks/vars/state.yml's for Ansible; everything else takes
socketlab_state_dir through them (issue 14). A second copy anywhere fails here."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import yaml

from socketlab import paths

LITERAL = "var/lib/socketlab"
DOCS = {"DOCUMENTATION", "EXAMPLES", "RETURN"}  # Ansible module docs: examples, not defaults


def _python_copies(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    skip = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            skip.add(id(body[0].value))  # docstrings
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id in DOCS for t in node.targets
        ):
            skip.add(id(node.value))
    return [
        f"{path.relative_to(paths.REPO)}:{n.lineno}"
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant)
        and isinstance(n.value, str)
        and LITERAL in n.value
        and id(n) not in skip
    ]


def test_one_python_default():
    # symlinks are other names of files counted here (the collection links collectors/ and src/)
    files = [
        p
        for d in ("src", "collectors", "playbooks", "ansible_collections")
        for p in (paths.REPO / d).rglob("*.py")
        if not p.is_symlink()
    ]
    copies = [c for p in sorted(files) for c in _python_copies(p)]
    assert copies == [c for c in copies if c.startswith("collectors/host_facts.py:")]
    assert len(copies) == 1, copies


def test_one_ansible_default():
    files = sorted(
        p
        for d in ("playbooks", "roles", "ansible_collections")
        for p in (paths.REPO / d).rglob("*.yml")
        if not p.is_symlink()
    )
    copies = [
        f"{p.relative_to(paths.REPO)}:{i}"
        for p in files
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if LITERAL in line.split("#", 1)[0]
    ]
    state_file = paths.COLLECTION / "playbooks/vars/state.yml"
    assert copies == [f"{state_file.relative_to(paths.REPO)}:7"], copies
    state = yaml.safe_load(state_file.read_text())
    default = "{{ socketlab_state_dir | default('/var/lib/socketlab') }}"
    assert state == {"socketlab_state_root": default}


def test_every_play_on_the_state_folder_loads_it():
    for name in ("isolate", "verify", "restore", "prepare", "sram_driver"):
        plays = yaml.safe_load((paths.COLLECTION / "playbooks" / f"{name}.yml").read_text())
        assert any("vars/state.yml" in p.get("vars_files", []) for p in plays), name
    plan_task = (paths.COLLECTION / "roles/isolation_plan/tasks/main.yml").read_text()
    assert "--state-dir {{ isolation_plan_state_dir | quote }}" in plan_task


def test_host_facts_reads_verify_records_from_the_state_dir_it_is_given(tmp_path):
    custom = tmp_path / "srv/state"
    custom.mkdir(parents=True)
    (custom / "verify-h1.json").write_text(json.dumps({"passed": True}))
    facts = [sys.executable, str(paths.REPO / "collectors/host_facts.py"), "--root", str(tmp_path)]
    given = json.loads(
        subprocess.run(
            [*facts, "--state-dir", "/srv/state"], check=True, capture_output=True, text=True
        ).stdout
    )
    assert given["isolation_verify"] == {"h1": {"passed": True}}
    default = json.loads(subprocess.run(facts, check=True, capture_output=True, text=True).stdout)
    assert default["isolation_verify"] == {}
