"""One process module (socketlab.execute.process) for this machine and for hosts, and what
survives a SIGKILLed orchestrator: nothing. The llama.cpp server of a local serving run and
its children, a run's collectors: gone within 2 s, checked by PID."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from socketlab.execute import process
from socketlab.execute.local import LocalExecutor
from tests.support.campaign import PY, write_spec
from tests.support.procs import alive, wait_for
from tests.support.tiny_gguf import write_tiny_gguf

REPO = Path(__file__).resolve().parents[1]
#: the bound of the acceptance test: a correctness bound, polled, never a timing assertion
GONE_S = 2.0


def _inventory(tmp_path: Path, **extra) -> Path:
    path = tmp_path / "inventory.yml"
    host = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "socketlab_workroot": str(tmp_path / "work"),
        **extra,
    }
    path.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": host}}}))
    return path


def _orchestrate(tmp_path: Path, spec: Path, inventory: Path) -> subprocess.Popen:
    argv = [
        sys.executable,
        "-m",
        "socketlab.cli",
        "run",
        str(spec),
        "--results",
        str(tmp_path / "results"),
        "--inventory",
        str(inventory),
        "--plain",
    ]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _kill_and_time(proc: subprocess.Popen, pids: list[int]) -> float:
    """SIGKILL the orchestrator; seconds until every PID is gone (AssertionError after 2 s)."""
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    t0 = time.monotonic()
    for pid in pids:
        wait_for(
            lambda pid=pid: not alive(pid),
            max(0.0, GONE_S - (time.monotonic() - t0)),
            f"PID {pid} to be gone after the orchestrator was killed",
        )
    return time.monotonic() - t0


def _started_by_test(folder: Path, but: int) -> dict[int, str]:
    """PID -> command line of the processes whose command line names this test's folder (the
    agent, the sampler, the load generator, the server), other than ``but``."""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != but:
            try:
                cmd = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if str(folder) in cmd:
                out[int(name)] = cmd
    return out


@pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None,
    reason="llama-cpp-python[server] is not installed (the 'serve' extra)",
)
def test_sigkill_of_the_orchestrator_leaves_no_llama_server(tmp_path):
    model = write_tiny_gguf(tmp_path / "tiny.gguf")
    pid_file = tmp_path / "server.pid"
    # the server writes its PID, starts a child of its own, then is llama.cpp's server
    wrap = (
        "import os, runpy, subprocess, sys; open(sys.argv[1], 'w').write(str(os.getpid())); "
        "subprocess.Popen(['sleep', '600']); sys.argv = ['llama_cpp.server', *sys.argv[2:]]; "
        "runpy.run_module('llama_cpp.server', run_name='__main__')"
    )
    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "campaign": "sigkill-serve",
            "experiments": [
                {
                    "name": "llama",
                    "kind": "serving",
                    "timeout_s": 600,
                    "serving": {
                        "arms": [
                            {
                                "name": "all",
                                "placement": "all",
                                "command": [
                                    "{{ vars.serve_python }}",
                                    "-c",
                                    wrap,
                                    str(pid_file),
                                    "--model",
                                    "{{ vars.serve_model }}",
                                    "--host",
                                    "{address}",
                                    "--port",
                                    "{port}",
                                    "--n_ctx",
                                    "512",
                                ],
                            }
                        ],
                        "load": {"concurrency": [1]},
                        "input_tokens": 4,
                        "output_tokens": 200,
                        "requests": 500,
                        "warmup_requests": 1,
                        "ready_timeout_s": 120,
                    },
                }
            ],
        },
    )
    inventory = _inventory(tmp_path, serve_python=sys.executable, serve_model=str(model))
    proc = _orchestrate(tmp_path, spec, inventory)
    try:
        wait_for(
            lambda: pid_file.exists() and pid_file.read_text().strip(),
            120,
            "the llama.cpp server to start",
        )
        server = int(pid_file.read_text())
        wait_for(lambda: process.descendants(server), 30, "the server's child")
        tree = [server, *process.descendants(server)]

        def load_runs() -> bool:
            return any(
                "socketlab.serve.loadgen" in c
                for c in _started_by_test(tmp_path, proc.pid).values()
            )

        wait_for(load_runs, 180, "the load generator to run")
        others = sorted(set(_started_by_test(tmp_path, proc.pid)) - set(tree))
        seconds = _kill_and_time(proc, tree + others)
    finally:
        if proc.poll() is None:
            proc.kill()
    print(f"server tree {tree} and {others} gone {seconds:.2f} s after SIGKILL")
    assert len(tree) == 2 and len(others) >= 3  # the agent, the sampler, the load generator


def test_sigkill_of_the_orchestrator_leaves_no_run_or_collector(tmp_path):
    marker, hold = tmp_path / "started", tmp_path / "hold"
    hold.write_text("")
    slow = (
        "import os, subprocess, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); "
        "subprocess.Popen(['sleep', '600']); time.sleep(600)"
    )
    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "campaign": "sigkill-run",
            "defaults": {"timeout_s": 600, "collectors": ["proc_noise", "proc_peakmem"]},
            "experiments": [{"name": "slow", "command": [PY, "-c", slow, str(marker)]}],
        },
    )
    proc = _orchestrate(tmp_path, spec, _inventory(tmp_path))
    try:
        wait_for(lambda: marker.exists() and marker.read_text().strip(), 60, "the run to start")
        target = int(marker.read_text())
        wait_for(lambda: process.descendants(target), 30, "the run's child")
        work = tmp_path / "work"
        collectors = [int(p.read_text()) for p in work.rglob("proc_*.pid")]
        assert len(collectors) == 2, collectors
        pids = [target, *process.descendants(target), *collectors]
        seconds = _kill_and_time(proc, pids)
    finally:
        if proc.poll() is None:
            proc.kill()
    print(f"run, its child and collectors {pids} gone {seconds:.2f} s after SIGKILL")


def test_the_agent_runs_the_same_process_module(tmp_path):
    """socketlab.execute.process is collectors/_process.py, shipped beside the agent."""
    ex = LocalExecutor("tools", workroot=str(tmp_path))
    ex.connect()
    ex.install_tools(tmp_path / "scratch")
    assert Path(process.__file__) == REPO / "collectors" / "_process.py"
    assert (Path(ex.tools) / "_process.py").read_bytes() == Path(process.__file__).read_bytes()
    pid = ex.spawn(["sleep", "60"], cpus=[0], log=f"{ex.workdir}/sleep.log")
    try:
        # pinned once taskset has run (it execs into the command, keeping the PID)
        wait_for(lambda: set(ex.tree(pid)["affinity"].values()) == {"0"}, 10, "the pinning")
        tree = ex.tree(pid)
        assert tree["exit_code"] is None and tree["peak_rss_kib"] > 0 and tree["seen"] == [pid]
    finally:
        reply = ex.stop_spawned(pid, 1.0)
        ex.close()
    assert reply["left"] == [] and not alive(pid)


def test_a_timeout_kills_the_group_and_a_missing_program_is_one_error(tmp_path):
    reply = process.run(["sh", "-c", "sleep 60 & echo $!; wait"], timeout=1.0)
    assert reply["timed_out"] and reply["exit_code"] == -9
    wait_for(lambda: not alive(int(reply["stdout"])), 5, "the background child to be gone")
    missing = process.run(["/nonexistent/prog"], timeout=5)
    assert missing["exit_code"] == 127
    assert missing["stderr"] == (
        "cannot start /nonexistent/prog: [Errno 2] No such file or directory: '/nonexistent/prog'"
    )
    assert json.loads(
        process.run(
            [PY, "-c", "import json, os; print(json.dumps(sorted(os.sched_getaffinity(0))))"],
            cpus=[0],
            timeout=30,
        )["stdout"]
    ) == [0]


def test_sigkill_leaves_no_helper_command_such_as_a_build(tmp_path):
    """Builds run as the executor's helper commands (``make`` through ``call``): a killed
    orchestrator takes the command and the children it started (the compilers) with it. (The
    command's first half second leaves time for the agent to be handed its group.)"""
    pids = tmp_path / "pids"
    script = (
        f"import sys; from pathlib import Path; from socketlab.execute.local import "
        f"LocalExecutor; ex = LocalExecutor('build', workroot={str(tmp_path)!r}); "
        f"ex.connect(); ex.install_tools(Path({str(tmp_path / 'scratch')!r})); "
        f"ex.call(['sh', '-c', 'sleep 0.5; sleep 600 & echo $$ $! > {pids}; wait'], "
        f"timeout=600)"
    )
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        wait_for(
            lambda: pids.exists() and len(pids.read_text().split()) == 2,
            60,
            "the command and its child",
        )
        command, child = map(int, pids.read_text().split())
        seconds = _kill_and_time(proc, [command, child])
    finally:
        if proc.poll() is None:
            proc.kill()
    print(f"helper command {command} and its child {child} gone {seconds:.2f} s after SIGKILL")
