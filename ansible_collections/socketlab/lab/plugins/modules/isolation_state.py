#!/usr/bin/python
# Apache-2.0 (see the socketlab repository)
"""Snapshot, restore or read the per-host socket-isolation state file."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: isolation_state
short_description: Record every value isolation will change, or put them all back
description:
  - With O(state=present), records the current value of every listed knob file, whether the
    listed processes run, the systemd units' C(AllowedCPUs) (where PID 1 is systemd) and where
    the latency holder lives, in a JSON state file written atomically.
  - Values already recorded are kept, so a second apply, or an apply after one that was killed,
    never overwrites the original values. Knobs that are not in the file yet are added.
  - With O(state=absent), puts every recorded value back (only where it differs now), stops the
    latency holder, restores systemd units, restarts processes that ran before, and removes the
    state file. Without a state file it reports "nothing to restore" and changes nothing.
  - With O(state=query), returns the state file's content.
  - Supports check mode and diff mode.
options:
  path:
    description: State file on the host.
    type: path
    required: true
  state:
    description: V(present) snapshots, V(absent) restores, V(query) reads.
    type: str
    choices: [present, absent, query]
    default: present
  host:
    description: Inventory name recorded in the file.
    type: str
    default: ""
  knobs:
    description: Knob files to record (missing ones are reported as unavailable).
    type: list
    elements: path
    default: []
  globs:
    description: Glob patterns of knob files to record, expanded on the host.
    type: list
    elements: str
    default: []
  processes:
    description: Process names (comm) whose running state to record, e.g. irqbalance.
    type: list
    elements: str
    default: []
  systemd_units:
    description: Units whose AllowedCPUs to record where PID 1 is systemd.
    type: list
    elements: str
    default: []
  holder:
    description: Where the latency holder keeps its pidfile and script, the helper files installed
      beside the script (C(helpers), a list of paths), and its systemd unit name. The script,
      its helpers and any folder that does not exist yet (for it, its pidfile and the state
      file) are recorded, so restore removes what isolation added.
    type: dict
    default: {}
  plan:
    description: The isolation plan. Replaced on every apply (it is not an original value).
    type: dict
    default: {}
  targets:
    description: What verify checks (knobs with expected values, IRQ CPUs, holder pidfile,
      units). Replaced on every apply.
    type: dict
    default: {}
  proc_root:
    description: procfs mount point.
    type: path
    default: /proc
  service_manager:
    description:
      - The service manager recorded for the units, irqbalance and the holder (restore acts
        through it). V(auto) is PID 1's; V(systemd) or V(none) name it (for tests that drive
        the systemd path against an emulated C(systemctl)).
    type: str
    choices: [auto, systemd, none]
    default: auto
author: socketlab
"""

EXAMPLES = r"""
- name: Record every knob before any change
  socketlab.lab.isolation_state:
    path: /var/lib/socketlab/isolation-host1.json
    host: host1
    knobs: [/sys/kernel/mm/transparent_hugepage/enabled, /proc/sys/kernel/numa_balancing]
    globs: ["/proc/irq/*/smp_affinity_list"]
    processes: [irqbalance]

- name: Put everything back
  socketlab.lab.isolation_state:
    path: /var/lib/socketlab/isolation-host1.json
    state: absent
"""

RETURN = r"""
recorded:
  description: Knob files newly recorded by this call (present).
  type: list
  returned: always
unavailable:
  description: Listed knob files that do not exist on this host.
  type: list
  returned: always
restored:
  description: Knob files written back (absent).
  type: list
  returned: always
refused:
  description: Knob files the kernel refused to write back (managed IRQs).
  type: list
  returned: always
nothing_to_restore:
  description: True when restore found no state file.
  type: bool
  returned: always
state:
  description: The state file's content after the call (present, query).
  type: dict
  returned: always
"""

import glob  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.socketlab.lab.plugins.module_utils.isolation import (  # noqa: E402
    REFUSED_ERRNOS,
    KnobError,
    find_processes,
    kind_for,
    load_state,
    new_state,
    normalize,
    read_knob,
    same,
    service_manager,
    service_manager_option,
    set_systemd_allowed_cpus,
    systemctl,
    systemd_allowed_cpus,
    write_knob,
    write_state,
)


def _not_there_yet(files, dirs):
    """The files, and the folders (with missing parents), that do not exist yet: what isolation
    will add on the host, so restore can take it away again."""
    made_files = [f for f in files if f and not os.path.exists(f)]
    made_dirs = set()
    for folder in dirs:
        folder = os.path.abspath(folder)
        while folder != os.path.dirname(folder) and not os.path.exists(folder):
            made_dirs.add(folder)
            folder = os.path.dirname(folder)
    return made_files, sorted(made_dirs)


def _record_made(state, files, dirs):
    made = state.setdefault("made", {"files": [], "dirs": []})
    new_files, new_dirs = _not_there_yet(files, dirs)
    made["files"] = sorted(set(made["files"]) | set(new_files))
    made["dirs"] = sorted(set(made["dirs"]) | set(new_dirs))


def snapshot(module, p):
    state = load_state(p["path"])
    before = None if state is None else dict(state)
    fresh = state is None
    if fresh:
        state = new_state(p["host"])
        _record_made(state, [], [os.path.dirname(os.path.abspath(p["path"]))])
    recorded, unavailable = [], []
    paths = list(p["knobs"])
    for pattern in p["globs"]:
        paths.extend(sorted(glob.glob(pattern)))
    for path in paths:
        if path in state["files"]:
            continue
        if not os.path.exists(path):
            unavailable.append(path)
            continue
        state["files"][path] = {"value": read_knob(path), "kind": kind_for(path)}
        recorded.append(path)
    manager = service_manager(p["service_manager"], p["proc_root"])
    new_processes = []
    for name in p["processes"]:
        if name in state["processes"]:
            continue
        found = find_processes(name, p["proc_root"])
        state["processes"][name] = {
            "running": bool(found),
            "pids": [pid for pid, _ in found],
            "argv": found[0][1] if found else [],
            "manager": manager,
            "sysv_script": f"/etc/init.d/{name}" if os.path.exists(f"/etc/init.d/{name}") else None,
        }
        new_processes.append(name)
    if manager == "systemd":
        for unit in p["systemd_units"]:
            if unit not in state["systemd_units"]:
                state["systemd_units"][unit] = systemd_allowed_cpus(module, unit)
                new_processes.append(unit)
    if p["holder"] and not state["holder"]:
        state["holder"] = dict(p["holder"], manager=manager)
        holder_files = [p["holder"].get("script"), p["holder"].get("pidfile")]
        _record_made(
            state,
            [p["holder"].get("script"), *p["holder"].get("helpers", [])],
            [os.path.dirname(os.path.abspath(f)) for f in holder_files if f],
        )
        new_processes.append("holder")
    targets_changed = False
    for key in ("plan", "targets"):
        if p[key] and state.get(key) != p[key]:
            state[key] = p[key]
            targets_changed = True
    changed = fresh or bool(recorded) or bool(new_processes) or targets_changed
    if changed and not module.check_mode:
        write_state(p["path"], state)
    result = dict(
        changed=changed,
        recorded=recorded,
        unavailable=unavailable,
        restored=[],
        refused=[],
        nothing_to_restore=False,
        state=state,
    )
    if module._diff:
        result["diff"] = {
            "before": "" if before is None else f"{len(before['files'])} knobs recorded\n",
            "after": "".join(
                "record {} = {}\n".format(k, state["files"][k]["value"]) for k in recorded
            ),
            "before_header": p["path"],
            "after_header": p["path"],
        }
    return result


def _stop_holder(module, holder):
    """Stop the latency holder by its unit or its recorded pidfile PID. Returns what it did."""
    if not holder:
        return None
    if holder.get("manager") == "systemd" and holder.get("unit"):
        rc, out, err = module.run_command(["systemctl", "is-active", holder["unit"]])
        if out.strip() != "active":
            return None
        if not module.check_mode:
            systemctl(module, "stop", holder["unit"])
        return "stopped unit {}".format(holder["unit"])
    pidfile = holder.get("pidfile")
    try:
        with open(pidfile) as f:
            pid = int(f.read().strip())
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            ours = b"dma_latency_hold" in f.read()
    except (OSError, ValueError, TypeError):
        return None
    if not ours:
        return None
    if not module.check_mode:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}"):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().split(") ")[-1].startswith("Z"):
                        break
            except OSError:
                break
            time.sleep(0.05)
        if os.path.exists(pidfile):
            os.unlink(pidfile)
    return f"stopped PID {pid}"


def _start_process(module, name, record):
    if find_processes(name):
        return None
    if module.check_mode:
        return f"would start {name}"
    if record.get("manager") == "systemd":
        systemctl(module, "start", name)
    elif record.get("sysv_script"):
        module.run_command([record["sysv_script"], "start"], check_rc=True)
    elif record.get("argv"):
        subprocess.Popen(
            record["argv"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
    else:
        return f"cannot start {name}: no recorded way to start it"
    return f"started {name}"


def _remove_made(made):
    """Remove the files and (empty) folders isolation added; a folder another host's state
    still uses (network-namespace hosts share one filesystem) stays."""
    removed = []
    for path in made.get("files", []):
        if os.path.isfile(path):
            os.unlink(path)
            removed.append(path)
    for folder in sorted(made.get("dirs", []), key=lambda d: d.count(os.sep), reverse=True):
        try:
            os.rmdir(folder)
        except OSError:
            continue  # not empty, or already gone
        removed.append(folder)
    return removed


def restore(module, p):
    state = load_state(p["path"])
    empty = dict(changed=False, recorded=[], unavailable=[], restored=[], refused=[], state={})
    if state is None:
        return dict(
            empty,
            nothing_to_restore=True,
            msg="nothing to restore: no state file {}".format(p["path"]),
        )
    restored, refused, unavailable, failures, actions = [], [], [], [], []
    before_lines, after_lines = [], []
    holder = _stop_holder(module, state.get("holder"))
    if holder:
        actions.append(holder)
    for path, rec in sorted(state["files"].items()):
        if not os.path.exists(path):
            unavailable.append(path)
            continue
        current = read_knob(path)
        if same(rec["kind"], current, rec["value"]):
            continue
        value = rec["value"]
        if rec["kind"] == "choice":
            value = normalize("choice", value)
        if not module.check_mode:
            try:
                write_knob(path, value)
            except OSError as exc:
                if exc.errno in REFUSED_ERRNOS and "/irq/" in path:
                    refused.append(f"{path}: {exc.strerror}")
                    continue
                failures.append(f"{path}: {exc.strerror}")
                continue
        restored.append(path)
        before_lines.append(f"{path} = {current}\n")
        after_lines.append("{} = {}\n".format(path, rec["value"]))
    for unit, cpus in sorted(state.get("systemd_units", {}).items()):
        if systemd_allowed_cpus(module, unit) != cpus:
            if not module.check_mode:
                set_systemd_allowed_cpus(module, unit, cpus)
            actions.append(f"{unit} AllowedCPUs={cpus}")
    for name, record in sorted(state.get("processes", {}).items()):
        if record.get("running"):
            action = _start_process(module, name, record)
            if action:
                actions.append(action)
    if failures:
        module.fail_json(
            msg=f"restore failed for {len(failures)} knob(s), state file {p['path']} kept: "
            + "; ".join(failures),
            restored=restored,
            refused=refused,
        )
    removed = [p["path"]]
    if not module.check_mode:
        os.unlink(p["path"])
        removed += _remove_made(state.get("made") or {})
    result = dict(
        empty,
        changed=True,
        restored=restored,
        refused=refused,
        unavailable=unavailable,
        actions=actions,
        nothing_to_restore=False,
        msg=f"restored {len(restored)} knob(s), "
        + (", ".join(actions) or "no services to restart")
        + ("; would remove " if module.check_mode else "; removed ")
        + ", ".join(removed),
    )
    if module._diff:
        result["diff"] = {"before": "".join(before_lines), "after": "".join(after_lines)}
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            state=dict(type="str", default="present", choices=["present", "absent", "query"]),
            host=dict(type="str", default=""),
            knobs=dict(type="list", elements="path", default=[]),
            globs=dict(type="list", elements="str", default=[]),
            processes=dict(type="list", elements="str", default=[]),
            systemd_units=dict(type="list", elements="str", default=[]),
            holder=dict(type="dict", default={}),
            plan=dict(type="dict", default={}),
            targets=dict(type="dict", default={}),
            proc_root=dict(type="path", default="/proc"),
            service_manager=service_manager_option(),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        if p["state"] == "present":
            result = snapshot(module, p)
        elif p["state"] == "absent":
            result = restore(module, p)
        else:
            state = load_state(p["path"])
            result = dict(
                changed=False,
                recorded=[],
                unavailable=[],
                restored=[],
                refused=[],
                nothing_to_restore=state is None,
                state=state or {},
            )
    except (KnobError, OSError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
