"""The pristine-host rig (tests/support/pristine.py): hosts with their own root filesystem see
nothing of the controller, run the image's Python 3.9 without numpy, keep their writes apart,
install packages with apt, and leave nothing behind."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.support.pristine import (
    PristineHostPool,
    changed,
    image,
    pristine_available,
    pristine_hosts,
    snapshot,
)

REPO = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(pristine_available() is not None, reason=str(pristine_available())),
]


def sh(host, command: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(host.ssh_argv(command), capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    t0 = time.monotonic()
    image()
    print(f"image ready in {time.monotonic() - t0:.1f} s (built once into .cache/pristine/)")
    with pristine_hosts(2, tmp_path_factory.mktemp("pristine")) as made:
        yield made


def test_a_host_sees_none_of_the_controller(pool, tmp_path):
    planted = Path("/tmp") / f"controller-only-{uuid.uuid4().hex}"
    planted.write_text("x")
    try:
        host = pool.hosts[0]
        venv = Path(sys.executable).parent.parent
        for path in (REPO, REPO / "src" / "socketlab", venv, planted, tmp_path):
            probe = sh(host, f"test -e {path} && echo VISIBLE || echo absent")
            assert probe.returncode == 0 and probe.stdout.strip() == "absent", (path, probe)
        assert REPO.exists() and planted.exists()  # they are there, on the controller
        assert "VERSION_CODENAME=bullseye" in sh(host, "cat /etc/os-release").stdout
        # its own PID namespace: none of our processes (sshd is its PID 1)
        procs = sh(host, "ls /proc | grep -c '^[0-9]'").stdout.strip()
        assert int(procs) < 20, procs
        assert not sh(host, f"test -e /proc/{os.getpid()}/cmdline && echo x").stdout.strip()
    finally:
        planted.unlink()


def test_python_is_the_images_3_9_without_numpy_and_sudo_works(pool):
    host = pool.hosts[0]
    assert sh(host, "python3 --version").stdout.startswith("Python 3.9.")
    numpy = sh(host, "python3 -c 'import numpy'")
    assert numpy.returncode != 0 and "No module named 'numpy'" in numpy.stderr
    socketlab = sh(host, "python3 -c 'import socketlab'")
    assert "No module named 'socketlab'" in socketlab.stderr
    assert sh(host, "id -un").stdout.strip() == "ec2-user"
    assert sh(host, "sudo -n true").returncode == 0
    for tool in ("gcc", "make", "rsync"):  # prep installs them; the image has none
        assert sh(host, f"command -v {tool}").returncode != 0, tool


def test_hosts_keep_their_writes_apart_and_a_new_host_starts_clean(pool, tmp_path):
    a, b = pool.hosts
    mark = uuid.uuid4().hex
    assert (
        sh(a, f"echo {mark} > /tmp/{mark} && sudo sh -c 'echo {mark} > /etc/{mark}'").returncode
        == 0
    )
    assert sh(a, f"cat /etc/{mark}").stdout.strip() == mark
    assert (
        sh(b, f"test -e /tmp/{mark} || test -e /etc/{mark} || echo clean").stdout.strip() == "clean"
    )
    with pristine_hosts(1, tmp_path / "again") as fresh:
        assert sh(fresh.hosts[0], f"test -e /etc/{mark} || echo clean").stdout.strip() == "clean"


def test_the_upper_layer_diff_shows_exactly_what_the_host_wrote(pool):
    host = pool.hosts[1]
    before = snapshot(host)
    mark = uuid.uuid4().hex
    assert sh(host, f"sudo sh -c 'echo hi > /var/lib/{mark}'").returncode == 0
    assert sh(host, "sudo rm /etc/debian_version").returncode == 0
    diff = changed(before, snapshot(host))
    print(diff)
    assert diff == {f"var/lib/{mark}": "added", "etc/debian_version": "deleted"}
    assert snapshot(host)["etc/debian_version"] == ("deleted",)  # an overlay whiteout


def test_close_leaves_no_namespace_link_process_or_folder(tmp_path):
    pool = PristineHostPool(tmp_path / "gone")
    host = pool.add()
    assert sh(host, "true").returncode == 0
    pool.close()
    assert subprocess.run(["kill", "-0", str(host.sshd_pid)], capture_output=True).returncode != 0
    assert (
        host.netns
        not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    )
    assert subprocess.run(["ip", "link", "show", host.veth], capture_output=True).returncode != 0
    assert not (tmp_path / "gone").exists()
    assert str(tmp_path / "gone") not in Path("/proc/self/mountinfo").read_text()


@pytest.mark.slow
def test_apt_installs_packages_inside_a_host(pool):
    host = pool.hosts[0]
    t0 = time.monotonic()
    got = sh(
        host,
        "sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get "
        "install -y -qq --no-install-recommends make >/dev/null && make --version",
        timeout=600,
    )
    print(f"apt-get update + install make: {time.monotonic() - t0:.1f} s")
    assert got.returncode == 0, got.stderr[-500:]
    assert got.stdout.startswith("GNU Make")
