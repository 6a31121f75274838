"""The test-host fixture itself: two hosts, distinct hostnames, reachable over SSH."""

import subprocess

import pytest

pytestmark = pytest.mark.netns


def test_hosts_have_distinct_hostnames(ssh_pool):
    names = []
    for host in ssh_pool.hosts:
        out = subprocess.run(host.ssh_argv("hostname"), capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        names.append(out.stdout.strip())
    assert names == [h.name for h in ssh_pool.hosts]
    assert len(set(names)) == 2
