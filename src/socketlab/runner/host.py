"""One host's loop: hold its lock, build what its points need (cached by source hash), ship
layer dumps once, and run its points one at a time; a lost connection is retried once, a
failed step fails its point alone, a store that can't be written stops the host.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from socketlab.build import BuildJob, ensure_built
from socketlab.errors import HostError, PathError, StoreError
from socketlab.execute import Executor, HostBusy, HostUnreachable, make_executor
from socketlab.execute.dumps import ship_dump
from socketlab.execute.local import LocalExecutor
from socketlab.execute.progress import Reporter
from socketlab.execute.ssh import AGENT_IDLE_S
from socketlab.runner.groups import GroupSync
from socketlab.runner.point import Build, LostAfterStore, controller_id, run_point
from socketlab.runner.record import Recorder, point_label
from socketlab.runner.stop import StopFlag
from socketlab.safepath import inside
from socketlab.spec.command import dump_dir
from socketlab.spec.points import RunPoint
from socketlab.store import Store


def orphaned(holder: dict) -> bool:
    """Whether a host lock is held for an orchestrator of this machine that has exited: its
    agent, left on a host that was lost and came back, exits by itself within AGENT_IDLE_S of
    its last heartbeat, so a new session waits for it rather than finding the host busy."""
    name, _, pid = str(holder.get("controller") or "").rpartition(":")
    if name != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, another user's
        return False
    return False


@dataclass(frozen=True)
class Session:
    """What every host loop of a session shares (the supervisor makes it)."""

    campaign: str
    store: Store
    reporter: Reporter
    recorder: Recorder
    groups: GroupSync
    stop: StopFlag
    jobs: dict[str, BuildJob]  #: build name -> its job
    host_facts: dict[str, dict]  #: host -> facts entry, copied to each run
    workroot: str | None
    #: (host, executor, pidfile, collectors folder, collectors): listed for the stop
    in_flight: Callable[..., AbstractContextManager[None]]
    #: host -> its executor, tools installed and agent started (HostError if it can't be)
    take_executor: Callable[[str], Executor]


class HostLoop:
    def __init__(
        self, session: Session, name: str, items: list[tuple[RunPoint, str]], scratch: Path
    ) -> None:
        self.session = session
        self.name = name
        self.items = items
        self.recorder = session.recorder
        self.groups = session.groups
        self.stop = session.stop
        self.scratch = scratch
        self.executor: Executor | None = None
        self.controller: Executor | None = None  #: for `runs_on: controller` points
        self.manifests: dict[str, dict] = {}  #: build name -> manifest, built on this host
        self.broken: dict[str, str] = {}  #: build name -> why it failed
        self.shipped: set[str] = set()  #: layer dumps this host has (socketlab.execute.dumps)

    def run(self) -> None:
        try:
            if self._hold():
                self._points()
        except (StoreError, OSError) as exc:
            # The results folder or store failed (full, turned read-only): stop this host with
            # one line. Its pending points stay unstored, so a resume runs them (none is
            # marked failed, none half-stored: a run and its metrics are one transaction).
            where = f"{exc.filename}: " if isinstance(exc, OSError) and exc.filename else ""
            text = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            self.recorder.host_error(self.name, f"stopped: {where}{text}")
        except Exception as exc:  # noqa: BLE001 - a bug must not pass silently in a thread
            self.recorder.host_error(self.name, f"internal error: {type(exc).__name__}: {exc}")
            raise
        finally:
            self.groups.host_ended(self.name)
            for ex in (self.executor, self.controller):
                if ex is not None:
                    ex.close()
            shutil.rmtree(self.scratch, ignore_errors=True)

    # -- the host -----------------------------------------------------------------------------

    def _hold(self) -> bool:
        """The host opened (or the session's open one taken) and locked; False when it can't
        be: its error is noted, and its points are stored failed unless it is only busy."""
        session, store = self.session, self.session.store
        try:
            self.executor = session.take_executor(self.name)
            self._lock(self.executor)
        except HostBusy as exc:  # no point ran: a host-level note, retried next session
            self.recorder.host_error(self.name, str(exc))
            # the holder runs this campaign itself: it stores those points, and a note of
            # ours would outlive its session (status would say the host was never reached)
            if json.dumps({"campaign": session.campaign})[1:-1] not in str(exc):
                store.record_host_failure(session.campaign, self.name, "lock", str(exc))
            return False
        except HostError as exc:
            self.recorder.host_error(self.name, str(exc))
            self.recorder.fail_all(self.items, f"host unreachable: {exc}")
            return False
        store.clear_host_failure(session.campaign, self.name)  # reached and held: worked on
        return True

    def _lock(self, ex: Executor, busy_wait_s: float = 0.0) -> None:
        deadline = time.monotonic() + busy_wait_s
        while True:
            try:
                ex.lock({"campaign": self.session.campaign, "controller": controller_id()})
                return
            except HostBusy as exc:
                if orphaned(exc.holder):  # it idles out: nobody sends it heartbeats
                    deadline = max(deadline, time.monotonic() + AGENT_IDLE_S + 10)
                if time.monotonic() >= deadline:
                    raise
                time.sleep(1.0)

    def _reopen(self) -> None:
        """One reconnect after the connection was lost: a blip should not fail the rest of the
        campaign; our old agent may hold the lock until it misses our heartbeats."""
        self.executor.connect()
        self.executor.install_tools(self.scratch)
        self._lock(self.executor, busy_wait_s=AGENT_IDLE_S + 10)

    def _controller_executor(self) -> Executor:
        """Where this host's `runs_on: controller` points run: this machine, with this
        interpreter (it has socketlab), in a work folder of its own per host."""
        if self.controller is None:
            workroot = self.session.workroot
            ex = LocalExecutor(
                f"{self.name}.controller",
                python=sys.executable,
                **({"workroot": workroot} if workroot else {}),
            )
            ex.connect()
            ex.install_tools(self.scratch / "controller")
            self._lock(ex)
            self.controller = ex
        return self.controller

    # -- its points ---------------------------------------------------------------------------

    def _points(self) -> None:
        for index, (point, key) in enumerate(self.items):
            if self.stop.stopping:  # stopping: the rest stays pending
                return
            try:
                if not self._point(point, key):
                    return
            except HostUnreachable as exc:
                if not isinstance(exc, LostAfterStore):  # never overwrite a stored run
                    self.recorder.fail(point, key, f"host unreachable: {exc}")
                try:
                    self._reopen()
                except HostError as again:
                    self.recorder.host_error(self.name, str(again))
                    self.recorder.fail_all(self.items[index + 1 :], f"host unreachable: {again}")
                    return
            except (HostError, PathError) as exc:  # this run's step failed; the host is fine
                self.recorder.fail(point, key, str(exc))

    def _point(self, point: RunPoint, key: str) -> bool:
        """Run one point (or skip it past its ladder's stop, or fail it on its build); False
        when the session is stopping."""
        stop = self.groups.adaptive_stop(point, wait=True)
        if self.stop.stopping:  # stopped while waiting for the group
            return False
        if stop is not None and float(point.params[stop[0]]) > stop[1].value:
            self.groups.abandon(point)
            self.session.reporter.message(
                self.name, f"{point_label(point)}: not run: {stop[1].reason}"
            )
            return True
        new_build = point.build and point.build not in self.manifests | self.broken
        if new_build and not self._build(point.build):
            return False
        if point.build in self.broken:
            self.groups.abandon(point)  # its `together` group can't start without us
            self.recorder.fail(point, key, f"build failed: {self.broken[point.build]}")
            return True
        ex = (
            self._controller_executor()
            if point.extra.get("runs_on") == "controller"
            else (self.executor)
        )
        self._ship(ex, point)
        coll_dir = inside(ex.workdir, "runs", key, "collectors", what="run key")
        job = self.session.jobs[point.build] if point.build else None
        build = Build(job.remote_dir(ex) if job else None, self.manifests.get(point.build))
        with self.session.in_flight(
            self.name, ex, f"{coll_dir}/target.pid", coll_dir, point.collectors
        ):
            self.groups.meet(point)
            run_point(
                ex,
                point,
                key,
                build=build,
                recorder=self.recorder,
                facts=self.session.host_facts.get(point.host),
            )
        self.groups.adaptive_stop(point)  # records the stop as soon as it is known
        return True

    def _build(self, name: str) -> bool:
        """Build ``name`` on the host (or find it cached); False when the session's stop
        killed the build (no point ran)."""
        job = self.session.jobs[name]
        try:
            with self.session.in_flight(self.name, self.executor, job.pidfile(self.executor)):
                self.manifests[name] = ensure_built(
                    job,
                    self.executor,
                    self.scratch,
                    log=lambda text: self.session.reporter.message(self.name, text),
                )
        except HostUnreachable:
            raise
        except HostError as exc:
            if self.stop.stopping:  # make was stopped: no point ran
                self.session.reporter.message(self.name, f"build {job.name} stopped: {exc}")
                return False
            self.broken[name] = str(exc)
        return True

    def _ship(self, ex: Executor, point: RunPoint) -> None:
        """The point's layer dump, copied to the host once (sha256 checked, resumable)."""
        dump = point.extra.get("layer_dump")
        if dump and dump["key"] not in self.shipped:
            how = ship_dump(
                ex,
                dump,
                dump_dir(ex.tools, dump["key"]),
                log=lambda text: self.session.reporter.message(self.name, text),
            )
            self.shipped.add(dump["key"])
            self.session.reporter.message(self.name, f"layer dump {dump['key']}: {how}")


def opened(host, workroot: str | None, scratch: Path) -> Executor:
    """A host's executor, connected, with its tools and agent (no lock yet)."""
    ex = make_executor(host, **({"workroot": workroot} if workroot else {}))
    try:
        ex.connect()
        ex.install_tools(scratch)
    except BaseException:
        ex.close()
        raise
    return ex
