"""Watching processes from a test: alive (a zombie counts as gone) and bounded waits.

The netns test hosts share this machine's PID namespace, so their processes are visible here.
"""

from __future__ import annotations

import time
from pathlib import Path


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def wait_for(predicate, timeout: float, what: str) -> None:
    """Poll ``predicate`` until true; AssertionError naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")
