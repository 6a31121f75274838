"""Was a run disturbed? The interference probe's readings against the host's quiet reference.

On a guest the physical core is shared with neighbours nothing in the guest sees (steal time
stays 0 while an SMT sibling's AMX load halves our tile stream), so each point is bracketed by
a short fixed probe on its CPUs (``ladder --probe``: an L2 read, an AMX tile stream where the core
has it, a BF16 dot-product loop; docs/report.md, Interference), stored with the run as
``extra["probe"]`` = {"before": reading, "after": reading, "below": fraction}, a reading being
{"at": unix time, "units": {unit: {cpu: rate}}, "rate_units": {unit: "GB/s"},
"steal_ticks": {cpu: n}, "sched": {cpu: {"calls": n, "run_delay_ns": n}}}.

Each host's quiet reference per unit is the best reading of the campaign or, where the host's
core class has a recorded quiet rate (``socketlab.report.probe_quiet``) above it, that rate: a
neighbour who stays for the whole campaign, or a slower clock, then reads as disturbed instead of
setting the reference. A run is disturbed when a reading before or after it fell below ``below``
x the reference on any of its CPUs, or when its CPUs lost more than STEAL_SHARE of the time
between the readings to steal. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from socketlab.probe import DEFAULT_BELOW
from socketlab.report.probe_quiet import QuietClass

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


#: where a reference came from, as the report says it
CAMPAIGN_BEST = "the campaign's best"


@dataclass(frozen=True)
class Reference:
    value: float
    source: str  #: CAMPAIGN_BEST or "recorded for <class id>: <where and when>"


def campaign_best(runs: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """host -> probe unit -> the best reading of the campaign."""
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


def references(
    runs: Iterable[Mapping[str, Any]], recorded: Mapping[str, QuietClass] | None = None
) -> dict[str, dict[str, Reference]]:
    """host -> probe unit -> its quiet reference: the campaign's best, or the host class's
    recorded quiet rate where that is higher (only for units the campaign probed)."""
    out: dict[str, dict[str, Reference]] = {}
    for host, units in campaign_best(runs).items():
        cls = (recorded or {}).get(host)
        into = out.setdefault(host, {})
        for unit, best in units.items():
            quiet = cls.units.get(unit) if cls else None
            if quiet is not None and cls is not None and quiet > best:
                into[unit] = Reference(quiet, f"recorded for {cls.id}")
            else:
                into[unit] = Reference(best, CAMPAIGN_BEST)
    return out


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


def _source(ref: Reference) -> str:
    """The reference's source where it is not the default (the campaign's best)."""
    return "" if ref.source == CAMPAIGN_BEST else f"{ref.source}; "


def run_state(run: Mapping[str, Any], reference: Mapping[str, Reference]) -> RunState:
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
            if ref is None or not ref.value:
                continue
            ratio = value / ref.value
            if ratio < below and (worst is None or ratio < worst[0]):
                worst = (
                    ratio,
                    f"probe {unit} {value:.4g} vs quiet {ref.value:.4g} "
                    f"{units.get(unit, '')} ({_source(ref)}{ratio:.2f}x, below {below:g}x) "
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


def run_states(
    runs: Iterable[Mapping[str, Any]], recorded: Mapping[str, QuietClass] | None = None
) -> dict[str, RunState]:
    """run key -> its state, each host's runs against that host's reference."""
    runs = list(runs)
    refs = references(runs, recorded)
    return {
        str(r["run_key"]): run_state(r, refs.get(str(r.get("host")), {}))
        for r in runs
        if r.get("run_key")
    }


def is_guest(topology: Mapping[str, Any]) -> bool:
    """A virtual machine (the CPUID hypervisor bit): its cores may be shared with neighbours."""
    return "hypervisor" in set(topology.get("flags") or ())


def summary_text(
    runs: Iterable[Mapping[str, Any]], recorded: Mapping[str, QuietClass] | None = None
) -> dict[str, str]:
    """host -> one line for the report's provenance: the quiet reference per unit, how many runs
    were probed and how many of those were disturbed."""
    runs = list(runs)
    refs = references(runs, recorded)
    states = run_states(runs, recorded)
    out = {}
    for host in sorted({str(r.get("host")) for r in runs}):
        mine = [r for r in runs if str(r.get("host")) == host and r.get("run_key")]
        probed = [r for r in mine if states[str(r["run_key"])].probed]
        if not probed:
            out[host] = f"no run probed (0 of {len(mine)})"
            continue
        bad = [r for r in probed if states[str(r["run_key"])].disturbed]
        below = {float((r.get("probe") or {}).get("below") or DEFAULT_BELOW) for r in probed}
        by_source: dict[str, list[str]] = {}
        for unit, r in sorted(refs[host].items()):
            by_source.setdefault(r.source, []).append(f"{unit} {r.value:.4g}")
        ref = "; ".join(f"({src}) {', '.join(u)} GB/s" for src, u in by_source.items())
        out[host] = (
            f"quiet reference {ref}; {len(probed)} of "
            f"{len(mine)} runs probed, {len(bad)} disturbed (below "
            f"{'/'.join(f'{b:g}' for b in sorted(below))}x or steal)"
        )
    return out
