"""The SSH executor against real sshd hosts in network namespaces: one connection reused,
argv literal, remote timeouts kill the whole process group, the host lock, unreachable hosts."""

from __future__ import annotations

import json
import time

import pytest

from socketlab.execute import HostBusy, HostUnreachable
from socketlab.execute.ssh import SshExecutor
from socketlab.inventory import load_inventory
from tests.support.procs import alive, wait_for
from tests.support.shell import bait_untouched, shell_bait

pytestmark = pytest.mark.netns


@pytest.fixture(scope="module")
def hosts(ssh_pool, tmp_path_factory):
    inventory = ssh_pool.inventory(tmp_path_factory.mktemp("inv") / "hosts.yml")
    return {h.name: h for h in load_inventory(inventory)}


@pytest.fixture(scope="module")
def executor(hosts, tmp_path_factory):
    host = sorted(hosts.values(), key=lambda h: h.name)[0]
    ex = SshExecutor(host, workroot=str(tmp_path_factory.mktemp("work")))
    ex.connect()
    ex.install_tools(tmp_path_factory.mktemp("scratch"))
    ex.lock({"campaign": "test"})
    yield ex
    ex.close()


def test_runs_reuse_one_connection_and_land_on_the_host(executor, ssh_pool):
    transport = executor._conn.client.get_transport()
    names = {executor.run(["hostname"], timeout=30).stdout.strip() for _ in range(5)}
    assert names == {executor.name}  # the namespace's own UTS name, not this machine's
    assert executor._conn.client.get_transport() is transport


def test_metacharacters_stay_literal_over_ssh(executor, tmp_path):
    keep, evil = shell_bait(tmp_path)
    code = "import json, sys; print(json.dumps(sys.argv[1:]))"
    result = executor.run(["/usr/bin/python3", "-c", code, evil, "$HOME", "'"], timeout=30)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == [evil, "$HOME", "'"]
    assert bait_untouched(tmp_path, keep)


def test_remote_timeout_kills_the_process_group(executor, tmp_path):
    pidfile = tmp_path / "bg.pid"
    started = time.monotonic()
    result = executor.run(["sh", "-c", f"sleep 60 & echo $! > {pidfile}; wait"], timeout=1.0)
    assert time.monotonic() - started < 15
    assert result.timed_out and result.exit_code == -9
    background = int(pidfile.read_text())
    wait_for(lambda: not alive(background), 5, f"background child {background} to be gone")


def test_env_cwd_and_pinning_over_ssh(executor, tmp_path):
    code = (
        "import os, json; print(json.dumps([os.environ['SLAB_X'], os.getcwd(), "
        "sorted(os.sched_getaffinity(0))]))"
    )
    result = executor.run(
        ["/usr/bin/python3", "-c", code],
        env={"SLAB_X": "$(x)"},
        cwd=str(tmp_path),
        timeout=30,
        cpus="1",
    )
    assert json.loads(result.stdout) == ["$(x)", str(tmp_path), [1]]


def test_host_lock_refuses_a_second_orchestrator(executor, hosts, tmp_path):
    second = SshExecutor(executor.host, workroot=executor.workdir.rsplit("/", 1)[0])
    second.connect()
    try:
        with pytest.raises(HostBusy, match="host is busy.*campaign.*test"):
            second.lock({"campaign": "other"})
    finally:
        second.close()


def test_unreachable_host_is_a_host_error(hosts):
    host = sorted(hosts.values(), key=lambda h: h.name)[0]
    dead = type(host)(**{**host.__dict__, "name": "dead", "port": 1})
    ex = SshExecutor(dead, connect_timeout=2)
    with pytest.raises(HostUnreachable, match="dead: cannot connect to"):
        ex.connect()
