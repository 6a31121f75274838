"""The signal that stops a session, shared by every part of the runner that must see it."""

from __future__ import annotations

import signal


class StopFlag:
    """Set once by SIGTERM or SIGINT (the supervisor's handler); the host loops start nothing
    new, waits end, and a run that ends other than ok is stored interrupted (a resume runs it)."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def set(self, signum: int | None) -> bool:
        """Record the signal; True the first time (the caller then starts the stop)."""
        first = self.signum is None
        self.signum = signum
        return first and signum is not None

    @property
    def stopping(self) -> bool:
        return self.signum is not None

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else "signal"
