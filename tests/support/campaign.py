"""What the `orchestrate run` tests share, on localhost or over SSH: a spec on disk, the runs a
store holds, and a count of finished runs that can be read while a campaign writes."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import yaml

from socketlab.store import Store, store_path

#: the host's interpreter, as the spec names it (the same path on localhost and netns hosts)
PY = "/usr/bin/python3"
#: a program that echoes its argv as JSON and reports one metric x = len(argv)
EMIT = (
    "import json, sys; print(json.dumps(sys.argv[1:])); "
    "print(json.dumps({'type': 'metric', 'name': 'x', 'value': float(len(sys.argv)), "
    "'unit': '1'}))"
)


def write_spec(path: Path, body: dict) -> Path:
    path.write_text(yaml.safe_dump({"schema_version": 1, **body}, sort_keys=False))
    return path


def run_quick(doc: dict, root: Path, name: str, timeout: int) -> Path:
    """A shipped spec's document (trimmed by the caller) written to root/name and run with its
    quick profile through `orchestrate run`, results under root; root, once it exited 0. The
    other profiles are left out: they name experiments the trimmed document no longer has."""
    doc = {**doc, "profiles": {"quick": doc["profiles"]["quick"]}}
    spec = root / name
    spec.write_text(yaml.safe_dump(doc, sort_keys=False))
    orchestrate = Path(sys.executable).parent / "orchestrate"
    proc = subprocess.run(
        [
            str(orchestrate),
            "run",
            str(spec),
            "--profile",
            "quick",
            "--plain",
            "--results",
            str(root),
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return root


def stored(results: Path, campaign: str) -> dict:
    """run key -> RunRecord of every run the campaign's store holds."""
    with Store(store_path(campaign, results), create=False) as store:
        return {r.run_key: r for r in store.runs(campaign)}


def ok_count(db: Path, host: str | None = None) -> int:
    """Runs stored ok (on ``host``), read while a campaign writes: 0 until the schema exists."""
    if not db.exists():
        return 0
    sql, args = "SELECT count(*) FROM runs WHERE status='ok'", ()
    if host is not None:
        sql, args = sql + " AND host=?", (host,)
    try:
        with sqlite3.connect(db) as raw:
            return raw.execute(sql, args).fetchone()[0]
    except sqlite3.OperationalError:  # the schema is being created
        return 0


def local_inventory(tmp_path: Path) -> Path:
    """localhost with a private work folder: its own build cache and host lock."""
    path = tmp_path / "inventory.yml"
    host = {
        "ansible_connection": "local",
        "ansible_python_interpreter": PY,
        "socketlab_workroot": str(tmp_path / "work"),
    }
    path.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": host}}}))
    return path
