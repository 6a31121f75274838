"""The provenance line for a host's isolation: whether the plan is applied, the CPU sets the runs
were placed on, and what ``playbooks/verify.yml`` found.

verify.yml writes its result per host beside the isolation state file (pass/fail, each drifted
knob, the noise table per CPU group, the time, the plan it checked); ``collectors/host_facts.py``
reads it with the host facts before a campaign and the runner stores it with them
(``isolation_verify``). restore.yml removes it, so a host without one was never verified, or no
longer is isolated. Pure: facts in, text out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: proc_noise.py's per-group metrics, as the report names them
NOISE = (
    ("device_irqs_per_s", "device IRQs"),
    ("local_timer_irqs_per_s", "timer"),
    ("ctx_switches_per_s", "ctx"),
)


def _noise(record: Mapping[str, Any]) -> str:
    noise = record.get("noise")
    if not isinstance(noise, Mapping):
        return "worker noise: not sampled"
    if noise.get("unsupported"):
        return f"worker noise: unsupported here: {noise['unsupported']}"
    workers = (noise.get("groups") or {}).get("workers") or {}
    parts = []
    for key, name in NOISE:
        mean = (workers.get(key) or {}).get("mean")
        if isinstance(mean, int | float):
            parts.append(f"{name} {mean:.1f}/s")
    if not parts:
        return "worker noise: no worker CPUs sampled"
    seconds = noise.get("seconds")
    over = f" (mean per CPU over {seconds:g} s)" if isinstance(seconds, int | float) else ""
    return "worker noise: " + ", ".join(parts) + over


def verify_text(entry: Mapping[str, Any]) -> str:
    """'verified <time>: 0 drifted knobs; worker noise: ...', 'not verified' or 'verify failed:
    <knobs>', for a host's facts entry."""
    record = entry.get("isolation_verify")
    if not isinstance(record, Mapping) or not record:
        return "not verified"
    if record.get("unreadable"):
        return f"not verified: the verify record is unreadable ({record['unreadable']})"
    when = record.get("time") or "at an unknown time"
    if record.get("passed") is not True:
        what = "; ".join(str(d) for d in record.get("drifted") or ()) or str(
            record.get("error") or "no reason recorded"
        )
        return f"verify failed: {what} ({when})"
    drifted = record.get("drifted") or []
    text = f"verified {when}: {len(drifted)} drifted knobs; {_noise(record)}"
    if not entry.get("isolation_applied"):
        # the host no longer runs the plan (its workqueue mask changed since the verify)
        return f"{text}; but isolation is not applied any more"
    checked = (record.get("plan") or {}).get("workers_list")
    used = (entry.get("isolation") or {}).get("workers_list")
    if checked is not None and used is not None and checked != used:
        return f"{text}; but it checked workers {checked or '-'}, the runs used {used or '-'}"
    return text


def isolation_text(entry: Mapping[str, Any]) -> str:
    """'applied; plan: housekeeping 0, workers 1; verified ...' for a host's facts entry."""
    state = "applied" if entry.get("isolation_applied") else "not applied"
    if entry.get("isolation_error"):
        state += f" ({entry['isolation_error']})"
    plan = entry.get("isolation") or {}
    if plan.get("workers_list") is not None:  # the CPU sets the runs were placed on
        state += (
            f"; plan: housekeeping {plan.get('housekeeping_list') or '-'}, "
            f"workers {plan.get('workers_list') or '-'}"
        )
    return f"{state}; {verify_text(entry)}"
