"""Was a run disturbed? The interference probe's readings against the host's quiet reference.

On a guest the physical core is shared with neighbours nothing in the guest sees (steal time
stays 0 while an SMT sibling's AMX load halves our tile stream), so each point is bracketed by
a short fixed probe on its CPUs (``ladder --probe``: an L2 read, an AMX tile stream where the core
has it, a BF16 dot-product loop; docs/report.md, Interference), stored with the run as
``extra["probe"]`` = {"before": reading, "after": reading, "below": fraction}, a reading being
{"at": unix time, "units": {unit: {cpu: rate}}, "rate_units": {unit: "GB/s"},
"steal_ticks": {cpu: n}, "sched": {cpu: {"calls": n, "run_delay_ns": n}}}.

Each host's quiet reference per unit is the best reading of the campaign. A run is disturbed
when a reading before or after it fell below ``below`` x the reference on any of its CPUs, or
when its CPUs lost more than STEAL_SHARE of the time between the readings to steal. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from socketlab.probe import DEFAULT_BELOW

#: steal above this share of the time between the two readings marks the run disturbed too
STEAL_SHARE = 0.01
#: USER_HZ: /proc/stat counts steal in these ticks per second on every Linux architecture
TICKS_PER_S = 100


@dataclass(frozen=True)
class RunState:
    probed: bool = False
    disturbed: bool = False
    why: str = ""  #: the reading that marked it, with both numbers


def probe_of(run: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The run's probe record when both readings have rates (a failed probe keeps only its
    error: the run counts as not probed)."""
    probe = run.get("probe")
    if not isinstance(probe, Mapping):
        return None
    readings = [probe.get("before"), probe.get("after")]
    return probe if all(isinstance(r, Mapping) and r.get("units") for r in readings) else None


def _rates(reading: Mapping[str, Any]) -> Iterable[tuple[str, str, float]]:
    for unit, by_cpu in (reading.get("units") or {}).items():
        for cpu, value in (by_cpu or {}).items():
            if isinstance(value, int | float) and value > 0:
                yield unit, str(cpu), float(value)


def references(runs: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """host -> probe unit -> the best reading of the campaign (its quiet reference)."""
    best: dict[str, dict[str, float]] = {}
    for run in runs:
        probe = probe_of(run)
        if probe is None:
            continue
        into = best.setdefault(str(run.get("host")), {})
        for when in ("before", "after"):
            for unit, _, value in _rates(probe.get(when) or {}):
                into[unit] = max(into.get(unit, 0.0), value)
    return best


def _steal_share(probe: Mapping[str, Any]) -> tuple[float, str] | None:
    before, after = probe.get("before") or {}, probe.get("after") or {}
    elapsed = float(after.get("at", 0)) - float(before.get("at", 0))
    if elapsed <= 0:
        return None
    worst = None
    for cpu, ticks in (after.get("steal_ticks") or {}).items():
        lost = float(ticks) - float((before.get("steal_ticks") or {}).get(cpu, ticks))
        share = lost / TICKS_PER_S / elapsed
        if worst is None or share > worst[0]:
            worst = (share, str(cpu))
    return worst


def run_state(run: Mapping[str, Any], reference: Mapping[str, float]) -> RunState:
    probe = probe_of(run)
    if probe is None:
        return RunState()
    below = float(probe.get("below") or DEFAULT_BELOW)
    worst: tuple[float, str] | None = None
    for when in ("before", "after"):
        reading = probe.get(when) or {}
        units = reading.get("rate_units") or {}
        for unit, cpu, value in _rates(reading):
            ref = reference.get(unit)
            if not ref:
                continue
            ratio = value / ref
            if ratio < below and (worst is None or ratio < worst[0]):
                worst = (
                    ratio,
                    f"probe {unit} {value:.4g} vs quiet {ref:.4g} "
                    f"{units.get(unit, '')} ({ratio:.2f}x, below {below:g}x) "
                    f"{when} the run on cpu {cpu}".replace("  ", " "),
                )
    if worst is not None:
        return RunState(True, True, worst[1])
    steal = _steal_share(probe)
    if steal is not None and steal[0] > STEAL_SHARE:
        return RunState(
            True,
            True,
            f"steal {steal[0]:.1%} of the run on cpu {steal[1]} (above {STEAL_SHARE:.0%})",
        )
    return RunState(True, False, "")


def run_states(runs: Iterable[Mapping[str, Any]]) -> dict[str, RunState]:
    """run key -> its state, each host's runs against that host's reference."""
    runs = list(runs)
    refs = references(runs)
    return {
        str(r["run_key"]): run_state(r, refs.get(str(r.get("host")), {}))
        for r in runs
        if r.get("run_key")
    }


def is_guest(topology: Mapping[str, Any]) -> bool:
    """A virtual machine (the CPUID hypervisor bit): its cores may be shared with neighbours."""
    return "hypervisor" in set(topology.get("flags") or ())


def summary_text(runs: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """host -> one line for the report's provenance: the quiet reference per unit, how many runs
    were probed and how many of those were disturbed."""
    runs = list(runs)
    refs = references(runs)
    states = run_states(runs)
    out = {}
    for host in sorted({str(r.get("host")) for r in runs}):
        mine = [r for r in runs if str(r.get("host")) == host and r.get("run_key")]
        probed = [r for r in mine if states[str(r["run_key"])].probed]
        if not probed:
            out[host] = f"no run probed (0 of {len(mine)})"
            continue
        bad = [r for r in probed if states[str(r["run_key"])].disturbed]
        below = {float((r.get("probe") or {}).get("below") or DEFAULT_BELOW) for r in probed}
        ref = ", ".join(f"{unit} {value:.4g}" for unit, value in sorted(refs[host].items()))
        out[host] = (
            f"quiet reference (the campaign's best) {ref} GB/s; {len(probed)} of "
            f"{len(mine)} runs probed, {len(bad)} disturbed (below "
            f"{'/'.join(f'{b:g}' for b in sorted(below))}x or steal)"
        )
    return out
