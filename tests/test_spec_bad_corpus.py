"""Every spec in tests/specs/bad/ fails through the real CLI with one line naming file and field.

Each file's header says what the message must contain: `# expect: <text>` and
`# field: <field path>` (for errors without a field, the FILE:LINE it must name).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BAD = Path(__file__).parent / "specs" / "bad"
CORPUS = sorted(BAD.glob("*.yaml"))


def header(path: Path, key: str) -> str:
    for line in path.read_text().splitlines():
        if line.startswith(f"# {key}: "):
            return line.removeprefix(f"# {key}: ")
    raise AssertionError(f"{path.name} has no '# {key}:' header")


@pytest.fixture(scope="module")
def inventory(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("inv") / "hosts.yml"
    path.write_text(
        "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
        '      ansible_python_interpreter: "{{ ansible_playbook_python }}"\n'
    )
    return path


def test_corpus_is_large_enough():
    assert len(CORPUS) >= 25
    for path in CORPUS:
        assert header(path, "expect") and header(path, "field")


@pytest.mark.parametrize("spec", CORPUS, ids=lambda p: p.stem)
def test_bad_spec_gives_one_line_error(spec, inventory):
    proc = subprocess.run(
        [sys.executable, "-m", "socketlab.cli", "plan", str(spec), "--inventory", str(inventory)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    err = proc.stderr
    assert proc.returncode == 2, err
    assert proc.stdout == ""
    assert "Traceback" not in err
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith(f"orchestrate: error: {spec}"), err
    assert header(spec, "expect") in err
    assert header(spec, "field") in err
