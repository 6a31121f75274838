"""SIGTERM mid-make: the build on the host is killed by PID (its process group, like a run),
nothing half-built is taken as built, no point of it runs, and a resume builds it again.

The compiler is a wrapper that says its PID and its parent's (make, or make's shell) and waits
at a gate, so the signal lands while make runs, deterministically. The orchestrator runs in
this process (`socketlab.cli.main`), so the host's connection and make's parent thread outlive
a session that gave up waiting (without the stop, make would still be there when it returns).
Localhost and an sshd host in a network namespace.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import pytest
import yaml

from socketlab.cli import main
from tests.support.campaign import PY, stored, write_spec
from tests.support.procs import alive, wait_for

#: what the point runs (in the build's folder): one metric
EMIT = 'print(\'{"type": "metric", "name": "x", "value": 1, "unit": "1"}\')'


def _gated_cc(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(compiler, gate, PIDs file): each compile appends "PID PPID", waits while the gate
    exists, then is the host's cc."""
    cc, gate, pids = tmp_path / "slowcc", tmp_path / "gate", tmp_path / "cc.pids"
    cc.write_text(f"""#!/bin/sh
echo "$$ $PPID" >> '{pids}'
while [ -e '{gate}' ]; do sleep 0.05; done
exec cc "$@"
""")
    cc.chmod(0o755)
    gate.write_text("")
    return cc, gate, pids


def _inventory(tmp_path: Path, ssh_host=None) -> tuple[Path, dict]:
    where = {"socketlab_workroot": str(tmp_path / "work"), "ansible_python_interpreter": PY}
    if ssh_host is None:
        tree, body = {"all": {"hosts": {"localhost": {"ansible_connection": "local", **where}}}}, {}
    else:
        hosts = {ssh_host.name: {**ssh_host.inventory_vars(), **where}}
        tree = {"all": {"children": {"testhosts": {"hosts": hosts}}}}
        body = {"hosts": {"group": "testhosts"}}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(tree))
    return path, body


def _pids(path: Path) -> list[int]:
    return [int(w) for line in path.read_text().splitlines() for w in line.split()]


@pytest.mark.parametrize(
    "where",
    [
        "local",
        pytest.param("ssh", marks=pytest.mark.netns),
    ],
)
def test_sigterm_mid_make_kills_the_build_and_keeps_nothing_half_built(
    tmp_path, request, where, capsys
):
    host = request.getfixturevalue("ssh_pool").hosts[0] if where == "ssh" else None
    _, gate, pids = _gated_cc(tmp_path)
    inventory, hosts = _inventory(tmp_path, host)
    # make runs in <work>/<host>/builds/<hash>: the compiler four folders up, by the relative
    # path a spec can name (the build's folder is then build/slowcc)
    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "campaign": "mid-make",
            **hosts,
            "builds": {
                "native": {
                    "source": ".",
                    "target": "build/slowcc/ladder",
                    "flags": "-O0",
                    "cc": "../../../../slowcc",
                }
            },
            "experiments": [
                {
                    "name": "after",
                    "build": "native",
                    "command": [PY, "-c", EMIT],
                    "metrics": {"parser": "jsonl"},
                }
            ],
        },
    )
    results = tmp_path / "results"
    argv = ["run", str(spec), "--results", str(results), "--inventory", str(inventory), "--plain"]

    def signal_mid_make() -> None:  # a compile is at the gate: make is running
        wait_for(lambda: pids.exists() and pids.read_text().strip(), 300, "make to compile")
        os.kill(os.getpid(), signal.SIGTERM)

    sender = threading.Thread(target=signal_mid_make, daemon=True)
    sender.start()
    try:
        rc = main(argv)
        sender.join()
        compiling = _pids(pids)  # every compile started, and its parent
        print(f"{where}: rc {rc}; compile and parent PIDs {compiling}")
        for pid in compiling:  # killed with make's group, not left to finish
            wait_for(lambda pid=pid: not alive(pid), 5, f"build PID {pid} to be gone")
    finally:
        # without the stop, make still runs here: end it by PID, never let it finish
        for pid in _pids(pids) if pids.exists() else []:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    err = capsys.readouterr().err
    assert rc == 128 + signal.SIGTERM
    assert "Traceback" not in err
    assert "orchestrate: stopped by SIGTERM: 0 runs interrupted, 0 stored this session" in err
    built = sorted((tmp_path / "work").rglob(".manifest.json"))
    assert built == []  # the half-built tree is not a build
    assert stored(results, "mid-make") == {}  # its point never ran: pending for a resume

    gate.unlink()  # the resume builds from scratch and runs the point
    assert main(argv) == 0
    (run,) = stored(results, "mid-make").values()
    assert run.status == "ok" and run.build["cached"] is False
    (manifest,) = (tmp_path / "work").rglob(".manifest.json")
    assert "build/slowcc/ladder" in json.loads(manifest.read_text())["binaries"]
