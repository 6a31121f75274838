"""Run points on hosts: hosts in parallel, one run at a time per host, every run a record.

The supervisor (``Runner``) plans the session (run keys against the store), starts one host
loop per host with work (socketlab.runner.host), each in a thread of its own, and stops them:
SIGTERM or SIGINT kills each host's run or build in flight (its process group, by its PID) and
stops its collectors; the host loops store those runs as interrupted and start nothing new,
and get STOP_GRACE_S to do so. `together` groups and adaptive ladders are synchronised across
host loops by socketlab.runner.groups; one point's run is socketlab.runner.point.

A host that becomes unreachable fails its remaining points with the reason; other hosts go
on. Resume is the store: a run key stored "ok" is never run again; failed, timed-out and
invalid ones run again with ``rerun_failed``.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from socketlab.build import BuildJob
from socketlab.execute import Executor
from socketlab.execute.progress import Reporter
from socketlab.facts import SETUP_WORKERS
from socketlab.runner.groups import GroupSync
from socketlab.runner.host import HostLoop, Session, opened
from socketlab.runner.record import Recorder, Summary
from socketlab.runner.stop import StopFlag
from socketlab.safepath import inside
from socketlab.spec.points import RunPoint
from socketlab.store import Store
from socketlab.store.status import RunStatus

#: once stopped by a signal, how long the host loops may take to store their interrupted runs
STOP_GRACE_S = 5.0


class Runner:
    def __init__(
        self,
        *,
        campaign: str,
        points: list[RunPoint],
        hosts: dict[str, Any],  #: inventory name -> InventoryHost-like
        profiles: dict[str, str],  #: inventory name -> host profile hash (combined_profile)
        store: Store,
        results_dir: Path,  #: results/<campaign>
        builds: dict[str, Any] | None = None,  #: build name -> socketlab.spec.model.Build
        native_root: Path | None = None,
        spec_sha256: str = "",
        rerun_failed: bool = False,
        reporter: Reporter | None = None,
        workroot: str | None = None,
        host_facts: dict[str, dict] | None = None,  #: name -> facts entry, copied to each run
        executors: dict[str, Executor] | None = None,  #: hosts opened already (tools, agent)
    ) -> None:
        self.campaign = campaign
        self.points = points
        self.hosts = hosts
        self.store = store
        self.results_dir = Path(results_dir)
        self.rerun_failed = rerun_failed
        self.reporter = reporter or Reporter()
        self.workroot = workroot
        self.host_facts = host_facts or {}
        #: host -> its scratch folder; built here so a host name that would leave the results
        #: folder is refused (one line) before any host thread starts
        self.scratch = {
            name: inside(self.results_dir / ".scratch", name, what="host name") for name in hosts
        }
        self.jobs = {
            name: BuildJob.from_spec(build, native_root) for name, build in (builds or {}).items()
        }
        self.stop = StopFlag()
        self.groups = GroupSync(
            campaign=campaign, points=points, hosts=hosts, store=store, stop=self.stop
        )
        self.recorder = Recorder(
            campaign=campaign,
            profiles=profiles,
            results_dir=self.results_dir,
            spec_sha256=spec_sha256,
            store=store,
            reporter=self.reporter,
            stop=self.stop,
            groups=self.groups,
        )
        self.summary: Summary = self.recorder.summary
        self.profiles = profiles
        self.stopper: threading.Thread | None = None  #: the thread that stops in-flight work
        #: host -> (executor, pidfile, collectors folder, collectors) of its current run or build
        self._inflight: dict[str, tuple[Executor, str, str, tuple[str, ...]]] = {}
        self._opened = dict(executors or {})
        #: hosts installing their tools and starting their agents at once, as many as the
        #: facts were gathered with (the host loops of a thousand hosts start together)
        self._setup_slots = threading.BoundedSemaphore(SETUP_WORKERS)

    @property
    def interrupted(self) -> int | None:
        """The signal (SIGTERM, SIGINT) that stopped this session, if one did."""
        return self.stop.signum

    @interrupted.setter
    def interrupted(self, signum: int | None) -> None:
        self.stop.set(signum)

    # -- planning the session (no host contact) -------------------------------------------------

    def key(self, point: RunPoint) -> str:
        build_hash = self.jobs[point.build].build_hash if point.build else None
        return point.key(build_hash, self.profiles[point.host])

    def pending(self) -> dict[str, list[tuple[RunPoint, str]]]:
        """host -> [(point, key)] still to run, warm-ups only where their point is pending."""
        stored = self.store.statuses(self.campaign)

        def wanted_again(status: str | None) -> bool:
            return status in (None, RunStatus.INTERRUPTED) or (
                status != RunStatus.OK and self.rerun_failed
            )

        todo: dict[str, list[tuple[RunPoint, str]]] = {h: [] for h in self.hosts}
        keyed = [(p, self.key(p)) for p in self.points if p.host in self.hosts]
        wanted: set[tuple[str, str, str]] = set()
        for point, key in keyed:
            if point.warmup:
                continue
            if wanted_again(stored.get(key)):
                wanted.add(_ident(point))
            else:
                self.summary.skipped_done += 1
        for point, key in keyed:
            if _ident(point) in wanted and (point.warmup or wanted_again(stored.get(key))):
                todo[point.host].append((point, key))
        return todo

    # -- running ---------------------------------------------------------------------------------

    def run(self) -> Summary:
        todo = self.pending()
        total = sum(1 for items in todo.values() for p, _ in items if not p.warmup)
        busy = [h for h, items in todo.items() if items]
        for idle in set(todo) - set(busy):  # nothing left to run there: no note stays true
            self.store.clear_host_failure(self.campaign, idle)
            self._close_opened(idle)
        self.groups.plan(todo)
        self.reporter.start(self.campaign, total, len(busy), self.summary.skipped_done)
        session = Session(
            campaign=self.campaign,
            store=self.store,
            reporter=self.reporter,
            recorder=self.recorder,
            groups=self.groups,
            stop=self.stop,
            jobs=self.jobs,
            host_facts=self.host_facts,
            workroot=self.workroot,
            in_flight=self.in_flight,
            take_executor=self.take_executor,
        )
        threads = [
            threading.Thread(
                target=HostLoop(session, h, todo[h], self.scratch[h]).run,
                name=f"host-{h}",
                daemon=True,
            )
            for h in busy
        ]
        try:
            with _stop_signals(self._on_signal):
                for t in threads:
                    t.start()
                self._join(threads)
        finally:
            for name in list(self._opened):  # a host loop that never started
                self._close_opened(name)
        self.reporter.finish(self.summary.as_dict())
        return self.summary

    def take_executor(self, name: str) -> Executor:
        """The host's executor with its tools installed and its agent started: in the session
        that read its facts (socketlab.facts.open_all), or in a new one; HostError if the
        host can't be opened."""
        executor = self._opened.pop(name, None)
        with self._setup_slots:
            if executor is None:
                return opened(self.hosts[name], self.workroot, self.scratch[name])
            try:
                executor.install_tools(self.scratch[name])
            except BaseException:
                executor.close()
                raise
        return executor

    def _close_opened(self, name: str) -> None:
        executor = self._opened.pop(name, None)
        if executor is not None:
            executor.close()

    # -- shutdown (SIGTERM, SIGINT) ---------------------------------------------------------------

    def _on_signal(self, signum: int, _frame: Any) -> None:
        """Stop the session: kill each host's current run or build (its process group, by
        its PID), stop its collectors; the host threads store those runs as interrupted (a
        resume runs them again) and start nothing new."""
        if self.stop.set(signum):  # (the stop thread also wakes hosts waiting for their group)
            stopper = threading.Thread(target=self._stop_inflight, name="stop", daemon=True)
            stopper.start()
            self.stopper = stopper

    def _stop_inflight(self) -> None:
        self.groups.wake()
        inflight = list(self._inflight.items())
        for host, (ex, pidfile, _, _) in inflight:  # every run first: a collector stop may wait
            with contextlib.suppress(Exception):  # best effort: the host may be gone
                ex.interrupt(pidfile)
            self.reporter.message(host, f"{self.stop.name}: stopping the run or build in flight")
        for _, (ex, _, coll_dir, collectors) in inflight:
            for name in collectors:
                with contextlib.suppress(Exception):
                    ex.call(ex.tool(f"{name}.py", "stop", "--out", coll_dir), timeout=5)

    @contextlib.contextmanager
    def in_flight(
        self,
        host: str,
        ex: Executor,
        pidfile: str,
        coll_dir: str = "",
        collectors: tuple[str, ...] = (),
    ) -> Iterator[None]:
        """Listed for the stop while the body runs. The executor remembers an interrupt until
        the pidfile's run comes, so one before the run starts still stops it; and a stop
        that looked at the list just before we joined it is caught by the check after."""
        self._inflight[host] = (ex, pidfile, coll_dir, tuple(collectors))
        try:
            if self.stop.stopping:
                with contextlib.suppress(Exception):
                    ex.interrupt(pidfile)
            yield
        finally:
            self._inflight.pop(host, None)

    def _join(self, threads: list[threading.Thread]) -> None:
        """Wait for the host threads; once stopping, at most STOP_GRACE_S (daemon threads
        still working after that end with the process)."""
        deadline = None
        for t in threads:
            while t.is_alive():
                t.join(0.2)
                if self.stop.stopping:
                    deadline = deadline or time.monotonic() + STOP_GRACE_S
                    if time.monotonic() > deadline:
                        return


@contextlib.contextmanager
def _stop_signals(handler: Any) -> Iterator[None]:
    """SIGTERM and SIGINT call ``handler`` while the session runs (main thread only: Python
    delivers signals there), and are restored after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)


def _ident(point: RunPoint) -> tuple[str, str, str]:
    return (point.host, point.experiment, json.dumps(point.params, sort_keys=True, default=str))
