# Apache-2.0 (see the socketlab repository)
"""The ``service_manager`` option, documented once for every module that takes it
(argument spec: ``service_manager_option()`` in module_utils/isolation.py)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  service_manager:
    description:
      - V(auto) acts through PID 1's service manager; V(systemd) or V(none) name it instead
        (for tests that drive the systemd path against an emulated C(systemctl)).
    type: str
    choices: [auto, systemd, none]
    default: auto
"""
