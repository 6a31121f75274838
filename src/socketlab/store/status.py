"""The statuses a run can end in: one enum, stored in the ``runs`` table as its text.

``RunStatus`` is a ``StrEnum``: a member equals its text ("ok" == RunStatus.OK), so rows read
back from SQLite, pandas frames and JSON compare with it directly.
"""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    #: complete: counts in reports; resume never runs it again
    OK = "ok"
    #: the command failed (exit code, output, a required metric or collector missing)
    FAILED = "failed"
    #: killed at its timeout
    TIMEOUT = "timeout"
    #: the host's state drifted during the run (a knob named in the reason)
    INVALID = "invalid"
    #: the session was stopped by SIGTERM/SIGINT during it: any resume runs it again
    INTERRUPTED = "interrupted"
    #: the command said "not available on this host: <reason>" with exit code 3 (a CPU
    #: feature, a device, a compiler the host lacks): a fact about the host, not a failure
    UNAVAILABLE = "unavailable"

    @property
    def acceptable(self) -> bool:
        """Neither a failure of the campaign nor of the host: OK, or UNAVAILABLE."""
        return self in (RunStatus.OK, RunStatus.UNAVAILABLE)
