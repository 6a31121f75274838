#!/usr/bin/python
# Apache-2.0 (see the socketlab repository)
"""Which build and measurement tools a host has, and the package that brings each missing one."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: host_tools
short_description: Check the tools a socketlab campaign needs on a host
description:
  - Looks for each tool (gcc, make, perf, turbostat, tar, find, the kernel's headers, a Python of
    at least the wanted version) and says, per distribution family, which package provides a
    missing one. Changes nothing; the host_packages role installs and records.
  - Runs on the host's python3 (3.9 and up, stdlib only).
options:
  os_family:
    description: ansible_os_family (RedHat, Debian, ...).
    type: str
    required: true
  distribution:
    description: ansible_distribution (Amazon, Ubuntu, Debian, ...).
    type: str
    default: ""
  kernel:
    description: The host's kernel release (ansible_kernel); the headers package is named after
      it. Empty means this machine's running kernel.
    type: str
    default: ""
  python_min:
    description: Lowest Python version the campaign's host-side steps want, as MAJOR.MINOR.
    type: str
    default: "3.9"
  record_file:
    description: Where the host_packages role records what it installed (read back here).
    type: path
    required: true
  base:
    description: Check the build and measurement tools (gcc, make, perf, turbostat, tar, find,
      the kernel's headers, Python); false checks only O(extra) (a fleet that builds nothing,
      such as the platform suite's).
    type: bool
    default: true
  extra:
    description:
      - More tools a campaign needs (e.g. the platform suite's sysbench, fio, iperf3 and the
        distribution's boto3), each a dict with C(tool) (a command looked up on the path) or
        C(module) (a Python module the host's python3 imports), and the package per package
        manager (C(apt), C(dnf)); a package name alone is a tool and package of that name.
    type: list
    elements: raw
    default: []
author: socketlab
"""

EXAMPLES = r"""
- name: Check the tools
  socketlab.lab.host_tools:
    os_family: "{{ ansible_facts.os_family }}"
    distribution: "{{ ansible_facts.distribution }}"
    record_file: /var/lib/socketlab/host_packages.json
"""

RETURN = r"""
tools:
  description: tool -> {found, path, package}; package is what provides it on this family.
  type: dict
  returned: always
missing_packages:
  description: The packages of the missing tools, in install order.
  type: list
  returned: always
kernel:
  description: The kernel release the headers must match (the option, or the running one).
  type: str
  returned: always
python_apt:
  description: Whether this interpreter can import apt_pkg (python3-apt), which Ansible's apt
    module needs; the role installs it, recorded, where it is missing.
  type: bool
  returned: always
"""

import glob  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

SEARCH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/local/sbin", "/usr/sbin", "/sbin"])


def packages(family: str, distribution: str, kernel: str, python: str) -> dict:
    """tool -> package providing it, per distribution family (None: no package known)."""
    if family == "RedHat":  # Amazon Linux 2023, RHEL 9 and its rebuilds, Fedora
        return {
            "gcc": "gcc",
            "make": "make",
            "perf": "perf",
            "turbostat": "kernel-tools",
            "kernel-headers": f"kernel-devel-{kernel}",
            "python": f"python{python}",
            "tar": "tar",
            "find": "findutils",
        }
    if family == "Debian" and distribution == "Ubuntu":
        tools = f"linux-tools-{kernel}"
        return {
            "gcc": "gcc",
            "make": "make",
            "perf": tools,
            "turbostat": tools,
            "kernel-headers": f"linux-headers-{kernel}",
            "python": f"python{python}",
            "tar": "tar",
            "find": "findutils",
        }
    if family == "Debian":
        return {
            "gcc": "gcc",
            "make": "make",
            "perf": "linux-perf",
            "turbostat": "linux-cpupower",
            "kernel-headers": f"linux-headers-{kernel}",
            "python": f"python{python}",
            "tar": "tar",
            "find": "findutils",
        }
    return dict.fromkeys(
        ("gcc", "make", "perf", "turbostat", "kernel-headers", "python", "tar", "find")
    )


def extra_tools(entries: list, manager: str) -> dict:
    """name -> (kind, package) for the extra entries; kind is "tool" or "module"."""
    out = {}
    for entry in entries:
        if isinstance(entry, str):
            entry = {"tool": entry, "apt": entry, "dnf": entry}
        if not isinstance(entry, dict) or not (entry.get("tool") or entry.get("module")):
            raise ValueError(
                f"extra entry {entry!r}: expected a package name or a dict with "
                "tool or module, and apt/dnf package names"
            )
        kind = "tool" if entry.get("tool") else "module"
        out[str(entry[kind])] = (kind, entry.get(manager))
    return out


def find_python(minimum: tuple) -> str | None:
    """The first python3.X (X >= the minimum's) on the search path."""
    for minor in range(minimum[1], 20):
        path = shutil.which(f"python{minimum[0]}.{minor}", path=SEARCH)
        if path:
            return path
    return None


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "os_family": {"type": "str", "required": True},
            "distribution": {"type": "str", "default": ""},
            "kernel": {"type": "str", "default": ""},
            "python_min": {"type": "str", "default": "3.9"},
            "record_file": {"type": "path", "required": True},
            "base": {"type": "bool", "default": True},
            "extra": {"type": "list", "elements": "raw", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        minimum = tuple(int(x) for x in p["python_min"].split("."))[:2]
        if len(minimum) != 2:
            raise ValueError
    except ValueError:
        module.fail_json(msg=f"python_min {p['python_min']!r}: expected MAJOR.MINOR, e.g. 3.11")
    kernel = p["kernel"] or platform.release()
    by_tool = packages(p["os_family"], p["distribution"], kernel, p["python_min"])
    found = {
        name: shutil.which(name, path=SEARCH)
        for name in ("gcc", "make", "perf", "turbostat", "tar", "find")
    }
    build = f"/lib/modules/{kernel}/build"
    found["kernel-headers"] = build if glob.glob(os.path.join(build, "Makefile")) else None
    found["python"] = find_python(minimum)
    tools = {
        name: {"found": path is not None, "path": path, "package": by_tool.get(name)}
        for name, path in found.items()
    }
    if not p["base"]:
        tools = {}
    manager = "dnf" if p["os_family"] == "RedHat" else "apt"
    try:
        extra = extra_tools(p["extra"], manager)
    except ValueError as exc:
        module.fail_json(msg=f"host_packages_extra: {exc}")
    for name, (kind, package) in extra.items():
        if kind == "tool":
            path = shutil.which(name, path=SEARCH)
        else:  # the interpreter the campaign's host tools run with (python3 -I)
            spec = importlib.util.find_spec(name)
            path = spec.origin if spec else None
        tools[name] = {"found": path is not None, "path": path, "package": package}
    missing = []
    for info in tools.values():
        if not info["found"] and info["package"] and info["package"] not in missing:
            missing.append(info["package"])
    record = None
    if os.path.exists(p["record_file"]):
        try:
            with open(p["record_file"]) as fh:
                record = json.load(fh)
        except (OSError, ValueError):
            record = None
    # Ansible's apt module needs python3-apt in this interpreter; without it the module installs
    # it itself, with its recommends and unrecorded (found on the pristine test hosts)
    python_apt = importlib.util.find_spec("apt_pkg") is not None
    module.exit_json(
        changed=False,
        tools=tools,
        missing_packages=missing,
        kernel=kernel,
        record=record,
        python_apt=python_apt,
    )


if __name__ == "__main__":
    main()
