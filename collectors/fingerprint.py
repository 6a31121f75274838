#!/usr/bin/env python3
"""Host fingerprint: the knobs that change what a benchmark measures, read before and after
every run. Drift between the two marks the run invalid, naming the knob.

Stdlib only and importing nothing from socketlab: the orchestrator copies this file to each
host with the other tools, and the host's agent (_runwrap.py) reads the fingerprint in its own
process (``read_fingerprint``), so a run starts no interpreter for it; the controller imports the
same file as ``socketlab.hostside.fingerprint`` for ``drift``. ``python3 fingerprint.py [--root
DIR]`` prints one JSON object; ``--root`` reads a recorded sysfs/procfs tree instead of the live
one (tests, fixtures).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys

#: Knobs compared before/after a run. Each maps to a short, printable value.
DRIFT_KNOBS = (
    "kernel",
    "cmdline",
    "microcode",
    "online",
    "isolated",
    "nohz_full",
    "smt",
    "thp",
    "thp_defrag",
    "numa_balancing",
    "governor",
    "irq_affinity",
    "irq_default_affinity",
    "workqueue_cpumask",
    "nr_hugepages",
)
UNSUPPORTED = "unsupported"


def _read(root: str, path: str) -> str | None:
    try:
        with open(os.path.join(root, path.lstrip("/"))) as fh:
            return fh.read().strip()
    except OSError:
        return None


def _selected(text: str | None) -> str:
    """'always [madvise] never' -> 'madvise'."""
    if text is None:
        return UNSUPPORTED
    for word in text.split():
        if word.startswith("[") and word.endswith("]"):
            return word[1:-1]
    return text


def _cpuinfo(root: str) -> tuple[str, str]:
    text = _read(root, "/proc/cpuinfo") or ""
    models, microcodes = set(), set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "model name":
            models.add(value)
        elif key == "microcode":
            microcodes.add(value)
    return ", ".join(sorted(models)) or UNSUPPORTED, ",".join(sorted(microcodes)) or UNSUPPORTED


def _governor(root: str) -> str:
    base = os.path.join(root, "sys/devices/system/cpu")
    values = set()
    try:
        names = os.listdir(base)
    except OSError:
        return UNSUPPORTED
    for name in names:
        if name.startswith("cpu") and name[3:].isdigit():
            value = _read(root, f"/sys/devices/system/cpu/{name}/cpufreq/scaling_governor")
            if value is not None:
                values.add(value)
    if not values:
        return UNSUPPORTED
    return ",".join(sorted(values))


def _irq_digest(root: str) -> str:
    """sha256 (first 16 hex) of every IRQ's affinity list: one value to compare, not 100s."""
    base = os.path.join(root, "proc/irq")
    try:
        names = sorted((n for n in os.listdir(base) if n.isdigit()), key=int)
    except OSError:
        return UNSUPPORTED
    digest = hashlib.sha256()
    for name in names:
        value = _read(root, f"/proc/irq/{name}/smp_affinity_list")
        digest.update(f"{name}={value}\n".encode())
    return digest.hexdigest()[:16]


def read_fingerprint(root: str = "/") -> dict[str, str]:
    model, microcode = _cpuinfo(root)
    if root in ("", "/"):
        uname = platform.uname()
        kernel = f"{uname.release} {uname.version}"
    else:
        release = _read(root, "/proc/sys/kernel/osrelease") or UNSUPPORTED
        kernel = f"{release} {_read(root, '/proc/sys/kernel/version') or ''}".strip()
    value = _read

    def knob(path: str) -> str:
        text = value(root, path)
        return UNSUPPORTED if text is None else text

    return {
        "model": model,
        "kernel": kernel,
        "cmdline": knob("/proc/cmdline"),
        "microcode": microcode,
        "online": knob("/sys/devices/system/cpu/online"),
        "isolated": knob("/sys/devices/system/cpu/isolated"),
        "nohz_full": knob("/sys/devices/system/cpu/nohz_full"),
        "smt": knob("/sys/devices/system/cpu/smt/control"),
        "thp": _selected(value(root, "/sys/kernel/mm/transparent_hugepage/enabled")),
        "thp_defrag": _selected(value(root, "/sys/kernel/mm/transparent_hugepage/defrag")),
        "numa_balancing": knob("/proc/sys/kernel/numa_balancing"),
        "governor": _governor(root),
        "irq_affinity": _irq_digest(root),
        "irq_default_affinity": knob("/proc/irq/default_smp_affinity"),
        "workqueue_cpumask": knob("/sys/devices/virtual/workqueue/cpumask"),
        "nr_hugepages": knob("/proc/sys/vm/nr_hugepages"),
    }


def drift(before: dict, after: dict) -> list[str]:
    """One line per knob that changed: 'thp: madvise -> always'."""
    changes = []
    for knob in DRIFT_KNOBS:
        if before.get(knob) != after.get(knob):
            changes.append(f"{knob}: {before.get(knob)} -> {after.get(knob)}")
    return changes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="/", help="read a recorded tree instead of /")
    args = parser.parse_args(argv)
    print(json.dumps(read_fingerprint(args.root), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
