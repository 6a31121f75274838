#!/usr/bin/python
# Apache-2.0 (see the socketlab repository)
"""Confine systemd slices and scopes to the housekeeping CPUs (runtime only)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: systemd_cpuset
short_description: Set AllowedCPUs on systemd units at runtime, where PID 1 is systemd
description:
  - Where PID 1 is systemd, runs C(systemctl set-property --runtime UNIT AllowedCPUs=CPUS) for
    each unit whose AllowedCPUs differs (C(--runtime) so a reboot also undoes it).
  - Elsewhere it changes nothing and says plainly that the step does not apply and why.
  - Requires the units' previous AllowedCPUs in the isolation state file. Supports check mode
    and diff mode.
options:
  units:
    description: Units to confine.
    type: list
    elements: str
    default: [system.slice, init.scope]
  cpus:
    description: Housekeeping CPU list.
    type: str
    required: true
  state_file:
    description: Isolation state file.
    type: path
    required: true
extends_documentation_fragment:
  - socketlab.lab.service_manager
author: socketlab
"""

EXAMPLES = r"""
- name: Confine services
  socketlab.lab.systemd_cpuset:
    cpus: "0-1,96-97"
    state_file: /var/lib/socketlab/isolation-host1.json
"""

RETURN = r"""
applies:
  description: False where PID 1 is not systemd.
  type: bool
  returned: always
confined:
  description: Units whose AllowedCPUs was set.
  type: list
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.socketlab.lab.plugins.module_utils.isolation import (  # noqa: E402
    format_cpulist,
    load_state,
    parse_cpulist,
    service_manager,
    service_manager_option,
    set_systemd_allowed_cpus,
    systemd_allowed_cpus,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            units=dict(type="list", elements="str", default=["system.slice", "init.scope"]),
            cpus=dict(type="str", required=True),
            state_file=dict(type="path", required=True),
            service_manager=service_manager_option(),
        ),
        supports_check_mode=True,
    )
    p = module.params
    manager = service_manager(p["service_manager"])
    if manager != "systemd":
        module.exit_json(
            changed=False,
            skipped=True,
            applies=False,
            confined=[],
            msg=f"service confinement does not apply on this host: PID 1 is {manager!r}, not "
            "systemd, so there are no slices to give AllowedCPUs; services keep "
            "their affinity",
        )
    wanted = format_cpulist(parse_cpulist(p["cpus"]))
    todo, before, after = [], [], []
    for unit in p["units"]:
        current = systemd_allowed_cpus(module, unit)
        if format_cpulist(parse_cpulist(current)) != wanted:
            todo.append(unit)
            before.append(f"{unit} AllowedCPUs={current}\n")
            after.append(f"{unit} AllowedCPUs={wanted}\n")
    if todo and not module.check_mode:
        state = load_state(p["state_file"])
        missing = [u for u in todo if state is None or u not in state.get("systemd_units", {})]
        if missing:
            module.fail_json(
                msg="the isolation state file {} does not record AllowedCPUs of {}; "
                "run the isolation_state role first".format(p["state_file"], missing)
            )
        for unit in todo:
            set_systemd_allowed_cpus(module, unit, wanted)
    result = dict(
        changed=bool(todo),
        applies=True,
        confined=todo,
        msg="AllowedCPUs={} on {}".format(wanted, ", ".join(todo) or "(already)"),
    )
    if module._diff:
        result["diff"] = {"before": "".join(before), "after": "".join(after)}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
