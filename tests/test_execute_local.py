"""The local executor: argv never meets a shell, timeouts kill the whole process group,
CPU pinning, and the host lock."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from socketlab.execute import HostBusy
from socketlab.execute.local import LocalExecutor
from tests.support.procs import alive, wait_for
from tests.support.shell import bait_untouched, shell_bait

PY = sys.executable


@pytest.fixture
def executor(tmp_path):
    ex = LocalExecutor("test-local", workroot=str(tmp_path / "work"))
    ex.connect()
    yield ex
    ex.close()


def test_metacharacters_reach_the_program_as_one_literal_argument(executor, tmp_path):
    keep, evil = shell_bait(tmp_path)
    code = "import json, sys; print(json.dumps(sys.argv[1:]))"
    result = executor.run([PY, "-c", code, evil, "*"], timeout=30, cwd=str(tmp_path))
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == [evil, "*"]
    assert bait_untouched(tmp_path, keep)


def test_timeout_kills_the_whole_process_group(executor, tmp_path):
    pidfile = tmp_path / "bg.pid"
    script = f"sleep 60 & echo $! > {pidfile}; wait"
    started = time.monotonic()
    result = executor.run(["sh", "-c", script], timeout=1.0)
    assert time.monotonic() - started < 15
    assert result.timed_out and result.exit_code == -9
    background = int(pidfile.read_text())
    # AssertionError if the command's background child survived the timeout
    wait_for(lambda: not alive(background), 5, f"background child {background} to be gone")
    assert not alive(result.pgid)


def test_env_cwd_and_cpu_pinning(executor, tmp_path):
    code = (
        "import os, json; print(json.dumps([os.environ['SLAB_X'], os.getcwd(), "
        "sorted(os.sched_getaffinity(0))]))"
    )
    result = executor.run(
        [PY, "-c", code], env={"SLAB_X": "a b;c"}, cwd=str(tmp_path), timeout=30, cpus="0"
    )
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == ["a b;c", str(tmp_path), [0]]


def test_exit_code_and_missing_program(executor):
    assert executor.run([PY, "-c", "raise SystemExit(3)"], timeout=30).exit_code == 3
    missing = executor.run(["/nonexistent/program", "x"], timeout=30)
    assert missing.exit_code not in (0, None)


def test_pidfile_names_the_command(executor, tmp_path):
    pidfile = tmp_path / "target.pid"
    result = executor.run(
        [PY, "-c", "import os; print(os.getpid())"], timeout=30, pidfile=str(pidfile)
    )
    # setpriv and taskset exec into the command, so the PID we record is the command's.
    assert int(pidfile.read_text()) == int(result.stdout) == result.pgid


def test_second_orchestrator_finds_the_host_busy(tmp_path):
    first = LocalExecutor("busy-host", workroot=str(tmp_path))
    second = LocalExecutor("busy-host", workroot=str(tmp_path))
    other = LocalExecutor("other-host", workroot=str(tmp_path))
    first.lock({"campaign": "a"})
    try:
        with pytest.raises(HostBusy, match="busy-host: host is busy.*campaign"):
            second.lock({"campaign": "b"})
        other.lock({"campaign": "b"})  # keyed by inventory name: another name is another lock
    finally:
        first.unlock()
        other.unlock()
    second.lock({"campaign": "b"})
    second.unlock()


def test_the_default_work_folder_moves_with_the_environment_and_the_inventory_wins(
    tmp_path, monkeypatch
):
    """$SOCKETLAB_WORKROOT moves every host's default work folder (two orchestrators on one
    machine keep apart locks and builds); a host's socketlab_workroot still wins; a relative
    value is one line naming the variable."""
    from types import SimpleNamespace

    from socketlab.errors import HostError
    from socketlab.execute import DEFAULT_WORKROOT, default_workroot, make_executor
    from socketlab.spec.expand import tools_dir

    monkeypatch.delenv("SOCKETLAB_WORKROOT", raising=False)
    assert default_workroot() == DEFAULT_WORKROOT == "/tmp/socketlab"
    monkeypatch.setenv("SOCKETLAB_WORKROOT", str(tmp_path / "a"))
    host = SimpleNamespace(name="h1", vars={}, connection="local", python=None)
    assert make_executor(host).workdir == str(tmp_path / "a" / "h1")
    assert LocalExecutor("h2").workdir == str(tmp_path / "a" / "h2")
    assert tools_dir("h1", {}) == str(tmp_path / "a" / "h1" / "tools")
    mine = {"socketlab_workroot": str(tmp_path / "b")}
    assert make_executor(SimpleNamespace(**{**vars(host), "vars": mine})).workdir == str(
        tmp_path / "b" / "h1"
    )
    # two orchestrators, two environments: the second is not refused as busy
    first = LocalExecutor("shared")
    monkeypatch.setenv("SOCKETLAB_WORKROOT", str(tmp_path / "c"))
    second = LocalExecutor("shared")
    first.lock({"campaign": "a"})
    try:
        second.lock({"campaign": "b"})
        second.unlock()
    finally:
        first.unlock()
    monkeypatch.setenv("SOCKETLAB_WORKROOT", "relative/dir")
    with pytest.raises(HostError, match=r"^\$SOCKETLAB_WORKROOT: 'relative/dir': expected an abs"):
        default_workroot()


def test_a_lock_left_by_an_exited_orchestrator_of_this_machine_is_waited_for(tmp_path):
    """HostBusy carries what the holder wrote; a holder naming this machine and a PID that has
    exited is an orphan (its agent idles out), so the runner waits for it; a live or foreign
    holder is not, and an unreadable holder is {}."""
    import socket
    import subprocess

    from socketlab.runner.host import orphaned

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    here = socket.gethostname()
    assert orphaned({"controller": f"{here}:{gone.pid}", "pid": 1})
    assert not orphaned({"controller": f"{here}:{os.getpid()}"})  # alive
    assert not orphaned({"controller": f"elsewhere:{gone.pid}"})  # another machine's
    assert not orphaned({"controller": "no-pid"}) and not orphaned({})
    first = LocalExecutor("held", workroot=str(tmp_path))
    first.lock({"campaign": "a", "controller": f"{here}:{os.getpid()}"})
    try:
        with pytest.raises(HostBusy) as exc:
            LocalExecutor("held", workroot=str(tmp_path)).lock({"campaign": "b"})
        assert exc.value.holder["campaign"] == "a" and not orphaned(exc.value.holder)
    finally:
        first.unlock()
    assert HostBusy("x", "not json").holder == {} and HostBusy("x").holder == {}


def test_tree_round_trip(executor, tmp_path):
    src = tmp_path / "a.txt"
    src.write_text("hello")
    executor.send_tree({"sub/a.txt": src}, f"{executor.workdir}/tree", tmp_path / "scratch")
    names = executor.fetch_tree(f"{executor.workdir}/tree", tmp_path / "back")
    assert names == ["sub/a.txt"]
    assert (tmp_path / "back" / "sub" / "a.txt").read_text() == "hello"
    assert executor.fetch_tree(f"{executor.workdir}/missing", tmp_path / "none") == []
    assert Path(executor.workdir).is_dir() and os.access(executor.workdir, os.W_OK)
