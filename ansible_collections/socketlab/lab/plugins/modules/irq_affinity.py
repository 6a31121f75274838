#!/usr/bin/python
# Apache-2.0 (see the socketlab repository)
"""Move every movable IRQ to the housekeeping CPUs; record the ones the kernel refuses."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: irq_affinity
short_description: Move every movable IRQ onto given CPUs, recording refused ones
description:
  - For each IRQ under O(irq_dir), the new affinity is its current affinity intersected with
    O(cpus) (which keeps an IRQ on its own NUMA node's housekeeping CPUs), or all of O(cpus) when
    that intersection is empty. Also sets C(default_smp_affinity) so new IRQs start there.
  - IRQs whose write the kernel refuses (managed IRQs, per-CPU IRQs; EIO, EPERM or EINVAL) are
    recorded in the state file and returned in RV(refused), not treated as failures.
  - Every IRQ's original affinity must be in the isolation state file before it is written.
  - Supports check mode and diff mode.
options:
  cpus:
    description: Housekeeping CPU list, e.g. C(0-1,96-97).
    type: str
    required: true
  irq_dir:
    description: The kernel's IRQ folder.
    type: path
    default: /proc/irq
  state_file:
    description: Isolation state file holding the original affinities.
    type: path
    required: true
author: socketlab
"""

EXAMPLES = r"""
- name: IRQs to housekeeping CPUs
  socketlab.lab.irq_affinity:
    cpus: "0-1,96-97"
    state_file: /var/lib/socketlab/isolation-host1.json
"""

RETURN = r"""
moved:
  description: "IRQs whose affinity changed, each as 'N: old -> new'."
  type: list
  returned: always
refused:
  description: IRQs the kernel would not move, with the reason.
  type: list
  returned: always
total:
  description: Number of IRQs seen.
  type: int
  returned: always
"""

import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.socketlab.lab.plugins.module_utils.isolation import (  # noqa: E402
    REFUSED_ERRNOS,
    KnobError,
    format_cpulist,
    load_state,
    parse_cpulist,
    read_knob,
    require_recorded,
    write_knob,
    write_state,
)


def irq_name(folder):
    names = [e for e in os.listdir(folder) if os.path.isdir(os.path.join(folder, e))]
    return ",".join(sorted(names)) or "-"


def mask_of(cpus, width_text):
    """Hex mask of `cpus` in the kernel's comma-separated 32-bit-word format, as wide as the
    mask the kernel shows (`width_text`)."""
    value = 0
    for cpu in cpus:
        value |= 1 << cpu
    words = max(len(width_text.split(",")), (max(cpus) // 32 + 1) if cpus else 1)
    return ",".join("%08x" % ((value >> (32 * i)) & 0xFFFFFFFF) for i in reversed(range(words)))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            cpus=dict(type="str", required=True),
            irq_dir=dict(type="path", default="/proc/irq"),
            state_file=dict(type="path", required=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    irq_dir = p["irq_dir"]
    if not os.path.isdir(irq_dir):
        module.fail_json(msg=f"IRQ affinity: not available on this host: {irq_dir} does not exist")
    try:
        housekeeping = set(parse_cpulist(p["cpus"]))
    except ValueError:
        module.fail_json(msg="IRQ affinity: cpus {!r} is not a CPU list".format(p["cpus"]))
    if not housekeeping:
        module.fail_json(msg="IRQ affinity: cpus is empty")
    irqs = sorted(int(e) for e in os.listdir(irq_dir) if e.isdigit())
    moved, refused, before_lines, after_lines = [], [], [], []
    refused_record = {}
    plan = []
    for irq in irqs:
        path = os.path.join(irq_dir, str(irq), "smp_affinity_list")
        if not os.path.exists(path):
            continue
        current = set(parse_cpulist(read_knob(path)))
        target = (current & housekeeping) or housekeeping
        if target != current:
            plan.append((irq, path, current, target))
    default_path = os.path.join(irq_dir, "default_smp_affinity")
    default_change = None
    if os.path.exists(default_path):
        text = read_knob(default_path)
        current_default = int(text.replace(",", ""), 16)
        wanted = mask_of(sorted(housekeeping), text)
        if current_default != int(wanted.replace(",", ""), 16):
            default_change = (text, wanted)
    changed = bool(plan) or default_change is not None
    if not module.check_mode and changed:
        try:
            require_recorded(
                p["state_file"], [x[1] for x in plan] + ([default_path] if default_change else [])
            )
        except KnobError as exc:
            module.fail_json(msg=f"IRQ affinity: {exc}")
    for irq, path, current, target in plan:
        old, new = format_cpulist(current), format_cpulist(target)
        if not module.check_mode:
            try:
                write_knob(path, new)
            except OSError as exc:
                if exc.errno not in REFUSED_ERRNOS:
                    module.fail_json(
                        msg=f"IRQ {irq}: writing {new} to {path} failed: {exc.strerror}"
                    )
                reason = f"{exc.strerror} ({irq_name(os.path.join(irq_dir, str(irq)))})"
                refused.append(f"{irq}: {reason}")
                refused_record[str(irq)] = reason
                continue
            readback = set(parse_cpulist(read_knob(path)))
            if not readback <= housekeeping:
                name = irq_name(os.path.join(irq_dir, str(irq)))
                reason = f"kernel kept {format_cpulist(readback)} ({name})"
                refused.append(f"{irq}: {reason}")
                refused_record[str(irq)] = reason
                continue
        moved.append(f"{irq}: {old} -> {new}")
        before_lines.append(f"irq {irq} = {old}\n")
        after_lines.append(f"irq {irq} = {new}\n")
    if default_change:
        if not module.check_mode:
            try:
                write_knob(default_path, default_change[1])
            except OSError as exc:
                module.fail_json(
                    msg=f"writing {default_change[1]} to {default_path} failed: {exc.strerror}"
                )
        before_lines.append(f"default_smp_affinity = {default_change[0]}\n")
        after_lines.append(f"default_smp_affinity = {default_change[1]}\n")
    if refused_record and not module.check_mode:
        state = load_state(p["state_file"])
        state.setdefault("refused_irqs", {}).update(refused_record)
        write_state(p["state_file"], state)
    msg = f"{len(moved)} of {len(irqs)} IRQs moved to CPUs {format_cpulist(housekeeping)}"
    if refused:
        msg += f"; {len(refused)} refused by the kernel (recorded, not an error): " + "; ".join(
            refused
        )
    result = dict(
        changed=bool(moved) or default_change is not None,
        moved=moved,
        refused=refused,
        total=len(irqs),
        msg=msg,
    )
    if module._diff:
        result["diff"] = {
            "before": "".join(before_lines),
            "after": "".join(after_lines),
            "before_header": irq_dir,
            "after_header": irq_dir,
        }
    module.exit_json(**result)


if __name__ == "__main__":
    main()
