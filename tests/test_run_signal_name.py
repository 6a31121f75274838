"""A run killed by a signal says which one (a segfault reads "killed by SIGSEGV", not -11)."""

from __future__ import annotations

import sys

import yaml

from socketlab.cli import main
from tests.support.campaign import stored, write_spec


def test_segfault_is_named(tmp_path):
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        "localhost": {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": sys.executable,
                            "socketlab_workroot": str(tmp_path / "work"),
                        }
                    }
                }
            }
        )
    )
    crash = "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"
    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "campaign": "crash",
            "defaults": {"timeout_s": 30},
            "experiments": [
                {
                    "name": "crash",
                    "command": [sys.executable, "-c", crash],
                    "metrics": {"parser": "jsonl"},
                }
            ],
        },
    )
    main(
        [
            "run",
            str(spec),
            "--results",
            str(tmp_path / "r"),
            "--inventory",
            str(inventory),
            "--plain",
        ]
    )
    (run,) = stored(tmp_path / "r", "crash").values()
    assert run.status == "failed"
    assert run.reason.startswith("killed by SIGSEGV (exit code -11 (accepted: 0)"), run.reason
