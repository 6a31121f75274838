"""Executors (socketlab.execute.base until the next commit moves make_executor here)."""

from socketlab.execute.base import (  # noqa: F401
    BECOME_REFUSED,
    DEFAULT_WORKROOT,
    Executor,
    HostBusy,
    HostUnreachable,
    Result,
    become_preflight,
    become_refused,
    become_requested,
    become_variable,
    make_executor,
)
