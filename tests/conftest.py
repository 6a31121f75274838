"""Shared fixtures. Test hosts are real sshd processes in network namespaces (tests/support)."""

from __future__ import annotations

import contextlib
import fcntl
import os
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


#: Taken briefly before KERNEL_KNOBS_LOCK, and held by an exclusive taker while it waits: flock
#: grants a shared lock beside other shared holders even while an exclusive taker waits, so
#: without it a session running tests back to back (an xdist worker) starves the other's
#: exclusive test. With it, new shared takers queue behind the waiting exclusive one.
KERNEL_KNOBS_TURNSTILE = KERNEL_KNOBS_LOCK.with_suffix(".turnstile")


class KnobsLockTimeout(Exception):
    """Another session held the machine-wide lock for 15 minutes: something is stuck."""


def _flock_within(handle, mode: int, deadline: float, what: str) -> None:
    while True:
        try:
            fcntl.flock(handle, mode | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise KnobsLockTimeout(
                    f"{KERNEL_KNOBS_LOCK} held by another test session for 15 min ({what})"
                ) from None
            time.sleep(0.05)


@contextlib.contextmanager
def _knobs_locked(mode: int, what: str):
    """Hold KERNEL_KNOBS_LOCK in ``mode`` (flock), waiting up to 15 min for other sessions."""
    KERNEL_KNOBS_LOCK.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + 900
    with open(KERNEL_KNOBS_TURNSTILE, "a") as gate, open(KERNEL_KNOBS_LOCK, "a") as handle:
        _flock_within(gate, fcntl.LOCK_EX, deadline, what)
        try:
            _flock_within(handle, mode, deadline, what)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@pytest.fixture
def kernel_knobs_lock():
    """A test that changes kernel knobs asks for this: the lock is then held exclusively around
    the whole test (pytest_runtest_protocol below), nothing of another session or xdist worker
    beside it."""
    yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Every test holds the machine-wide lock, around its whole protocol (setup of the module
    and session fixtures it is the first to need included: another worker building a campaign
    in a module fixture is load too). Shared for most: runs fingerprint the host before and
    after and would be marked invalid if another session's isolation test changed a knob
    meanwhile. Exclusive for a test that changes kernel knobs (``kernel_knobs_lock``) or is
    marked ``alone`` (it measures speed on every CPU)."""
    exclusive = "kernel_knobs_lock" in getattr(item, "fixturenames", ()) or (
        item.get_closest_marker("alone") is not None
    )
    mode, what = (fcntl.LOCK_EX, "exclusive") if exclusive else (fcntl.LOCK_SH, "shared")
    with _knobs_locked(mode, what):
        return (yield)


def pytest_configure(config):
    """Under pytest-xdist each worker is an orchestrator of its own: it gets its own default
    work folder on every host (builds, host lock), so two workers' campaigns on localhost don't
    find the host busy (socketlab.execute.default_workroot)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker and "SOCKETLAB_WORKROOT" not in os.environ:
        os.environ["SOCKETLAB_WORKROOT"] = f"/tmp/socketlab-{worker}"
