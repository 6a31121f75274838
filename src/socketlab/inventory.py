"""Hosts from the Ansible inventory, read through ``ansible-inventory --list`` so every inventory
format and plugin Ansible understands works, and ``--limit`` means what it means to Ansible."""

from __future__ import annotations

import configparser
import json
import subprocess
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from socketlab import paths
from socketlab.errors import HostError, PathError
from socketlab.safepath import EXPECTED, part_problem

LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True)
class InventoryHost:
    name: str
    connection: str  #: "local" or "ssh"
    address: str
    #: None when the inventory sets no port: ~/.ssh/config's Port (else 22) applies
    port: int | None
    user: str | None
    key_file: str | None
    ssh_common_args: str
    python: str  #: interpreter on the host
    vars: dict[str, Any] = field(default_factory=dict)
    groups: tuple[str, ...] = ()

    @property
    def is_local(self) -> bool:
        return self.connection == "local"


@cache
def default_remote_python() -> str:
    """ansible.cfg's interpreter_python: the one place that says which python hosts use."""
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(paths.ANSIBLE_CFG)
    return cfg.get("defaults", "interpreter_python", fallback="/usr/bin/python3")


def _groups_of(data: dict) -> dict[str, list[str]]:
    """host -> groups it belongs to (directly or through a parent), 'all' excluded."""
    result: dict[str, set[str]] = {}

    def walk(group: str, parents: tuple[str, ...], seen: frozenset[str]) -> None:
        if group in seen:
            return
        entry = data.get(group) or {}
        chain = parents + ((group,) if group != "all" else ())
        for host in entry.get("hosts", []):
            result.setdefault(host, set()).update(chain)
        for child in entry.get("children", []):
            walk(child, chain, seen | {group})

    walk("all", (), frozenset())
    return {h: sorted(g) for h, g in result.items()}


def _host(name: str, hostvars: dict[str, Any], groups: list[str]) -> InventoryHost:
    connection = str(hostvars.get("ansible_connection") or "")
    if not connection:
        connection = "local" if name in LOCAL_NAMES else "ssh"
    if connection not in ("local", "ssh"):
        raise HostError(
            f"inventory: {name}: ansible_connection={connection!r} is not supported; "
            "expected 'local' or 'ssh'"
        )
    python = str(hostvars.get("ansible_python_interpreter") or "")
    if not python or "{{" in python:
        # Templates (e.g. "{{ ansible_playbook_python }}") mean "the controller's" for local.
        python = sys.executable if connection == "local" else default_remote_python()
    port = hostvars.get("ansible_port") or hostvars.get("ansible_ssh_port")
    try:
        port = None if port is None else int(port)
    except (TypeError, ValueError):
        raise HostError(f"inventory: {name}: ansible_port={port!r}; expected a number") from None
    common = " ".join(
        str(hostvars[k])
        for k in ("ansible_ssh_common_args", "ansible_ssh_extra_args")
        if hostvars.get(k)
    )
    return InventoryHost(
        name=name,
        connection=connection,
        address=str(hostvars.get("ansible_host") or hostvars.get("ansible_ssh_host") or name),
        port=port,
        user=hostvars.get("ansible_user") or hostvars.get("ansible_ssh_user"),
        key_file=hostvars.get("ansible_ssh_private_key_file")
        or hostvars.get("ansible_private_key_file"),
        ssh_common_args=common,
        python=python,
        vars=dict(hostvars),
        groups=tuple(groups),
    )


def _check_name(inventory: Path, name: str) -> None:
    """A host's name is a folder name (``<workroot>/<name>``, ``results/<campaign>/hosts/
    <name>.json``): refuse, before anything is written, one that would leave those folders.
    A PathError, not a HostError: the name is wrong whatever pattern selected it."""
    why = part_problem(name)
    if why:
        raise PathError(
            f"{inventory}: host {name!r}: {why}; a host name becomes a folder name, {EXPECTED}"
        )


def load_inventory(path: str | Path | None = None, limit: str | None = None) -> list[InventoryHost]:
    """The inventory's hosts (sorted by name), optionally narrowed by an Ansible pattern.

    Raises HostError for a missing or unparsable inventory and for a --limit pattern (or part of
    one) that matches no host.
    """
    inventory = Path(path) if path else paths.DEFAULT_INVENTORY
    if not inventory.exists():
        raise HostError(f"{inventory}: inventory not found; expected an Ansible inventory file")
    argv = [str(Path(sys.executable).parent / "ansible-inventory"), "-i", str(inventory), "--list"]
    if not Path(argv[0]).exists():
        argv[0] = "ansible-inventory"
    if limit:
        argv += ["--limit", limit]
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=120, env=paths.ansible_env()
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise HostError(f"{inventory}: ansible-inventory failed: {exc}") from None
    warnings = [line for line in proc.stderr.splitlines() if line.strip()]
    for line in warnings:
        if "Unable to parse" in line or "No inventory was parsed" in line:
            raise HostError(f"{inventory}: not a valid Ansible inventory ({line.strip()})")
        if "Could not match supplied host pattern" in line:
            unmatched = line.split("ignoring:", 1)[-1].strip()
            raise HostError(
                f"{inventory}: --limit {limit!r}: {unmatched!r} matches no host or group"
            )
    if proc.returncode != 0:
        last = warnings[-1] if warnings else f"exit {proc.returncode}"
        raise HostError(f"{inventory}: ansible-inventory failed: {last}")
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        raise HostError(f"{inventory}: ansible-inventory printed no JSON") from None
    hostvars = data.get("_meta", {}).get("hostvars", {})
    groups = _groups_of(data)
    names = sorted(set(groups) | set(hostvars))
    if limit and not names:
        raise HostError(f"{inventory}: --limit {limit!r} matches no host")
    for name in names:
        _check_name(inventory, name)
    return [_host(n, hostvars.get(n, {}), groups.get(n, [])) for n in names]
