"""The platform spec's host side is collectors/platform_*.py only: stdlib (+ boto3, torch where
the host has them), Python 3.9, nothing from socketlab (issue 23: a fresh Amazon Linux 2023
host has python3 3.9 and the distribution's python3-boto3, no socketlab).

Run for real under the oldest Python on this machine (tests/test_collectors_py39.py's OLDEST,
the controller's own where there is none) with ``-I``, as experiments/platform.yaml runs them:
a missing boto3 or torch is exit 3 with one line, and the worker computes with the stdlib
alone. Where Debian's python3 has python3-boto3 (dist-packages), the S3 client and the worker
run against moto's server with that boto3 under ``-I``.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.moto import MOTO_SERVER, moto_server
from tests.test_collectors_py39 import OLDEST

REPO = Path(__file__).resolve().parents[1]
COLLECTORS = REPO / "collectors"
TOOLS = sorted(COLLECTORS.glob("platform_*.py"))
#: what a host tool may import besides the stdlib and its siblings in collectors/
HOST_PACKAGES = {"boto3", "botocore", "torch"}
BOTO3 = "not available on this host: boto3 is not installed (install python3-boto3)"
DEBIAN_PYTHON = "/usr/bin/python3"


def _run(python: str, flags: list[str], tool: str, *args: str, env=None, timeout: float = 120):
    return subprocess.run(
        [python, *flags, str(COLLECTORS / tool), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd="/",
    )


def _imports(python: str, flags: list[str], module: str) -> bool:
    code = f"import {module}"
    return (
        subprocess.run([python, *flags, "-c", code], capture_output=True, timeout=60).returncode
        == 0
    )


def _oldest() -> str:
    return OLDEST[0] if OLDEST else sys.executable


def _without(module: str) -> tuple[str, list[str]]:
    """The oldest Python with the spec's -I, or -I -S where -I still finds the module."""
    python = _oldest()
    for flags in (["-I"], ["-I", "-S"]):
        if not _imports(python, flags, module):
            return python, flags
    pytest.skip(f"{python} imports {module} even under -I -S")


def test_host_tools_import_only_the_stdlib_siblings_and_host_packages():
    assert {p.name for p in TOOLS} >= {
        "platform_s3load.py",
        "platform_worker.py",
        "platform_amx.py",
        "platform_onednn.py",
    }
    siblings = {p.stem for p in COLLECTORS.glob("*.py")}
    for path in TOOLS:
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
        foreign = names - set(sys.stdlib_module_names) - siblings - HOST_PACKAGES - {"__future__"}
        assert not foreign, f"{path.name} imports {sorted(foreign)}"
        assert "socketlab" not in names, path.name


def test_the_spec_runs_no_socketlab_module_on_a_host():
    spec = yaml.safe_load((REPO / "experiments" / "platform.yaml").read_text())
    for exp in spec["experiments"]:
        command = exp["command"] if isinstance(exp["command"], str) else " ".join(exp["command"])
        assert "socketlab" not in command.replace("socketlab_", "").replace(
            "socketlab-platform", ""
        ), (exp["name"], command)
        if "{{ python }}" in command:
            tool = command.split("{{ tools }}/", 1)[1].split()[0]
            assert (COLLECTORS / tool).exists() and tool.startswith("platform_"), command
            # boto3 and torch are in the system site-packages: -S would hide them
            needs = exp["name"] in ("s3", "concurrency", "amx")
            assert ("{{ python }} -I -S " in command) != needs, command


def test_missing_boto3_is_exit_3_and_one_line_under_the_oldest_python():
    python, flags = _without("boto3")
    print(f"interpreter: {python} {' '.join(flags)}")
    s3load = _run(
        python,
        flags,
        "platform_s3load.py",
        "--endpoint-url",
        "http://127.0.0.1:9",
        "--bucket",
        "b",
        "--prefix",
        "p",
        "--direction",
        "write",
    )
    worker = _run(python, flags, "platform_worker.py", "--endpoint-url", "http://127.0.0.1:9")
    for proc, prog in ((s3load, "platform_s3load"), (worker, "platform_worker")):
        assert proc.returncode == 3, proc.stderr
        assert proc.stderr == f"{prog}: {BOTO3}\n" and proc.stdout == ""


def test_missing_torch_is_exit_3_and_one_line_under_the_oldest_python():
    python, flags = _without("torch")
    proc = _run(python, flags, "platform_amx.py", "--jsonl")
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr == (
        "platform_amx: not available on this host: torch with oneDNN is not "
        "installed (pip install torch)\n"
    )
    assert proc.stdout == ""


def test_worker_computes_with_the_stdlib_alone_under_the_oldest_python():
    """No endpoint: local inputs, so no boto3 either; -I -S: nothing but the stdlib."""
    python = _oldest()
    proc = _run(
        python,
        ["-I", "-S"],
        "platform_worker.py",
        "--workers",
        "2",
        "--requests",
        "3",
        "--warmup",
        "1",
        "--pinned",
        "1",
    )
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(x) for x in proc.stdout.splitlines()]
    latencies = [r for r in records if r["name"] == "request_latency"]
    assert sorted((r["worker"], r["request"]) for r in latencies) == [
        (w, i) for w in range(2) for i in range(3)
    ]
    summary = {r["name"]: r for r in records if r["name"] != "request_latency"}
    assert set(summary) == {"latency_p50", "latency_p95", "throughput"}
    assert summary["latency_p95"]["value"] > 0 and summary["throughput"]["value"] > 0
    assert summary["throughput"]["workers"] == 2 and summary["throughput"]["pinned"] == 1


@pytest.mark.skipif(
    not (os.path.exists(DEBIAN_PYTHON) and _imports(DEBIAN_PYTHON, ["-I"], "boto3")),
    reason="Debian's python3 has no python3-boto3 (apt-get install python3-boto3)",
)
@pytest.mark.skipif(not MOTO_SERVER.exists(), reason="moto_server not installed (the dev extra)")
def test_s3_tools_with_the_distributions_boto3_under_isolated_mode(tmp_path):
    """/usr/bin/python3 -I finds python3-boto3 in /usr/lib/python3/dist-packages (site is on,
    user site and PYTHON* variables off), as Amazon Linux's python3 finds it in site-packages."""
    where = subprocess.run(
        [DEBIAN_PYTHON, "-I", "-c", "import boto3; print(boto3.__file__)"],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    print(f"boto3: {where}")
    assert "dist-packages" in where or "site-packages" in where
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    with moto_server(tmp_path) as moto:
        common = (
            "--endpoint-url",
            moto.url,
            "--bucket",
            "dist-boto3",
            "--prefix",
            "h0",
            "--size-mib",
            "0.25",
            "--objects",
            "2",
            "--group",
            "host",
        )
        for direction in ("write", "read"):
            proc = _run(
                DEBIAN_PYTHON,
                ["-I"],
                "platform_s3load.py",
                *common,
                "--direction",
                direction,
                env=env,
            )
            assert proc.returncode == 0, proc.stderr
            got = {r["name"]: r for r in map(json.loads, proc.stdout.splitlines())}
            assert got["bytes"]["value"] == 2 * 2**18 and got["bytes"]["direction"] == direction
            assert got["t_end"]["value"] >= got["t_start"]["value"]
        worker = _run(
            DEBIAN_PYTHON,
            ["-I"],
            "platform_worker.py",
            "--workers",
            "2",
            "--requests",
            "2",
            "--warmup",
            "0",
            "--endpoint-url",
            moto.url,
            "--bucket",
            "dist-boto3",
            "--prefix",
            "inputs",
            env=env,
        )
    assert worker.returncode == 0, worker.stderr
    names = [json.loads(x)["name"] for x in worker.stdout.splitlines()]
    assert names.count("request_latency") == 4 and "s3_latency_p95" in names


def test_shipped_commands_on_a_host_without_the_packages_fail_with_the_reason(tmp_path):
    """experiments/platform.yaml's s3, concurrency and amx points, through `orchestrate run`, on a
    localhost whose interpreter is the oldest Python here with neither boto3 nor torch: the
    runner installs the tools, each point is stored "unavailable" with the tool's one line (exit
    3; not a failure, so `run` exits 0), and the platform report lists them under "did not run
    ok" instead of crashing or leaving a gap."""
    python = _oldest()
    if _imports(python, ["-I"], "boto3") or _imports(python, ["-I"], "torch"):
        pytest.skip(f"{python} -I has boto3 or torch: no interpreter without them here")
    doc = yaml.safe_load((REPO / "experiments" / "platform.yaml").read_text())
    keep = {"s3", "concurrency", "amx"}
    doc["experiments"] = [e for e in doc["experiments"] if e["name"] in keep]
    doc["hosts"] = {"pattern": "localhost"}
    quick = doc["profiles"]["quick"]["experiments"]
    doc["profiles"]["quick"]["experiments"] = {k: v for k, v in quick.items() if k in keep}
    spec = tmp_path / "platform.yaml"
    spec.write_text(yaml.safe_dump(doc, sort_keys=False))
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        "localhost": {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": python,
                            "socketlab_workroot": str(tmp_path / "work"),
                            "socketlab_tier": "host",
                            "socketlab_s3_endpoint": "http://127.0.0.1:9",
                        }
                    }
                }
            }
        )
    )
    results = tmp_path / "results"
    orchestrate = [sys.executable, "-m", "socketlab.cli"]
    proc = subprocess.run(
        [
            *orchestrate,
            "run",
            str(spec),
            "--profile",
            "quick",
            "--plain",
            "--inventory",
            str(inventory),
            "--results",
            str(results),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    from tests.support.campaign import stored

    runs = list(stored(results, "platform").values())
    by_experiment: dict[str, set[str]] = {}
    for run in runs:
        assert run.status == "unavailable", (run.experiment, run.status, run.reason)
        by_experiment.setdefault(run.experiment, set()).add(run.reason)
    assert by_experiment["s3"] | by_experiment["concurrency"] == {BOTO3}, by_experiment
    assert by_experiment["amx"] == {
        "not available on this host: torch with oneDNN is not installed (pip install torch)"
    }
    # the s3 ladder: both directions; the adaptive concurrency ladder stops at its failed step
    assert sorted(r.params["direction"] for r in runs if r.experiment == "s3") == ["read", "write"]
    assert [r.params["workers"] for r in runs if r.experiment == "concurrency"] == [1]
    report = subprocess.run(
        [*orchestrate, "platform", "report", "platform", "--results", str(results)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert report.returncode == 0, report.stderr
    section = report.stdout.split("## Points that did not run ok", 1)[1]
    assert section.count("| localhost |") == 4 and BOTO3 in section and "torch" in section


FAKE_IPERF = """#!/bin/sh
# Replays iperf3 3.9's recorded -J output (tests/fixtures/iperf3, from Debian 11's iperf3 on the
# pristine test hosts): the first N client calls as if no server listened yet, then a result.
n=$(cat "$STATE" 2>/dev/null || echo 0); echo $((n + 1)) > "$STATE"
if [ "$n" -lt "$FAILS" ]; then
  cat "$REC/3.9-no-server.json"; cat "$REC/3.9-no-server.stderr" >&2; exit 1
fi
cat "$REC/3.9-ok-2-streams.json"
"""


@pytest.mark.parametrize("fails", [0, 2, 1000])
def test_iperf_client_reads_iperf3_3_9_which_reports_a_failed_connect_on_stderr(tmp_path, fails):
    """iperf3 3.9 (Debian 11, Amazon Linux 2023) with -J prints JSON with an empty "end" and no
    "error" when the server isn't listening yet (the reason goes to stderr): the client retries
    as it does on "Connection refused", then reads the result, or fails with iperf3's line once
    the wait is over. Found on the pristine hosts, where the pair starts at the same moment."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "iperf3").write_text(FAKE_IPERF)
    (bindir / "iperf3").chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bindir}:{os.environ['PATH']}",
        "FAILS": str(fails),
        "STATE": str(tmp_path / "calls"),
        "REC": str(REPO / "tests" / "fixtures" / "iperf3"),
    }
    got = _run(
        _oldest(),
        ["-I", "-S"],
        "platform_iperf.py",
        "--role",
        "client",
        "--peer",
        "192.0.2.1",
        "--streams",
        "2",
        "--seconds",
        "1",
        "--connect-wait",
        "1",
        env=env,
    )
    calls = int((tmp_path / "calls").read_text())
    if fails < 1000:
        assert got.returncode == 0, got.stderr
        (tput, _retr) = [json.loads(x) for x in got.stdout.splitlines()]
        assert tput["name"] == "throughput" and tput["value"] > 1.0  # recorded: ~13 Gbit/s
        assert calls == fails + 1
    else:
        assert got.returncode == 1
        assert got.stderr.strip() == (
            "iperf3 client to 192.0.2.1:5201: iperf3: error - unable "
            "to send control message: Bad file descriptor"
        )
        assert calls > 1  # retried until the wait was over
