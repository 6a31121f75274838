"""Shared fixtures. Test hosts are real sshd processes in network namespaces (tests/support)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.netns import netns_available, ssh_hosts

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def ssh_pool(tmp_path_factory):
    """Two sshd hosts in network namespaces for the whole session."""
    reason = netns_available()
    if reason:
        pytest.skip(f"network-namespace test hosts unavailable: {reason}")
    with ssh_hosts(2, tmp_path_factory.mktemp("ssh")) as pool:
        yield pool
