# Shared by the isolation modules (socketlab.lab.*). Runs on the target host: stdlib only.
"""Kernel knobs as files, the isolation state file, and the rules for comparing values.

Every knob the isolation roles change is a file under /proc or /sys. Its *kind* says how to
compare a value read back with a value written (a THP file reads "always [madvise] never" after
"madvise" was written; a mask reads "00000003" after "3" was written).

The state file is the record that makes isolation reversible: one JSON object per host, written
atomically (temp file in the same folder, fsync, rename), holding the original value of every
knob before the first change. Values already recorded are never overwritten, so an apply that is
killed and run again still restores to the values from before the first apply.
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
import time

# CPU lists: cpulist.py beside this file is a symlink to collectors/_cpulist.py (one file for the
# collectors and the modules; the collection build copies it in); Ansible packs it into every
# module that imports this one.
from ansible_collections.socketlab.lab.plugins.module_utils.cpulist import (
    format_cpulist,
    parse_cpulist,
)

STATE_VERSION = 1
# Write errors the kernel gives for IRQs it won't move (managed, per-CPU): EIO before 6.12,
# EPERM after; EINVAL for masks it can't honour.
REFUSED_ERRNOS = (errno.EIO, errno.EPERM, errno.EINVAL)


class KnobError(Exception):
    pass


def kind_for(path):
    """The comparison kind of a knob, from its path."""
    name = os.path.basename(path)
    if name in ("smp_affinity_list",):
        return "cpulist"
    if name in ("smp_affinity", "default_smp_affinity", "cpumask"):
        return "cpumask"
    if "transparent_hugepage" in path:
        return "choice"
    if name in ("numa_balancing", "nr_hugepages"):
        return "int"
    return "text"


def normalize(kind, text):
    """A value in a form that compares equal for equal settings."""
    text = text.strip()
    if kind == "choice":
        # "always [madvise] never" -> "madvise"; a bare "madvise" stays as it is.
        if "[" in text:
            return text[text.index("[") + 1 : text.index("]")]
        return text
    if kind == "cpulist":
        return format_cpulist(parse_cpulist(text))
    if kind == "cpumask":
        return int(text.replace(",", "") or "0", 16)
    if kind == "int":
        return int(text)
    return text


def read_knob(path):
    with open(path) as f:
        return f.read().strip()


def write_knob(path, value):
    """Write a value the way `echo value > path` does, raising OSError with the kernel's errno."""
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)  # as `echo value > path` opens it
    try:
        os.write(fd, (str(value) + "\n").encode())
    finally:
        os.close(fd)


def same(kind, current, wanted):
    try:
        return normalize(kind, current) == normalize(kind, wanted)
    except (ValueError, IndexError):
        return current.strip() == str(wanted).strip()


def load_state(path):
    """The state file's content, or None when there is none."""
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise KnobError(
            f"state file {path} is not valid JSON ({exc}); fix or remove it by hand"
        ) from None


def write_state(path, data):
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=folder)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
        dir_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def new_state(host):
    return {
        "version": STATE_VERSION,
        "host": host,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "files": {},
        "processes": {},
        "systemd_units": {},
        "holder": {},
        "refused_irqs": {},
        # What isolation adds on the host (holder script, folders), for restore to remove.
        "made": {"files": [], "dirs": []},
    }


def require_recorded(state_path, paths):
    """Fail unless every path already has its original value in the state file.

    Returns the state. Called by every module before it writes, so nothing is changed without a
    record to restore; a knob that appeared after the snapshot (a new IRQ) is recorded here first.
    """
    state = load_state(state_path)
    if state is None:
        raise KnobError(
            f"no isolation state file {state_path}: run the isolation_state role (snapshot) before "
            "changing knobs"
        )
    missing = [p for p in paths if p not in state["files"]]
    if missing:
        for p in missing:
            state["files"][p] = {"value": read_knob(p), "kind": kind_for(p)}
        write_state(state_path, state)
    return state


def pid1_manager(proc_root="/proc"):
    """'systemd' when PID 1 is systemd, else PID 1's command name."""
    try:
        with open(os.path.join(proc_root, "1", "comm")) as f:
            return f.read().strip()
    except OSError:
        return "unknown"


SERVICE_MANAGERS = ("auto", "systemd", "none")


def service_manager(override="auto", proc_root="/proc"):
    """The service manager the isolation modules act through: PID 1's (auto), or the one the
    play names (socketlab_service_manager). Naming it exists for the tests, which drive the
    systemd paths against an emulated systemctl on hosts whose PID 1 is not systemd."""
    if override in ("systemd", "none"):
        return override
    return pid1_manager(proc_root)


def service_manager_option():
    """The ``service_manager`` argument of every module that acts through a service manager."""
    return dict(type="str", default="auto", choices=list(SERVICE_MANAGERS))


def systemctl(module, verb, unit):
    """``systemctl VERB UNIT`` (start, stop); a failure fails the module."""
    module.run_command(["systemctl", verb, unit], check_rc=True)


def systemd_allowed_cpus(module, unit):
    """A unit's AllowedCPUs as systemd prints it; a failing ``systemctl show`` fails the module."""
    rc, out, err = module.run_command(["systemctl", "show", "-p", "AllowedCPUs", "--value", unit])
    if rc != 0:
        module.fail_json(msg=f"systemctl show {unit} failed: {err.strip()}")
    return out.strip()


def set_systemd_allowed_cpus(module, unit, cpus):
    """Confine a unit's AllowedCPUs; ``--runtime`` so a reboot also undoes it."""
    module.run_command(
        ["systemctl", "set-property", "--runtime", unit, f"AllowedCPUs={cpus}"], check_rc=True
    )


def find_processes(name, proc_root="/proc"):
    """[(pid, argv)] of processes whose comm is `name` (never used to kill by name: the PIDs
    are recorded and only those are signalled)."""
    found = []
    for pid in os.listdir(proc_root):
        if not pid.isdigit():
            continue
        try:
            with open(os.path.join(proc_root, pid, "comm")) as f:
                if f.read().strip() != name:
                    continue
            with open(os.path.join(proc_root, pid, "stat")) as f:
                if f.read().rsplit(")", 1)[-1].split()[0] in ("Z", "X"):
                    continue  # exited, not yet reaped by its parent: not running
            with open(os.path.join(proc_root, pid, "cmdline"), "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        except OSError:
            continue
        found.append((int(pid), argv))
    return sorted(found)
