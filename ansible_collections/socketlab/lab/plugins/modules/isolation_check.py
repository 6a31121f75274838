#!/usr/bin/python
# Apache-2.0 (see the socketlab repository)
"""Read back every isolation knob and compare it with the plan."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: isolation_check
short_description: Fail naming each knob that drifted from the isolation plan
description:
  - Reads every expected knob file, every IRQ's affinity (IRQs recorded as refused by the
    kernel are exempt), whether irqbalance runs, whether the latency holder holds the device,
    and systemd units' AllowedCPUs where PID 1 is systemd.
  - Knobs whose file does not exist here are listed as unavailable, not as drift.
  - Changes nothing.
options:
  state_file:
    description: Isolation state file (its absence means isolation is not applied).
    type: path
    required: true
  knobs:
    description: Expected knobs, each with C(name), C(path), C(value) and optional C(kind).
    type: list
    elements: dict
    default: []
  irq_dir:
    description: The kernel's IRQ folder.
    type: path
    default: /proc/irq
  cpus:
    description: Housekeeping CPU list every movable IRQ must stay within.
    type: str
    required: true
  holder_pidfile:
    description: Latency holder pidfile (empty to skip the check).
    type: path
  holder_device:
    description: The PM QoS device.
    type: path
    default: /dev/cpu_dma_latency
  systemd_units:
    description: Units that must have AllowedCPUs equal to O(cpus) where PID 1 is systemd.
    type: list
    elements: str
    default: []
  forbidden_processes:
    description: Process names that must not run (irqbalance).
    type: list
    elements: str
    default: [irqbalance]
author: socketlab
"""

EXAMPLES = r"""
- name: Check the knobs
  socketlab.lab.isolation_check:
    state_file: /var/lib/socketlab/isolation-host1.json
    cpus: "0"
    knobs:
      - {name: thp, path: /sys/kernel/mm/transparent_hugepage/enabled, value: madvise}
"""

RETURN = r"""
checked:
  description: Names of the knobs compared.
  type: list
  returned: always
drifted:
  description: One line per drifted knob.
  type: list
  returned: always
unavailable:
  description: Knobs that do not exist on this host.
  type: list
  returned: always
"""

import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.socketlab.lab.plugins.module_utils.isolation import (  # noqa: E402
    find_processes,
    format_cpulist,
    kind_for,
    load_state,
    parse_cpulist,
    pid1_manager,
    read_knob,
    same,
)


def holder_pid(pidfile, device):
    try:
        with open(pidfile) as f:
            pid = int(f.read().strip())
        fd_dir = f"/proc/{pid}/fd"
        for fd in os.listdir(fd_dir):
            if os.readlink(os.path.join(fd_dir, fd)) == os.path.realpath(device):
                return pid
    except (OSError, ValueError):
        pass
    return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state_file=dict(type="path", required=True),
            knobs=dict(type="list", elements="dict", default=[]),
            irq_dir=dict(type="path", default="/proc/irq"),
            cpus=dict(type="str", required=True),
            holder_pidfile=dict(type="path"),
            holder_device=dict(type="path", default="/dev/cpu_dma_latency"),
            systemd_units=dict(type="list", elements="str", default=[]),
            forbidden_processes=dict(type="list", elements="str", default=["irqbalance"]),
        ),
        supports_check_mode=True,
    )
    p = module.params
    checked, drifted, unavailable = [], [], []
    state = load_state(p["state_file"])
    checked.append("state file")
    if state is None:
        drifted.append("state file: {} is missing (isolation not applied)".format(p["state_file"]))
        state = {}
    for knob in p["knobs"]:
        name, path, value = knob["name"], knob["path"], str(knob["value"])
        if not os.path.exists(path):
            unavailable.append(f"{name} ({path})")
            continue
        checked.append(name)
        current = read_knob(path)
        if not same(knob.get("kind") or kind_for(path), current, value):
            drifted.append(f"{name}: expected {value}, found {current} ({path})")
    housekeeping = set(parse_cpulist(p["cpus"]))
    refused = state.get("refused_irqs", {})
    if os.path.isdir(p["irq_dir"]):
        checked.append("irq affinity")
        bad = []
        for entry in sorted((e for e in os.listdir(p["irq_dir"]) if e.isdigit()), key=int):
            path = os.path.join(p["irq_dir"], entry, "smp_affinity_list")
            if entry in refused or not os.path.exists(path):
                continue
            cpus = set(parse_cpulist(read_knob(path)))
            if not cpus <= housekeeping:
                bad.append(f"{entry}={format_cpulist(cpus)}")
        if bad:
            drifted.append(
                f"irq affinity: {len(bad)} IRQ(s) outside housekeeping CPUs "
                f"{format_cpulist(housekeeping)}: " + ", ".join(bad)
            )
        default = os.path.join(p["irq_dir"], "default_smp_affinity")
        if os.path.exists(default):
            checked.append("default irq affinity")
            mask = int(read_knob(default).replace(",", ""), 16)
            cpus = {i for i in range(mask.bit_length()) if mask >> i & 1}
            if not cpus <= housekeeping:
                drifted.append(
                    f"default irq affinity: {format_cpulist(cpus)} is outside housekeeping "
                    f"CPUs {format_cpulist(housekeeping)}"
                )
    else:
        unavailable.append("irq affinity ({})".format(p["irq_dir"]))
    for name in p["forbidden_processes"]:
        checked.append(f"{name} stopped")
        found = find_processes(name)
        if found:
            drifted.append(f"{name} stopped: runs again (PIDs {[x[0] for x in found]})")
    if p["holder_pidfile"]:
        if os.path.exists(p["holder_device"]):
            checked.append("latency holder")
            if holder_pid(p["holder_pidfile"], p["holder_device"]) is None:
                drifted.append(
                    "latency holder: no process from {} holds {}".format(
                        p["holder_pidfile"], p["holder_device"]
                    )
                )
        else:
            unavailable.append("latency holder ({})".format(p["holder_device"]))
    # The service manager apply acted through, as the state file records it, so verify checks
    # what apply did (PID 1's where nothing is recorded).
    manager = (state.get("holder") or {}).get("manager") or pid1_manager()
    if manager == "systemd":
        for unit in p["systemd_units"]:
            checked.append(f"{unit} AllowedCPUs")
            rc, out, err = module.run_command(
                ["systemctl", "show", "-p", "AllowedCPUs", "--value", unit]
            )
            if format_cpulist(parse_cpulist(out.strip())) != format_cpulist(housekeeping):
                drifted.append(
                    f"{unit} AllowedCPUs: expected {format_cpulist(housekeeping)}, "
                    f"found {out.strip()}"
                )
    else:
        unavailable.append(f"service confinement (PID 1 is {manager!r}, not systemd)")
    result = dict(changed=False, checked=checked, drifted=drifted, unavailable=unavailable)
    if drifted:
        module.fail_json(
            msg=f"{len(drifted)} knob(s) drifted from the isolation plan: " + "; ".join(drifted),
            **result,
        )
    module.exit_json(
        msg=f"all {len(checked)} knobs match the plan (" + ", ".join(checked) + ")", **result
    )


if __name__ == "__main__":
    main()
