"""`together` groups across host loops: barriers, and one adaptive ladder per group.

A `together` point starts at one moment on all the hosts of its group (a barrier per point);
an adaptive ladder run `together` is decided once for the group, from every host's stored runs
of each step, and no host starts a step before each host has stored its runs of the step below.
Nothing here touches a host: the host loops call in with their points, and the store is read
for the ladders' steps, so the synchroniser runs in tests with threads and a store alone.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from socketlab.errors import HostError
from socketlab.runner.stop import StopFlag
from socketlab.spec import adaptive
from socketlab.spec.points import RunPoint

#: how long a host waits at a `together` point for the rest of its group
TOGETHER_WAIT_S = 3600.0


class GroupSync:
    def __init__(
        self,
        *,
        campaign: str,
        points: list[RunPoint],
        hosts: Iterable[str],
        store,
        stop: StopFlag,
        wait_s: float = TOGETHER_WAIT_S,
    ) -> None:
        self.campaign = campaign
        self.points = points
        self.hosts = set(hosts)
        self.store = store
        self.stop = stop
        self.wait_s = wait_s
        #: `together` groups: points that start at one moment on all their hosts
        self._barriers: dict[tuple, threading.Barrier] = {}
        self._unmet: dict[str, set[tuple]] = {}  #: host -> barriers it has not reached yet
        #: notified on every stored run, every host loop's end and the stop
        self._stored = threading.Condition()
        self._ended: set[str] = set()  #: hosts whose loop has finished

    # -- barriers ---------------------------------------------------------------------------

    def plan(self, todo: Mapping[str, list[tuple[RunPoint, str]]]) -> None:
        """One barrier per `together` point pending on more than one host."""
        members: dict[tuple, set[str]] = {}
        for host, items in todo.items():
            for point, _ in items:
                if point.extra.get("together"):
                    members.setdefault(_together(point), set()).add(host)
        for ident, hosts in members.items():
            if len(hosts) > 1:
                self._barriers[ident] = threading.Barrier(len(hosts))
                for host in hosts:
                    self._unmet.setdefault(host, set()).add(ident)

    def meet(self, point: RunPoint) -> None:
        """Wait for every host of the point's `together` group; HostError if one can't come."""
        ident = _together(point) if point.extra.get("together") else None
        barrier = self._barriers.get(ident) if ident else None
        if barrier is None:
            return
        self._unmet[point.host].discard(ident)
        try:
            barrier.wait(timeout=self.wait_s)
        except threading.BrokenBarrierError:
            raise HostError(
                f"together group {point.extra['together']!r}: not every host of "
                "the group reached this point (one failed, stopped or is "
                f"{self.wait_s:g} s late)"
            ) from None

    def abandon(self, point: RunPoint) -> None:
        """This host will not come to the point: its group's peers must not wait for it."""
        ident = _together(point) if point.extra.get("together") else None
        if ident in self._barriers:
            self._unmet[point.host].discard(ident)
            self._barriers[ident].abort()

    def host_ended(self, host: str) -> None:
        """A host loop is over: peers waiting for it at a barrier or a step must not hang."""
        for ident in self._unmet.get(host, set()):
            self._barriers[ident].abort()
        with self._stored:
            self._ended.add(host)
            self._stored.notify_all()

    def wake(self) -> None:
        """A run was stored, or the session is stopping: waiting hosts look again."""
        with self._stored:
            self._stored.notify_all()

    # -- adaptive ladders ---------------------------------------------------------------------

    def adaptive_stop(self, point: RunPoint, wait: bool = False):
        """(param, Stop) where the point's adaptive ladder stopped, recorded in the store's
        meta table; None when the point is not adaptive or its ladder goes on.

        With `together`, the ladder is the group's: one decision over every host's stored
        runs of each step (pooled), and with ``wait`` no host starts a step before each
        host's runs of the step below are stored, so all of them stop at the same step."""
        if not point.extra.get("adaptive"):
            return None
        spec = adaptive.from_extra(point.extra["adaptive"])
        ladder = adaptive.ladder_of(point.params, spec.param)
        group = self._ladder_group(point, spec.param, ladder)
        steps = self._wait_for_step(point, spec, group) if wait and len(group) > 1 else None
        if steps is None:
            steps = pooled({host: self._host_steps(point, spec, ladder, host) for host in group})
        stop = adaptive.decide(spec, steps)
        if stop is None:
            return None
        self.store.set_meta(
            adaptive.meta_key(point.host, point.experiment, ladder),
            json.dumps(stop.as_dict(), sort_keys=True),
        )
        return spec.param, stop

    def _ladder_group(self, point: RunPoint, param: str, ladder: str) -> list[str]:
        """The hosts whose ladder is this point's: the same experiment, other parameters and
        `together` group (only this host without `together`)."""
        together = point.extra.get("together")
        if not together:
            return [point.host]
        return sorted(
            {
                p.host
                for p in self.points
                if p.host in self.hosts
                and p.experiment == point.experiment
                and p.extra.get("together") == together
                and adaptive.ladder_of(p.params, param) == ladder
            }
        )

    def _host_steps(self, point: RunPoint, spec: adaptive.Adaptive, ladder: str, host: str) -> dict:
        expected: dict[float, int] = {}
        for p in self.points:  # measured runs per step of this ladder on this host
            if (
                p.host == host
                and p.experiment == point.experiment
                and not p.warmup
                and adaptive.ladder_of(p.params, spec.param) == ladder
            ):
                value = float(p.params[spec.param])
                expected[value] = expected.get(value, 0) + 1
        return adaptive.stored_steps(
            self.store, self.campaign, host, point.experiment, spec, ladder, expected
        )

    def _wait_for_step(
        self, point: RunPoint, spec: adaptive.Adaptive, group: list[str]
    ) -> dict | None:
        """Until every host of the group has stored its runs of the step below the point's (or
        the group's ladder stopped, or we are stopping); HostError if a host ended first.
        Returns the group's pooled steps as last read (None when nothing was read: the first
        step, or stopping), so the caller decides on them without reading the store again."""
        values = sorted(spec.values)
        index = values.index(float(point.params[spec.param]))
        if index == 0:
            return None
        below = values[index - 1]
        ladder = adaptive.ladder_of(point.params, spec.param)

        def late() -> tuple[str, dict]:  # a host still to store the step below ("" if none)
            each = {host: self._host_steps(point, spec, ladder, host) for host in group}
            steps = pooled(each)
            if adaptive.decide(spec, steps) is not None:
                return "", steps
            for host, host_steps in each.items():
                step = host_steps.get(below)
                if step is not None and not step["bad"] and step["ok"] < step["expected"]:
                    return host, steps
            return "", steps

        deadline = time.monotonic() + self.wait_s
        with self._stored:
            while not self.stop.stopping:
                host, steps = late()
                if not host:
                    return steps
                if host in self._ended or time.monotonic() > deadline:
                    self.abandon(point)  # our peers must not wait for us at its barrier
                    raise HostError(
                        f"together group {point.extra['together']!r}: {host} did not store its "
                        f"{spec.param}={below:g} runs (it failed, stopped or is "
                        f"{self.wait_s:g} s late), so the group's ladder can't go on"
                    )
                self._stored.wait(timeout=1.0)
        return None


def pooled(steps_by_host: dict[str, dict]) -> dict[float, dict[str, Any]]:
    """Hosts' ladder steps (``adaptive.stored_steps``) as one ladder's: runs expected and
    stored ok summed, metric values together, the first bad run (naming its host if several)."""
    out: dict[float, dict[str, Any]] = {}
    for host, steps in steps_by_host.items():
        for value, step in steps.items():
            into = out.setdefault(value, {"expected": 0, "ok": 0, "bad": "", "metrics": {}})
            into["expected"] += step["expected"]
            into["ok"] += step["ok"]
            if step["bad"] and not into["bad"]:
                several = len(steps_by_host) > 1
                into["bad"] = f"{host}: {step['bad']}" if several else step["bad"]
            for name, values in step["metrics"].items():
                into["metrics"].setdefault(name, []).extend(values)
    return out


def _together(point: RunPoint) -> tuple:
    params = json.dumps(point.params, sort_keys=True, default=str)
    return (point.experiment, params, point.repetition, point.extra["together"])
