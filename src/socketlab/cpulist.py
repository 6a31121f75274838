"""CPU lists and CPU masks in the kernel's text formats: the controller's implementation.

Code on a host can't import this package: it gets one stdlib file of parse/format,
collectors/_cpulist.py (imported by collectors/_collector.py; playbooks/module_utils/
socketlab_cpulist.py is a symlink to it), which tests/test_cpulist_copies.py holds to this one
(same results and messages on one corpus); only this one bounds sizes.

- A *cpulist* is what ``/sys/devices/system/node/node0/cpulist`` prints: ``"0-3,8,10-11"``.
  The kernel prints a run of two as a range (``"0-1"``), and so do we.
- A *cpumask* is what ``/proc/irq/N/smp_affinity`` or ``/sys/devices/virtual/workqueue/cpumask``
  print: comma-separated 32-bit hex words, most significant first. The first word is only as
  wide as the bits it holds (``"3"`` for 2 CPUs, ``"00000003,ffffffff"`` for 64), exactly like
  the kernel's ``%*pb``, so a value written from a plan reads back identical.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# Relative imports of stdlib-only siblings: the socketlab.lab collection links this file into
# plugins/plugin_utils/planner/, where the socketlab package is not installed.
from .errors import PlanError
from .limits import limit, over


class CpuListError(PlanError, ValueError):
    """A CPU list or mask string is malformed."""


class CpuListLimit(CpuListError):
    """A well-formed CPU list over a size limit; ``reason`` says which, without the list (a
    caller that names the field itself reports it as is, not as a malformed list)."""

    def __init__(self, what: str, text: str, reason: str) -> None:
        super().__init__(f"{what}: {_short(text)}: {reason}")
        self.reason = reason


_RANGE = re.compile(r"(\d+)(?:-(\d+)(?::(\d+)/(\d+))?)?")
#: between ranges: commas (the kernel's "0-1,96-97") or blanks (systemd's "0-1 96-97")
_SEP = re.compile(r"\s*,\s*|\s+")


def parse_cpulist(text: str, what: str = "CPU list") -> list[int]:
    """``"0-3,8,10-11"`` -> ``[0, 1, 2, 3, 8, 10, 11]`` (sorted, unique).

    Accepts the kernel's full syntax, including ``"0-31:2/8"`` (2 CPUs of every group of 8), and
    systemd's blank-separated ``"0-1 96-97"``. ``what`` names the value in the error message.
    """
    text = (text or "").strip()
    cpus: set[int] = set()
    max_id, max_cpus, count = limit("CPU_ID"), limit("CPUS"), 0
    for part in _SEP.split(text) if text else []:
        m = _RANGE.fullmatch(part)
        if not m:
            raise CpuListError(
                f"{what}: {_short(text)} is not a CPU list; expected e.g. '0-3,8,10-11'"
            )
        first, last = _id(m[1]), _id(m[2] or m[1])
        used, group = int(m[3] or 1), int(m[4] or 1)
        if last < first:
            raise CpuListError(
                f"{what}: bad CPU range {part!r} in {_short(text)}: it runs backwards"
            )
        # bounded before anything is expanded: "0-4000000000" is refused, not allocated
        if last > max_id:
            raise CpuListLimit(what, text, over("CPU_ID", _cpu_id(m[2] or m[1])))
        count += last - first + 1
        if count > max_cpus:
            raise CpuListLimit(what, text, over("CPUS", count, "CPUs"))
        if not 0 < used <= group:
            raise CpuListError(
                f"{what}: bad stride {part!r} in {_short(text)}; expected used/group"
            )
        cpus.update(c for c in range(first, last + 1) if (c - first) % group < used)
    return sorted(cpus)


def _id(digits: str) -> int:
    """A CPU id; a 5,000-digit one is simply too big (int() would refuse or take long)."""
    digits = digits.lstrip("0") or "0"
    return int(digits) if len(digits) <= 18 else 10**18


def _cpu_id(digits: str) -> str:
    """ "CPU id N", or its length where printing it would flood the line."""
    digits = digits.lstrip("0") or "0"
    return f"CPU id {digits}" if len(digits) <= 18 else f"a {len(digits)}-digit CPU id"


def _short(text: str) -> str:
    return repr(text) if len(text) <= 60 else repr(text[:57]) + "..."


def format_cpulist(cpus: Iterable[int]) -> str:
    """``[0, 1, 2, 3, 8, 10, 11]`` -> ``"0-3,8,10-11"``; ``[]`` -> ``""``."""
    ordered = sorted({int(c) for c in cpus})
    if ordered and ordered[0] < 0:
        raise CpuListError(f"CPU ids must be >= 0, got {ordered[0]}")
    out: list[str] = []
    for i, cpu in enumerate(ordered):
        if i and cpu == ordered[i - 1] + 1:  # the run goes on: "3" -> "3-4", "3-4" -> "3-5"
            out[-1] = f"{out[-1].split('-')[0]}-{cpu}"
        else:
            out.append(str(cpu))
    return ",".join(out)


def cpumask(cpus: Iterable[int], ncpus: int) -> str:
    """CPUs as the kernel prints a cpumask of ``ncpus`` bits (``nr_cpu_ids``).

    ``cpumask([0, 1], 192)`` -> ``"00000003,00000000,..."`` (six words).
    """
    ncpus = int(ncpus)
    if ncpus < 1:
        raise CpuListError(f"cpumask: ncpus must be >= 1, got {ncpus}")
    if ncpus > limit("CPU_ID") + 1:
        raise CpuListError(f"cpumask: ncpus {over('CPU_ID', ncpus)}")
    value = 0
    for c in cpus:
        c = int(c)
        if not 0 <= c < ncpus:
            raise CpuListError(f"cpumask: CPU {c} is outside 0-{ncpus - 1}")
        value |= 1 << c
    words = (ncpus + 31) // 32
    first_bits = ncpus % 32 or 32
    out = []
    for w in range(words - 1, -1, -1):
        chunk = (value >> (32 * w)) & 0xFFFFFFFF
        width = (first_bits + 3) // 4 if w == words - 1 else 8
        out.append(f"{chunk:0{width}x}")
    return ",".join(out)


def parse_cpumask(text: str, what: str = "CPU mask") -> list[int]:
    """``"00000003,00000001"`` -> ``[0, 32, 33]``. Accepts any word widths and an optional 0x."""
    text = (text or "").strip().lower()
    if text.startswith("0x"):
        text = text[2:]
    words = text.split(",")
    if not text or any(not re.fullmatch(r"[0-9a-f]{1,8}", w) for w in words):
        raise CpuListError(
            f"{what}: {_short(text)} is not a CPU mask; expected e.g. '00000003,ffffffff'"
        )
    if len(words) * 32 > limit("CPU_ID") + 32:
        raise CpuListError(f"{what}: a mask of {over('CPU_ID', len(words) * 32, 'bits')}")
    value = 0
    for w in words:
        value = (value << 32) | int(w, 16)
    return [bit for bit in range(value.bit_length()) if value >> bit & 1]
