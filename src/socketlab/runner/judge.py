"""The verdict every kind's run is judged by, around what the kind itself said: its collectors
(metrics, errors, deaths), the required metrics, and drift of the host's state between the
fingerprints taken before and after. Pure: the caller reads the files (socketlab.runner.point).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from socketlab.hostside.fingerprint import drift
from socketlab.parse import Metric
from socketlab.runkinds import Outcome
from socketlab.store.status import RunStatus


@dataclass(frozen=True)
class Collected:
    """What a run's collectors left: their metrics, and each broken one's words (a start or
    stop that failed, or the error its daemon recorded before dying)."""

    metrics: list[Metric] = field(default_factory=list)
    broken: dict[str, str] = field(default_factory=dict)


class Verdict(NamedTuple):
    status: RunStatus
    reason: str


def judge(
    outcome: Outcome, before: dict, after: dict, collected: Collected, required: Sequence[str] = ()
) -> Verdict:
    """The run's status and reason: the kind's, unless a required metric is missing (failed),
    the host's state drifted (invalid, the knobs named) or a collector broke (failed: its
    metrics are missing, so never ok)."""
    status, reason = RunStatus(outcome.status), outcome.reason
    names = {m.name for m in outcome.metrics} | {m.name for m in collected.metrics}
    missing = [n for n in required if n not in names]
    changes = drift(before, after)
    if status == RunStatus.OK and missing:
        status, reason = RunStatus.FAILED, f"required metrics missing: {', '.join(missing)}"
    if status in (RunStatus.OK, RunStatus.INVALID) and changes:
        why = "host state drifted during the run: " + "; ".join(changes)
        status, reason = RunStatus.INVALID, f"{reason}; {why}" if reason else why
    if status == RunStatus.OK and collected.broken:
        status = RunStatus.FAILED
        reason = "collector failed: " + "; ".join(f"{n}: {t}" for n, t in collected.broken.items())
    return Verdict(status, reason)
