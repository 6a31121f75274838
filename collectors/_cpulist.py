"""CPU lists in the kernel's text format, for code on a host (stdlib only, Python 3.9).

The one copy shipped to hosts: collectors/_collector.py imports it (the collectors, the agent
and the latency holder get it beside them), and playbooks/module_utils/socketlab_cpulist.py is
a symlink to this file, which Ansible packs into the isolation modules. The controller's own
implementation is socketlab.cpulist (it also bounds sizes); tests/test_cpulist_copies.py holds
the two to the same results and messages on one corpus.
"""

import re

_CPU_RANGE = re.compile(r"(\d+)(?:-(\d+)(?::(\d+)/(\d+))?)?")


def parse_cpulist(text, what="CPU list"):
    """'0-2,5', systemd's '0-2 5', the kernel's stride '0-15:2/4' -> sorted ids; ValueError."""
    text, cpus = (text or "").strip(), set()
    for part in re.split(r"\s*,\s*|\s+", text) if text else []:
        m = _CPU_RANGE.fullmatch(part)
        if not m:
            raise ValueError(f"{what}: {text!r} is not a CPU list; expected e.g. '0-3,8,10-11'")
        first, last, used, group = int(m[1]), int(m[2] or m[1]), int(m[3] or 1), int(m[4] or 1)
        if last < first:
            raise ValueError(f"{what}: bad CPU range {part!r} in {text!r}: it runs backwards")
        if not 0 < used <= group:
            raise ValueError(f"{what}: bad stride {part!r} in {text!r}; expected used/group")
        cpus.update(c for c in range(first, last + 1) if (c - first) % group < used)
    return sorted(cpus)


def format_cpulist(cpus):
    """[0, 1, 2, 5] -> '0-2,5' (a run of two is a range too, as the kernel prints it)."""
    out, ordered = [], sorted(set(cpus))
    for i, cpu in enumerate(ordered):
        if i and cpu == ordered[i - 1] + 1:
            out[-1] = f"{out[-1].split('-')[0]}-{cpu}"
        else:
            out.append(str(cpu))
    return ",".join(out)
