"""Each run's record, stored: one place for its fields, the interrupted rule and the tally."""

from __future__ import annotations

import hashlib
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from socketlab.execute.progress import Reporter
from socketlab.runner.groups import GroupSync
from socketlab.runner.stop import StopFlag
from socketlab.safepath import inside
from socketlab.spec.points import RunPoint
from socketlab.store import RunRecord, Store
from socketlab.store.status import RunStatus


def combined_profile(host: str, profile_hash: str) -> str:
    """The host profile hash used in run keys: the inventory name plus the host's profile.

    Hosts with identical hardware and kernel (two sshd hosts in namespaces of one machine, or
    two identical servers) must still get distinct run keys.
    """
    return hashlib.sha256(f"{host}\0{profile_hash}".encode()).hexdigest()[:32]


def point_label(point: RunPoint) -> str:
    params = ",".join(f"{k}={v}" for k, v in point.params.items())
    rep = f"warmup{-point.repetition}" if point.warmup else f"rep{point.repetition}"
    return f"{point.experiment}[{params}]#{rep}"


@dataclass
class Summary:
    statuses: Counter = field(default_factory=Counter)
    skipped_done: int = 0
    host_errors: dict[str, str] = field(default_factory=dict)
    keys: list[str] = field(default_factory=list)  #: keys run in this session

    def as_dict(self) -> dict[str, Any]:
        return {
            "statuses": {str(s): n for s, n in self.statuses.items()},
            "already_stored": self.skipped_done,
            "host_errors": self.host_errors,
        }

    @property
    def ok(self) -> bool:
        # a run the host can't do ("not available on this host") is not a failure
        return not self.host_errors and all(RunStatus(s).acceptable for s in self.statuses)


class Recorder:
    """Makes each run's RunRecord and stores it (one transaction with its metrics), counts it,
    wakes the hosts that wait for stored runs and tells the reporter."""

    def __init__(
        self,
        *,
        campaign: str,
        profiles: dict[str, str],
        results_dir: Path,
        spec_sha256: str,
        store: Store,
        reporter: Reporter,
        stop: StopFlag,
        groups: GroupSync,
    ) -> None:
        self.campaign = campaign
        self.profiles = profiles
        self.results_dir = results_dir
        self.spec_sha256 = spec_sha256
        self.store = store
        self.reporter = reporter
        self.stop = stop
        self.groups = groups
        self.summary = Summary()
        self._lock = threading.Lock()

    def raw_dir(self, key: str) -> Path:
        return inside(self.results_dir, "runs", key, what="run key")

    def record(
        self, point: RunPoint, key: str, status: RunStatus | str, reason: str, **extra: Any
    ) -> RunRecord:
        status = RunStatus(status)
        if self.stop.stopping and status != RunStatus.OK:  # killed by our own stop
            status = RunStatus.INTERRUPTED
            reason = f"interrupted by {self.stop.name}; a resume runs it"
        return RunRecord(
            run_key=key,
            campaign=self.campaign,
            experiment=point.experiment,
            host=point.host,
            repetition=point.repetition,
            params=dict(point.params),
            status=status,
            reason=reason,
            argv=list(point.argv),
            cpus=point.cpus,
            host_profile=self.profiles[point.host],
            spec_sha256=self.spec_sha256,
            raw_dir=str(self.raw_dir(key)),
            finished=time.time(),
            **extra,
        )

    def store_run(
        self,
        point: RunPoint,
        record: RunRecord,
        metrics: Iterable[Any] = (),
        requests: Iterable[tuple[str, list]] = (),
        seconds: float = 0.0,
    ) -> None:
        self.store.add_run(record, metrics, requests=requests)
        with self._lock:
            self.summary.statuses[record.status] += 1
            self.summary.keys.append(record.run_key)
        self.groups.wake()  # a host may wait for this run (a `together` group's adaptive step)
        self.reporter.point_done(
            point.host, point_label(point), record.status, record.reason, seconds
        )

    def fail(self, point: RunPoint, key: str, reason: str) -> None:
        """The point failed before it ran (a build, the host, a path); warm-ups leave nothing."""
        if point.warmup:
            return
        self.store_run(point, self.record(point, key, RunStatus.FAILED, reason))

    def fail_all(self, items: Iterable[tuple[RunPoint, str]], reason: str) -> None:
        for point, key in items:
            self.fail(point, key, reason)

    def host_error(self, host: str, text: str) -> None:
        with self._lock:
            self.summary.host_errors[host] = text
        self.reporter.message(host, f"error: {text}")
