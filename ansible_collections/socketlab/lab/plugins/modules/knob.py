#!/usr/bin/python
# Apache-2.0 (see the socketlab repository)
"""Set kernel knob files (sysfs/procfs) after checking they are recorded for restore."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: knob
short_description: Set a kernel knob file, recorded first, with check and diff mode
description:
  - Reads the knob, compares it with O(value) by the knob's kind (a THP file's bracketed choice,
    a CPU list, a hex CPU mask, an integer or plain text), and writes it only when it differs.
  - Before writing it makes sure the knob's original value is in the isolation state file
    (adding it if the snapshot missed it); without a state file it refuses to write.
  - A knob file that does not exist is reported as "not available on this host" and skipped.
  - Supports check mode and diff mode.
options:
  path:
    description: The knob file (or give O(paths) or O(knobs)).
    type: path
  paths:
    description: Several knob files that all get O(value), e.g. one per CPU.
    type: list
    elements: path
  knobs:
    description: Knobs each with C(path), C(value), optional C(kind) and C(name), as the
      socketlab.lab.isolation_targets filter gives them for a role.
    type: list
    elements: dict
  value:
    description: The value to write (with O(path) or O(paths)).
    type: str
  kind:
    description: How to compare (with O(path) or O(paths)); guessed from the path when omitted.
    type: str
    choices: [text, choice, int, cpulist, cpumask]
  state_file:
    description: Isolation state file that must hold the original value (not needed in check mode).
    type: path
    required: true
  label:
    description: Name of the knob in messages.
    type: str
author: socketlab
"""

EXAMPLES = r"""
- name: THP to madvise
  socketlab.lab.knob:
    path: /sys/kernel/mm/transparent_hugepage/enabled
    value: madvise
    state_file: /var/lib/socketlab/isolation-host1.json

- name: A role's knobs
  socketlab.lab.knob:
    knobs:
      - {name: kernel.numa_balancing, path: /proc/sys/kernel/numa_balancing, value: "0", kind: int}
    label: NUMA balancing
    state_file: /var/lib/socketlab/isolation-host1.json
"""

RETURN = r"""
changed_paths:
  description: "Knob files written (or that would be in check mode), each as 'path: old -> new'."
  type: list
  returned: always
unavailable:
  description: Knob files that do not exist here.
  type: list
  returned: always
available:
  description: False when none of the knob files exists here.
  type: bool
  returned: always
"""

import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.socketlab.lab.plugins.module_utils.isolation import (  # noqa: E402
    KnobError,
    kind_for,
    read_knob,
    require_recorded,
    same,
    write_knob,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path"),
            paths=dict(type="list", elements="path"),
            knobs=dict(type="list", elements="dict"),
            value=dict(type="str"),
            kind=dict(type="str", choices=["text", "choice", "int", "cpulist", "cpumask"]),
            state_file=dict(type="path", required=True),
            label=dict(type="str"),
        ),
        required_one_of=[("path", "paths", "knobs")],
        mutually_exclusive=[("path", "paths", "knobs")],
        required_by={"path": "value", "paths": "value"},
        supports_check_mode=True,
    )
    p = module.params
    knobs, names = [], []  # (path, value, kind) per knob; a kind left out is guessed
    for k in p["knobs"] or [{"path": x} for x in p["paths"] or [p["path"]]]:
        k = {"value": p["value"], "kind": p["kind"], **k}
        if not k.get("path") or k["value"] is None:
            module.fail_json(msg=f"knobs: each needs a path and a value, got {k!r}")
        knobs.append((k["path"], str(k["value"]), k["kind"] or kind_for(k["path"])))
        names.append(k.get("name") or k["path"])
    paths = [path for path, _, _ in knobs]
    label = p["label"] or ", ".join(names)
    unavailable = [path for path in paths if not os.path.exists(path)]
    present = [k for k in knobs if k[0] not in unavailable]
    if not present:
        module.exit_json(
            changed=False,
            skipped=True,
            available=False,
            changed_paths=[],
            unavailable=unavailable,
            msg="{}: not available on this host: {} does not exist".format(
                label, " ".join(unavailable)
            ),
        )
    todo = []
    for path, value, kind in present:
        before = read_knob(path)
        if not same(kind, before, value):
            todo.append((path, value, kind, before))
    changed_paths = [f"{path}: {before} -> {value}" for path, value, _, before in todo]
    values = ", ".join(dict.fromkeys(value for _, value, _ in present))
    result = dict(
        changed=bool(todo),
        available=True,
        changed_paths=changed_paths,
        unavailable=unavailable,
        msg="{}: {}".format(label, "; ".join(changed_paths) if todo else "already " + values),
    )
    if module._diff and todo:
        result["diff"] = {
            "before": "".join(f"{path} = {b}\n" for path, _, _, b in todo),
            "after": "".join(f"{path} = {value}\n" for path, value, _, _ in todo),
        }
    if module.check_mode or not todo:
        module.exit_json(**result)
    try:
        require_recorded(p["state_file"], [path for path, _, _, _ in todo])
    except KnobError as exc:
        module.fail_json(msg=f"{label}: {exc}")
    for path, value, kind, _ in todo:
        try:
            write_knob(path, value)
        except OSError as exc:
            module.fail_json(msg=f"{label}: writing {value!r} to {path} failed: {exc.strerror}")
        after = read_knob(path)
        if not same(kind, after, value):
            module.fail_json(msg=f"{label}: wrote {value!r} to {path} but it reads back {after!r}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
