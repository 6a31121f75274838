#!/usr/bin/python
# Apache-2.0 (see the socketlab repository)
"""Check, before anything is changed, that a host can be isolated from here."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: isolation_preflight
short_description: Refuse early, with one line, when a host can't be isolated
description:
  - Fails when the play does not run as root on the host, or when the host has no IRQ folder.
  - Returns who runs the play and what PID 1 is, for the roles that depend on it.
  - Changes nothing; supports check mode.
options:
  irq_dir:
    description: The kernel's IRQ folder.
    type: path
    default: /proc/irq
  proc_root:
    description: procfs mount point.
    type: path
    default: /proc
  need_root:
    description: Fail unless the effective uid is 0.
    type: bool
    default: true
author: socketlab
"""

EXAMPLES = r"""
- name: Preflight
  socketlab.lab.isolation_preflight:
    irq_dir: /proc/irq
"""

RETURN = r"""
euid:
  description: Effective uid the play runs as on the host.
  type: int
  returned: always
user:
  description: User name for euid.
  type: str
  returned: always
service_manager:
  description: Command name of PID 1 (systemd when systemd).
  type: str
  returned: always
"""

import os  # noqa: E402
import pwd  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.socketlab.lab.plugins.module_utils.isolation import pid1_manager  # noqa: E402


def main():
    module = AnsibleModule(
        argument_spec=dict(
            irq_dir=dict(type="path", default="/proc/irq"),
            proc_root=dict(type="path", default="/proc"),
            need_root=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    euid = os.geteuid()
    try:
        user = pwd.getpwuid(euid).pw_name
    except KeyError:
        user = str(euid)
    if p["need_root"] and euid != 0:
        module.fail_json(
            msg=f"isolation needs root on this host, but the play runs as uid {euid} ({user}): "
            "connect as root or become root (-b, become: true or ansible_become in the "
            "inventory); nothing was changed",
            euid=euid,
            user=user,
        )
    if not os.path.isdir(p["irq_dir"]):
        module.fail_json(
            msg="this host has no {}, so IRQ affinity can't be set: not isolating; "
            "nothing was changed".format(p["irq_dir"]),
            euid=euid,
            user=user,
        )
    module.exit_json(
        changed=False, euid=euid, user=user, service_manager=pid1_manager(p["proc_root"])
    )


if __name__ == "__main__":
    main()
