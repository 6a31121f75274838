"""Host-side code runs on the oldest Python a supported image ships (3.9: Amazon Linux 2023).

Two checks: a static minimum-version check (vermin) over every file that runs on a host
(collectors/, the collection's plugins/modules/ and plugins/module_utils/), and
the collectors, fingerprint and host facts really run, in an `orchestrate run`, under the
oldest Python >= 3.9 this machine has (pyenv's, or python3.9 on PATH). Where none older than
the controller's exists the run test is skipped, saying so; the static check still runs.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from socketlab.cli import main
from socketlab.store import Store, store_path
from tests.support.campaign import stored, write_spec

REPO = Path(__file__).resolve().parents[1]
#: oldest Python the supported images ship (Amazon Linux 2023's python3)
FLOOR = (3, 9)
#: everything that runs on a target host (copied by the runner, the roles or Ansible itself)
HOST_SIDE = sorted(
    [
        *glob.glob(str(REPO / "collectors" / "*.py")),
        *glob.glob(str(REPO / "ansible_collections/socketlab/lab/plugins/modules/*.py")),
        *glob.glob(str(REPO / "ansible_collections/socketlab/lab/plugins/module_utils/*.py")),
    ]
)


def vermin(*paths: str) -> subprocess.CompletedProcess:
    exe = shutil.which("vermin", path=str(Path(sys.executable).parent)) or shutil.which("vermin")
    assert exe, "vermin is a dev dependency (pyproject.toml [dev]); pip install -e '.[dev]'"
    # --eval-annotations: `int | None` in a signature fails at import on 3.9 without
    # `from __future__ import annotations`; --no-parse-comments keeps "# novm" out of it.
    return subprocess.run(
        [
            exe,
            f"-t={FLOOR[0]}.{FLOOR[1]}-",
            "--violations",
            "--no-tips",
            "--eval-annotations",
            "--backport",
            "dataclasses",
            *paths,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_host_side_code_needs_no_python_newer_than_3_9():
    assert len(HOST_SIDE) > 15  # the globs found the files
    result = vermin(*HOST_SIDE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_check_catches_a_3_10_feature(tmp_path):
    """The check can fail: zip(strict=True) (what proc_noise.py had) is refused."""
    bad = tmp_path / "collector.py"
    bad.write_text("def pairs(a, b):\n    return list(zip(a, b, strict=True))\n")
    result = vermin(str(bad))
    assert result.returncode != 0 and "zip(strict)" in result.stdout, result.stdout


def test_a_run_whose_collector_died_is_failed_not_ok(tmp_path, monkeypatch):
    """A collector daemon that dies records {"error": ...}; its metrics are missing, so the run
    is stored failed with the collector's error (it was stored "ok" before)."""
    from socketlab import paths

    copy = tmp_path / "collectors"
    shutil.copytree(paths.COLLECTORS, copy, ignore=shutil.ignore_patterns("__pycache__"))
    noise = copy / "proc_noise.py"
    # the same death as zip(strict=True) on 3.9, on any Python: the sampler raises TypeError
    noise.write_text(
        noise.read_text().replace(
            'def read_interrupts(proc: str = "/proc") -> dict[int, dict[str, int]]:\n',
            'def read_interrupts(proc: str = "/proc") -> dict[int, dict[str, int]]:\n'
            '    raise TypeError("zip() takes no keyword arguments")\n',
            1,
        )
    )
    assert "raise TypeError" in noise.read_text()
    monkeypatch.setattr(paths, "COLLECTORS", copy)
    inventory = tmp_path / "inventory.yml"
    host = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "socketlab_workroot": str(tmp_path / "work"),
    }
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": host}}}))
    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "campaign": "dead-collector",
            "defaults": {"timeout_s": 60, "repetitions": 1, "collectors": ["proc_noise"]},
            "experiments": [
                {
                    "name": "sleep",
                    "command": [sys.executable, "-c", "import time; time.sleep(1)"],
                    "metrics": {"parser": "jsonl"},
                }
            ],
        },
    )
    results = tmp_path / "results"
    main(["run", str(spec), "--results", str(results), "--plain", "--inventory", str(inventory)])
    (run,) = stored(results, "dead-collector").values()
    assert run.status == "failed"
    assert run.reason.startswith("collector failed: proc_noise:") and "TypeError" in run.reason


def oldest_python() -> tuple[str, tuple[int, int]] | None:
    """The oldest interpreter >= FLOOR and older than the controller's, with its version."""
    found = []
    candidates = glob.glob("/root/.pyenv/versions/3.*/bin/python3.*[0-9]")
    candidates += glob.glob(os.path.expanduser("~/.pyenv/versions/3.*/bin/python3.*[0-9]"))
    candidates += [p for v in range(9, 11) if (p := shutil.which(f"python3.{v}"))]
    for path in set(candidates):
        try:
            out = subprocess.run(
                [path, "-c", "import sys; print(*sys.version_info[:2])"],
                capture_output=True,
                text=True,
                timeout=20,
            ).stdout.split()
        except OSError:
            continue
        if len(out) == 2:
            version = (int(out[0]), int(out[1]))
            if FLOOR <= version < sys.version_info[:2]:
                found.append((version, path))
    return (min(found)[1], min(found)[0]) if found else None


OLDEST = oldest_python()


@pytest.mark.skipif(
    OLDEST is None,
    reason="no Python 3.9/3.10 on this machine (pyenv or PATH): only the static check ran",
)
def test_collectors_run_under_the_oldest_python(tmp_path):
    """A campaign on localhost whose host interpreter is the oldest Python here: facts,
    fingerprints, the agent-free local run and the proc_noise/perf_stat/clock/RAPL collectors
    all work, and the noise metrics are stored (on 3.9 they were silently missing)."""
    python, version = OLDEST
    print(f"host interpreter: {python} ({version[0]}.{version[1]})")
    inventory = tmp_path / "inventory.yml"
    host = {
        "ansible_connection": "local",
        "ansible_python_interpreter": python,
        "socketlab_workroot": str(tmp_path / "work"),
    }
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": host}}}))
    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "campaign": "py39",
            "defaults": {
                "timeout_s": 60,
                "repetitions": 1,
                "collectors": [
                    "proc_noise",
                    "perf_stat",
                    "rapl_power",
                    "clock_freq",
                    "proc_peakmem",
                ],
            },
            "experiments": [
                {
                    "name": "sleep",
                    "command": [python, "-c", "import time; time.sleep(1.5)"],
                    "metrics": {"parser": "jsonl"},
                }
            ],
        },
    )
    results = tmp_path / "results"
    code = main(
        ["run", str(spec), "--results", str(results), "--plain", "--inventory", str(inventory)]
    )
    (run,) = stored(results, "py39").values()
    assert code == 0 and run.status == "ok", run.reason
    raw = Path(run.raw_dir)
    for path in sorted((raw / "collectors").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            assert "error" not in json.loads(line), f"{path.name}: {line}"
    provenance = json.loads((raw / "run.json").read_text())
    assert provenance["fingerprint_before"]["kernel"]
    with Store(store_path("py39", results), create=False) as store:
        names = {row["name"] for row in store.metric_rows("py39")}
    assert {"irq_rate", "peak_tree_rss"} <= names, names
