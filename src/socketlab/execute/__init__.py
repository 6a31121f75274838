"""Executors: run a command on one host, copy files to and from it, hold its lock.

``LocalExecutor`` runs on this machine with no SSH; ``SshExecutor`` keeps one fabric connection
per host for the whole campaign. Both speak the same small interface (``Executor``, in
``base``), so the runner never knows which one it has. Commands are argv lists; user data never
meets a shell. ``make_executor`` picks one for an inventory host.
"""

from __future__ import annotations

import os

from socketlab.errors import HostError
from socketlab.execute.base import (
    BECOME_REFUSED,
    DEFAULT_WORKROOT,
    WORKROOT_ENV,
    Executor,
    HostBusy,
    HostUnreachable,
    Result,
    ToolsBundle,
    become_preflight,
    become_refused,
    become_requested,
    become_variable,
    default_workroot,
    process,
    tool_files,
    tools_bundle,
)
from socketlab.execute.local import LocalExecutor
from socketlab.execute.ssh import SshExecutor

__all__ = [
    "BECOME_REFUSED",
    "DEFAULT_WORKROOT",
    "WORKROOT_ENV",
    "default_workroot",
    "Executor",
    "HostBusy",
    "HostUnreachable",
    "LocalExecutor",
    "Result",
    "SshExecutor",
    "ToolsBundle",
    "become_preflight",
    "become_refused",
    "become_requested",
    "become_variable",
    "make_executor",
    "process",
    "tool_files",
    "tools_bundle",
]


def make_executor(host, workroot: str | None = None) -> Executor:
    """The executor for an inventory host (socketlab.inventory.InventoryHost-like).

    The host variable ``socketlab_workroot`` moves the host's work folder (default /tmp/socketlab,
    or $SOCKETLAB_WORKROOT: ``default_workroot``).
    """
    vars_ = getattr(host, "vars", None) or {}
    workroot = workroot or vars_.get("socketlab_workroot") or default_workroot()
    if getattr(host, "connection", "local") == "local":
        if become_requested(vars_) and os.geteuid() != 0:
            raise HostError(
                f"inventory: {host.name}: {become_variable(vars_)} is for SSH hosts; "
                "for a local one run orchestrate as root (sudo orchestrate run ...)"
            )

        return LocalExecutor(host.name, workroot=workroot, python=getattr(host, "python", None))
    return SshExecutor(host, workroot=workroot)
