#!/usr/bin/python
# Apache-2.0 (see the socketlab repository)
"""Set one kernel knob file (sysfs/procfs) after checking it is recorded for restore."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: socketlab_knob
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
    description: The knob file (or give O(paths)).
    type: path
  paths:
    description: Several knob files that all get O(value), e.g. one per CPU.
    type: list
    elements: path
  value:
    description: The value to write.
    type: str
    required: true
  kind:
    description: How to compare; guessed from the path when omitted.
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
  socketlab_knob:
    path: /sys/kernel/mm/transparent_hugepage/enabled
    value: madvise
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
from ansible.module_utils.socketlab_isolation import (  # noqa: E402
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
            value=dict(type="str", required=True),
            kind=dict(type="str", choices=["text", "choice", "int", "cpulist", "cpumask"]),
            state_file=dict(type="path", required=True),
            label=dict(type="str"),
        ),
        required_one_of=[("path", "paths")],
        mutually_exclusive=[("path", "paths")],
        supports_check_mode=True,
    )
    p = module.params
    paths, value = p["paths"] or [p["path"]], p["value"]
    label = p["label"] or ", ".join(paths)
    unavailable = [path for path in paths if not os.path.exists(path)]
    present = [path for path in paths if path not in unavailable]
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
    for path in present:
        before = read_knob(path)
        if not same(p["kind"] or kind_for(path), before, value):
            todo.append((path, before))
    changed_paths = [f"{path}: {before} -> {value}" for path, before in todo]
    result = dict(
        changed=bool(todo),
        available=True,
        changed_paths=changed_paths,
        unavailable=unavailable,
        msg="{}: {}".format(label, "; ".join(changed_paths) if todo else "already " + value),
    )
    if module._diff and todo:
        result["diff"] = {
            "before": "".join(f"{path} = {b}\n" for path, b in todo),
            "after": "".join(f"{path} = {value}\n" for path, _ in todo),
        }
    if module.check_mode or not todo:
        module.exit_json(**result)
    try:
        require_recorded(p["state_file"], [path for path, _ in todo])
    except KnobError as exc:
        module.fail_json(msg=f"{label}: {exc}")
    for path, _ in todo:
        try:
            write_knob(path, value)
        except OSError as exc:
            module.fail_json(msg=f"{label}: writing {value!r} to {path} failed: {exc.strerror}")
        after = read_knob(path)
        if not same(p["kind"] or kind_for(path), after, value):
            module.fail_json(msg=f"{label}: wrote {value!r} to {path} but it reads back {after!r}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
