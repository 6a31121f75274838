"""Every spec in tests/specs/bad/ fails through the real CLI with one line naming file and field.

Each file's header says what the message must contain: `# expect: <text>` and
`# field: <field path>` (for errors without a field, the FILE:LINE it must name).

The corpus runs through `socketlab.cli.main` in one child interpreter (each spec with its own
stdout / stderr), not one interpreter per spec: 84 interpreter starts cost a minute of a 2-core
test run. One spec also runs as `python -m socketlab.cli`, and must print the same.
"""

from __future__ import annotations

import json
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


#: runs `orchestrate plan SPEC --inventory INV` for each spec in this one process
BATCH = r"""
import contextlib, io, json, sys, traceback
from socketlab.cli import main
inventory, out = sys.argv[1], {}
for spec in sys.argv[2:]:
    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        try:
            rc = main(["plan", spec, "--inventory", inventory])
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            traceback.print_exc()
            rc = 1
    out[spec] = {"returncode": rc, "stdout": o.getvalue(), "stderr": e.getvalue()}
json.dump(out, sys.stdout)
"""


def plan_argv(spec: Path, inventory: Path) -> list[str]:
    return [sys.executable, "-m", "socketlab.cli", "plan", str(spec), "--inventory", str(inventory)]


@pytest.fixture(scope="module")
def outcomes(inventory) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", BATCH, str(inventory), *map(str, CORPUS)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_the_batch_prints_what_the_command_line_prints(outcomes, inventory):
    spec = CORPUS[0]
    proc = subprocess.run(plan_argv(spec, inventory), capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout, proc.stderr) == tuple(outcomes[str(spec)].values())


def test_corpus_is_large_enough():
    assert len(CORPUS) >= 25
    for path in CORPUS:
        assert header(path, "expect") and header(path, "field")


@pytest.mark.parametrize("spec", CORPUS, ids=lambda p: p.stem)
def test_bad_spec_gives_one_line_error(spec, outcomes):
    proc = outcomes[str(spec)]
    err = proc["stderr"]
    assert proc["returncode"] == 2, err
    assert proc["stdout"] == ""
    assert "Traceback" not in err
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith(f"orchestrate: error: {spec}"), err
    assert header(spec, "expect") in err
    assert header(spec, "field") in err
