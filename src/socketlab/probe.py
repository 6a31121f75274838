"""The interference probe around each point (docs/report.md, Interference): what to run, on
which CPUs, and the reading it gives. Planning is pure (``point_probe``, called by expansion);
the runner runs ``argv`` right before and right after the point and keeps both readings with
the run (``extra["probe"]``); ``socketlab.report.interference`` judges them.

A spec turns it on with ``probe: {build: NAME[, below: FRACTION]}``: every point of an
experiment with that build whose CPUs are known (its ``cpus:``, else the native binary's
``--cpus`` argument: every native benchmark takes one) is bracketed by ``ladder --probe`` of
that build on those CPUs, over half the host's L2 per core (1 MiB where the facts do not say).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

#: a probe reading below this fraction of the host's best marks the run disturbed: the quiet
#: probe spreads by a few % from run to run (docs/report.md, Interference), a neighbour's load
#: on the shared units takes 25-70 % off (shared/recorded/gnr-kvm-2vcpu-2026-12-03)
DEFAULT_BELOW = 0.8

#: per-core bytes the probe reads where the host's L2 size is unknown
DEFAULT_BYTES = 1 << 20
#: the guest-visible counters the probe prints per CPU besides its rates
COUNTERS = ("steal_ticks", "sched_calls", "run_delay_ns")


def cpus_of(cpus: str | None, argv: Sequence[str]) -> str | None:
    """The CPUs a point runs on: its pinning, else the value of its ``--cpus`` argument."""
    if cpus:
        return cpus
    for i, arg in enumerate(argv):
        if arg == "--cpus" and i + 1 < len(argv):
            return str(argv[i + 1])
        if str(arg).startswith("--cpus="):
            return str(arg).split("=", 1)[1]
    return None


def probe_bytes(topology: Mapping[str, Any]) -> int:
    """Half the L2 per core: the read stays in L2 on every core, as the units it probes do."""
    size = ((topology.get("caches") or {}).get("L2") or {}).get("size_bytes")
    try:
        return max(4096, int(size) // 2)
    except (TypeError, ValueError):
        return DEFAULT_BYTES


def point_probe(
    settings: Mapping[str, Any] | None,
    build: str | None,
    build_dir: str,
    cpus: str | None,
    argv: Sequence[str],
    topology: Mapping[str, Any],
) -> dict[str, Any] | None:
    """What the runner needs to probe one point (it goes in ``RunPoint.extra["probe"]``), or
    None: no probe asked, another build, or no CPUs to probe."""
    if not settings or build != settings.get("build"):
        return None
    where = cpus_of(cpus, argv)
    if not where:
        return None
    return {
        "binary": f"{build_dir}/ladder",
        "cpus": where,
        "bytes": probe_bytes(topology),
        "below": float(settings.get("below", DEFAULT_BELOW)),
    }


def argv(probe: Mapping[str, Any], build_root: str) -> list[str]:
    """The probe's command on the host; ``build_root``: the build's working directory."""
    return [
        f"{build_root}/{probe['binary']}",
        "--probe",
        "--cpus",
        str(probe["cpus"]),
        "--size",
        str(int(probe["bytes"])),
        "--timeout",
        "20",
    ]


def reading(output: str, at: float) -> dict[str, Any]:
    """``ladder --probe``'s JSON lines as one reading (socketlab.report.interference's format);
    ValueError when it printed no rate."""
    units: dict[str, dict[str, float]] = {}
    rate_units: dict[str, str] = {}
    counters: dict[str, dict[str, float]] = {}
    missing = ""
    for line in output.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a warning on stderr, merged by the executor
        if not isinstance(rec, dict):
            continue
        if rec.get("type") == "meta":
            missing = str(rec.get("units_missing") or "")
        elif rec.get("type") == "metric" and rec.get("name") == "probe":
            units.setdefault(str(rec["probe"]), {})[str(rec["cpu"])] = float(rec["value"])
            rate_units[str(rec["probe"])] = str(rec.get("unit", ""))
        elif rec.get("type") == "metric" and rec.get("name") in COUNTERS:
            counters.setdefault(str(rec["name"]), {})[str(rec["cpu"])] = float(rec["value"])
    if not units:
        raise ValueError(f"ladder --probe printed no rate: {output.strip()[-200:]!r}")
    sched = {
        cpu: {"calls": calls, "run_delay_ns": counters.get("run_delay_ns", {}).get(cpu)}
        for cpu, calls in counters.get("sched_calls", {}).items()
    }
    return {
        "at": at,
        "units": units,
        "rate_units": rate_units,
        "steal_ticks": counters.get("steal_ticks", {}),
        "sched": sched,
        "units_missing": [u for u in missing.split(",") if u],
    }
