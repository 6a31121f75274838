"""Shared fixtures. Test hosts are real sshd processes in network namespaces (tests/support)."""

from __future__ import annotations

import fcntl
import time
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


#: One lock per machine for tests that change kernel knobs (IRQ affinity, THP, workqueue mask):
#: network-namespace hosts share this kernel, and two test sessions on one machine would
#: otherwise undo each other's changes mid-test.
KERNEL_KNOBS_LOCK = Path("/run/lock/socketlab-tests-kernel-knobs.lock")


@pytest.fixture
def kernel_knobs_lock():
    """Hold the machine-wide kernel-knob lock for the duration of one test (waits up to 15 min)."""
    KERNEL_KNOBS_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(KERNEL_KNOBS_LOCK, "w") as handle:
        deadline = time.monotonic() + 900
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.fail(f"{KERNEL_KNOBS_LOCK} held by another test session for 15 min")
                time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
