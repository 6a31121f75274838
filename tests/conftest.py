"""Shared fixtures. Test hosts are real sshd processes in network namespaces (tests/support)."""

from __future__ import annotations

import contextlib
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


@contextlib.contextmanager
def _knobs_locked(mode: int, what: str):
    """Hold KERNEL_KNOBS_LOCK in ``mode`` (flock), waiting up to 15 min for other sessions."""
    KERNEL_KNOBS_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(KERNEL_KNOBS_LOCK, "a") as handle:
        deadline = time.monotonic() + 900
        while True:
            try:
                fcntl.flock(handle, mode | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.fail(
                        f"{KERNEL_KNOBS_LOCK} held by another test session for 15 min ({what})"
                    )
                time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@pytest.fixture
def kernel_knobs_lock():
    """Hold the machine-wide kernel-knob lock exclusively for one test."""
    with _knobs_locked(fcntl.LOCK_EX, "exclusive"):
        yield


@pytest.fixture(autouse=True)
def _steady_kernel_knobs(request):
    """Every other test holds the lock shared: runs fingerprint the host before and after and
    would be marked invalid if another session's isolation test changed a knob meanwhile."""
    if "kernel_knobs_lock" in request.fixturenames:  # a second fd of ours would block it
        yield
        return
    with _knobs_locked(fcntl.LOCK_SH, "shared"):
        yield
