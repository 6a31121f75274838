"""Run points on hosts: hosts in parallel, one run at a time per host, every run a record.

For each host: connect, install the tools, take the host's lock, build what its points need
(cached by source hash), then for each point whose run key is not stored as complete:
fingerprint -> collectors start -> run by its kind (socketlab.runkinds: a command pinned, timed,
in its own process group; a server and its load) -> collectors stop -> fingerprint -> fetch raw
files -> collector metrics, required metrics, drift -> store (one transaction).

A host that becomes unreachable fails its remaining points with the reason; other hosts go
on. Resume is the store: a run key stored "ok" is never run again; failed, timed-out and
invalid ones run again with ``rerun_failed``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from socketlab import __version__
from socketlab.build import BuildJob, ensure_built
from socketlab.collect import collector_metrics, read_records
from socketlab.errors import HostError, PathError, StoreError
from socketlab.execute import Executor, HostBusy, HostUnreachable, make_executor
from socketlab.execute.dumps import ship_dump
from socketlab.execute.progress import Reporter
from socketlab.execute.ssh import AGENT_IDLE_S
from socketlab.fingerprint import drift
from socketlab.parse import Metric
from socketlab.parse.jsonl import VERSION as JSONL_VERSION
from socketlab.runkinds import Outcome, RunContext
from socketlab.runkinds import run_point as run_kind
from socketlab.safepath import inside
from socketlab.spec.command import dump_dir
from socketlab.spec.points import RunPoint
from socketlab.store import COMPLETE, INTERRUPTED, UNAVAILABLE, RunRecord, Store


class _LostAfterStore(HostUnreachable):
    """The host became unreachable after the run was stored (during its cleanup)."""


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
            "statuses": dict(self.statuses),
            "already_stored": self.skipped_done,
            "host_errors": self.host_errors,
        }

    @property
    def ok(self) -> bool:
        # a run the host can't do ("not available on this host") is not a failure
        return not self.host_errors and all(s in (COMPLETE, UNAVAILABLE)
                                            for s in self.statuses.elements())  # fmt: skip


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
    ) -> None:
        self.campaign = campaign
        self.points = points
        self.hosts = hosts
        self.profiles = profiles
        self.store = store
        self.results_dir = Path(results_dir)
        self.spec_sha256 = spec_sha256
        self.rerun_failed = rerun_failed
        self.reporter = reporter or Reporter()
        self.workroot = workroot
        self.host_facts = host_facts or {}
        #: host -> its scratch folder; built here so a host name that would leave the results
        #: folder is refused (one line) before any host thread starts
        self._scratch = {name: inside(self.results_dir / ".scratch", name, what="host name")
                         for name in hosts}  # fmt: skip
        self.jobs = {
            name: BuildJob.from_spec(build, native_root) for name, build in (builds or {}).items()
        }
        self.summary = Summary()
        self._lock = threading.Lock()
        #: `together` groups: points that start at one moment on all their hosts
        self._barriers: dict[tuple, threading.Barrier] = {}
        self._unmet: dict[str, set[tuple]] = {}  #: host -> barriers it has not reached yet
        #: `together` + `adaptive`: notified on every stored run and every host thread's end
        self._stored = threading.Condition()
        self._ended: set[str] = set()  #: hosts whose thread has finished
        #: the signal (SIGTERM, SIGINT) that stops this session; runs then end "interrupted"
        self.interrupted: int | None = None
        self.stopper: threading.Thread | None = None  #: the thread that stops in-flight work
        #: host -> (executor, pidfile, collectors folder, collectors) of its current run or build
        self._inflight: dict[str, tuple[Executor, str, str, tuple[str, ...]]] = {}

    # -- planning the session (no host contact) -------------------------------------------------

    def key(self, point: RunPoint) -> str:
        build_hash = self.jobs[point.build].build_hash if point.build else None
        return point.key(build_hash, self.profiles[point.host])

    def pending(self) -> dict[str, list[tuple[RunPoint, str]]]:
        """host -> [(point, key)] still to run, warm-ups only where their point is pending."""
        stored = self.store.statuses(self.campaign)
        todo: dict[str, list[tuple[RunPoint, str]]] = {h: [] for h in self.hosts}
        keyed = [(p, self.key(p)) for p in self.points if p.host in self.hosts]
        wanted: set[tuple[str, str, str]] = set()
        for point, key in keyed:
            if point.warmup:
                continue
            status = stored.get(key)
            if status in (None, INTERRUPTED) or (status != COMPLETE and self.rerun_failed):
                wanted.add(_ident(point))
            else:
                self.summary.skipped_done += 1
        for point, key in keyed:
            if _ident(point) not in wanted:
                continue
            status = stored.get(key)
            if point.warmup or status in (None, INTERRUPTED) or (
                    status != COMPLETE and self.rerun_failed):
                todo[point.host].append((point, key))
        return todo

    # -- running ---------------------------------------------------------------------------------

    def run(self) -> Summary:
        todo = self.pending()
        total = sum(1 for items in todo.values() for p, _ in items if not p.warmup)
        busy = [h for h, items in todo.items() if items]
        for idle in set(todo) - set(busy):  # nothing left to run there: no note stays true
            self.store.clear_host_failure(self.campaign, idle)
        self._make_barriers(todo)
        self.reporter.start(self.campaign, total, len(busy), self.summary.skipped_done)
        threads = [
            threading.Thread(target=self._host, args=(h, todo[h]), name=f"host-{h}", daemon=True)
            for h in busy
        ]
        with _stop_signals(self._on_signal):
            for t in threads:
                t.start()
            self._join(threads)
        self.reporter.finish(self.summary.as_dict())
        return self.summary

    # -- shutdown (SIGTERM, SIGINT) ---------------------------------------------------------------

    def _on_signal(self, signum: int, _frame: Any) -> None:
        """Stop the session: kill each host's current run or build (its process group, by
        its PID), stop its collectors; the host threads store those runs as interrupted (a
        resume runs them again) and start nothing new."""
        first = self.interrupted is None
        self.interrupted = signum
        if first:  # (the stop thread also wakes hosts waiting for their group's step)
            stopper = threading.Thread(target=self._stop_inflight, name="stop", daemon=True)
            stopper.start()
            self.stopper = stopper

    def _stop_inflight(self) -> None:
        self._notify()
        inflight = list(self._inflight.items())
        signame = signal.Signals(self.interrupted).name if self.interrupted else "signal"
        for host, (ex, pidfile, _, _) in inflight:  # every run first: a collector stop may wait
            with contextlib.suppress(Exception):  # best effort: the host may be gone
                ex.interrupt(pidfile)
            self.reporter.message(host, f"{signame}: stopping the run or build in flight")
        for _, (ex, _, coll_dir, collectors) in inflight:
            for name in collectors:
                with contextlib.suppress(Exception):
                    ex.call(ex.tool(f"{name}.py", "stop", "--out", coll_dir), timeout=5)

    @contextlib.contextmanager
    def _in_flight(self, host: str, ex: Executor, pidfile: str, coll_dir: str = "",
                   collectors: tuple[str, ...] = ()) -> Iterator[None]:  # fmt: skip
        """Listed for the stop while the body runs. The executor remembers an interrupt until
        the pidfile's run comes, so one before the run starts still stops it; and a stop
        that looked at the list just before we joined it is caught by the check after."""
        self._inflight[host] = (ex, pidfile, coll_dir, tuple(collectors))
        try:
            if self.interrupted is not None:
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
                if self.interrupted is not None:
                    deadline = deadline or time.monotonic() + STOP_GRACE_S
                    if time.monotonic() > deadline:
                        return

    def _controller_executor(self, name: str, scratch: Path) -> Executor:
        """Where a host's `runs_on: controller` points run: this machine, with this
        interpreter (it has socketlab), in a work folder of its own per host."""
        from socketlab.execute.local import LocalExecutor

        ex = LocalExecutor(f"{name}.controller", python=sys.executable,
                           **({"workroot": self.workroot} if self.workroot else {}))  # fmt: skip
        self._open(ex, scratch / "controller")
        return ex

    def _host(self, name: str, items: list[tuple[RunPoint, str]]) -> None:
        host = self.hosts[name]
        executor = make_executor(host, **({"workroot": self.workroot} if self.workroot else {}))
        controller: Executor | None = None
        scratch = self._scratch[name]
        try:
            try:
                self._open(executor, scratch)
            except HostBusy as exc:  # no point ran: a host-level note, retried next session
                self._host_error(name, str(exc))
                # the holder runs this campaign itself: it stores those points, and a note of
                # ours would outlive its session (status would say the host was never reached)
                if json.dumps({"campaign": self.campaign})[1:-1] not in str(exc):
                    self.store.record_host_failure(self.campaign, name, "lock", str(exc))
                return
            except HostError as exc:
                self._host_error(name, str(exc))
                self._fail_all(items, f"host unreachable: {exc}")
                return
            self.store.clear_host_failure(self.campaign, name)  # reached and held: worked on
            manifests: dict[str, dict] = {}
            broken: dict[str, str] = {}
            shipped: set[str] = set()  #: layer dumps this host has (socketlab.execute.dumps)
            for index, (point, key) in enumerate(items):
                if self.interrupted is not None:  # stopping: the rest stays pending
                    break
                try:
                    stop = self._adaptive_stop(point, wait=True)
                    if self.interrupted is not None:  # stopped while waiting for the group
                        break
                    if stop is not None and float(point.params[stop[0]]) > stop[1].value:
                        self._abandon(point)
                        self.reporter.message(name, f"{point_label(point)}: not run: "
                                              f"{stop[1].reason}")  # fmt: skip
                        continue
                    if point.build and point.build not in manifests | broken:
                        job = self.jobs[point.build]
                        try:
                            with self._in_flight(name, executor, job.pidfile(executor)):
                                manifests[point.build] = ensure_built(
                                    job, executor, scratch,
                                    log=lambda text: self.reporter.message(name, text),
                                )  # fmt: skip
                        except HostUnreachable:
                            raise
                        except HostError as exc:
                            if self.interrupted is not None:  # make was stopped: no point ran
                                self.reporter.message(name, f"build {job.name} stopped: {exc}")
                                break
                            broken[point.build] = str(exc)
                    if point.build in broken:
                        self._abandon(point)  # its `together` group can't start without us
                        self._record_failure(point, key, f"build failed: {broken[point.build]}")
                        continue
                    ex = executor
                    if point.extra.get("runs_on") == "controller":
                        if controller is None:
                            controller = self._controller_executor(name, scratch)
                        ex = controller
                    dump = point.extra.get("layer_dump")
                    if dump and dump["key"] not in shipped:
                        how = ship_dump(ex, dump, dump_dir(ex.tools, dump["key"]),
                                        log=lambda text: self.reporter.message(name, text))
                        shipped.add(dump["key"])
                        self.reporter.message(name, f"layer dump {dump['key']}: {how}")
                    coll_dir = inside(ex.workdir, "runs", key, "collectors", what="run key")
                    with self._in_flight(name, ex, f"{coll_dir}/target.pid", coll_dir,
                                         point.collectors):  # fmt: skip
                        self._run_point(ex, point, key, manifests.get(point.build), scratch)
                    self._adaptive_stop(point)  # records the stop as soon as it is known
                except HostUnreachable as exc:
                    if not isinstance(exc, _LostAfterStore):  # never overwrite a stored run
                        self._record_failure(point, key, f"host unreachable: {exc}")
                    try:  # one reconnect: a blip should not fail the rest of the campaign
                        # our old agent may hold the lock until it misses our heartbeats
                        self._open(executor, scratch, busy_wait_s=AGENT_IDLE_S + 10)
                    except HostError as again:
                        self._host_error(name, str(again))
                        self._fail_all(items[index + 1 :], f"host unreachable: {again}")
                        return
                except (HostError, PathError) as exc:  # this run's step failed; the host is fine
                    self._record_failure(point, key, str(exc))
        except (StoreError, OSError) as exc:
            # The results folder or store failed (full, turned read-only): stop this host with
            # one line. Its pending points stay unstored, so a resume runs them (none is
            # marked failed, none half-stored: a run and its metrics are one transaction).
            where = f"{exc.filename}: " if isinstance(exc, OSError) and exc.filename else ""
            text = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            self._host_error(name, f"stopped: {where}{text}")
        except Exception as exc:  # noqa: BLE001 - a bug must not pass silently in a thread
            self._host_error(name, f"internal error: {type(exc).__name__}: {exc}")
            raise
        finally:
            for ident in self._unmet.get(name, set()):  # peers waiting for us must not hang
                self._barriers[ident].abort()
            with self._stored:
                self._ended.add(name)
                self._stored.notify_all()
            executor.close()
            if controller is not None:
                controller.close()
            shutil.rmtree(scratch, ignore_errors=True)

    def _make_barriers(self, todo: dict[str, list[tuple[RunPoint, str]]]) -> None:
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

    def _adaptive_stop(self, point: RunPoint, wait: bool = False):
        """(param, Stop) where the point's adaptive ladder stopped, recorded in the store's
        meta table; None when the point is not adaptive or its ladder goes on.

        With `together`, the ladder is the group's: one decision over every host's stored
        runs of each step (pooled), and with ``wait`` no host starts a step before each
        host's runs of the step below are stored, so all of them stop at the same step."""
        if not point.extra.get("adaptive"):
            return None
        from socketlab.spec import adaptive as ad

        spec = ad.from_extra(point.extra["adaptive"])
        ladder = ad.ladder_of(point.params, spec.param)
        group = self._ladder_group(point, spec.param, ladder)
        steps = self._wait_for_step(point, spec, group) if wait and len(group) > 1 else None
        if steps is None:
            steps = self._group_steps(point, spec, ladder, group)
        stop = ad.decide(spec, steps)
        if stop is None:
            return None
        self.store.set_meta(ad.meta_key(point.host, point.experiment, ladder),
                            json.dumps(stop.as_dict(), sort_keys=True))  # fmt: skip
        return spec.param, stop

    def _ladder_group(self, point: RunPoint, param: str, ladder: str) -> list[str]:
        """The hosts whose ladder is this point's: the same experiment, other parameters and
        `together` group (only this host without `together`)."""
        from socketlab.spec.adaptive import ladder_of

        together = point.extra.get("together")
        if not together:
            return [point.host]
        return sorted({p.host for p in self.points if p.host in self.hosts
                       and p.experiment == point.experiment
                       and p.extra.get("together") == together
                       and ladder_of(p.params, param) == ladder})  # fmt: skip

    def _group_steps(self, point: RunPoint, spec, ladder: str, group: list[str]) -> dict:
        """The ladder's stored steps as ``adaptive.decide`` reads them, pooled over ``group``:
        runs expected and stored ok summed, metric values together, the first bad run."""
        return _pooled({host: self._host_steps(point, spec, ladder, host) for host in group})

    def _host_steps(self, point: RunPoint, spec, ladder: str, host: str) -> dict:
        from socketlab.spec import adaptive as ad

        expected: dict[float, int] = {}
        for p in self.points:  # measured runs per step of this ladder on this host
            if (p.host == host and p.experiment == point.experiment and not p.warmup
                    and ad.ladder_of(p.params, spec.param) == ladder):  # fmt: skip
                value = float(p.params[spec.param])
                expected[value] = expected.get(value, 0) + 1
        return ad.stored_steps(self.store, self.campaign, host, point.experiment, spec, ladder,
                               expected)  # fmt: skip

    def _wait_for_step(self, point: RunPoint, spec, group: list[str]) -> dict | None:
        """Until every host of the group has stored its runs of the step below the point's (or
        the group's ladder stopped, or we are stopping); HostError if a host ended first.
        Returns the group's pooled steps as last read (None when nothing was read: the first
        step, or stopping), so the caller decides on them without reading the store again."""
        from socketlab.spec import adaptive as ad

        values = sorted(spec.values)
        index = values.index(float(point.params[spec.param]))
        if index == 0:
            return None
        below = values[index - 1]
        ladder = ad.ladder_of(point.params, spec.param)

        def late() -> tuple[str, dict]:  # a host still to store the step below ("" if none)
            each = {host: self._host_steps(point, spec, ladder, host) for host in group}
            pooled = _pooled(each)
            if ad.decide(spec, pooled) is not None:
                return "", pooled
            for host, steps in each.items():
                step = steps.get(below)
                if step is not None and not step["bad"] and step["ok"] < step["expected"]:
                    return host, pooled
            return "", pooled

        deadline = time.monotonic() + TOGETHER_WAIT_S
        with self._stored:
            while self.interrupted is None:
                host, pooled = late()
                if not host:
                    return pooled
                if host in self._ended or time.monotonic() > deadline:
                    self._abandon(point)  # our peers must not wait for us at its barrier
                    raise HostError(
                        f"together group {point.extra['together']!r}: {host} did not store its "
                        f"{spec.param}={below:g} runs (it failed, stopped or is "
                        f"{TOGETHER_WAIT_S:g} s late), so the group's ladder can't go on")
                self._stored.wait(timeout=1.0)

    def _notify(self) -> None:
        with self._stored:
            self._stored.notify_all()

    def _abandon(self, point: RunPoint) -> None:
        ident = _together(point) if point.extra.get("together") else None
        if ident in self._barriers:
            self._unmet[point.host].discard(ident)
            self._barriers[ident].abort()

    def _meet(self, point: RunPoint) -> None:
        """Wait for every host of the point's `together` group; HostError if one can't come."""
        ident = _together(point) if point.extra.get("together") else None
        barrier = self._barriers.get(ident) if ident else None
        if barrier is None:
            return
        self._unmet[point.host].discard(ident)
        try:
            barrier.wait(timeout=TOGETHER_WAIT_S)
        except threading.BrokenBarrierError:
            raise HostError(f"together group {point.extra['together']!r}: not every host of "
                            "the group reached this point (one failed, stopped or is "
                            f"{TOGETHER_WAIT_S:g} s late)") from None  # fmt: skip

    def _open(self, executor: Executor, scratch: Path, busy_wait_s: float = 0.0) -> None:
        executor.connect()
        executor.install_tools(scratch)
        deadline = time.monotonic() + busy_wait_s
        while True:
            try:
                executor.lock({"campaign": self.campaign, "controller": _controller()})
                return
            except HostBusy:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(1.0)

    def _host_error(self, host: str, text: str) -> None:
        with self._lock:
            self.summary.host_errors[host] = text
        self.reporter.message(host, f"error: {text}")

    def _fail_all(self, items: list[tuple[RunPoint, str]], reason: str) -> None:
        for point, key in items:
            self._record_failure(point, key, reason)

    def _record_failure(self, point: RunPoint, key: str, reason: str) -> None:
        if point.warmup:
            return
        record = self._record(point, key, "failed", reason)
        self.store.add_run(record, [])
        self._done(point, record, 0.0)

    def _record(self, point: RunPoint, key: str, status: str, reason: str, **extra) -> RunRecord:
        if self.interrupted is not None and status != COMPLETE:  # killed by our own stop
            status = INTERRUPTED
            reason = f"interrupted by {signal.Signals(self.interrupted).name}; a resume runs it"
        return RunRecord(
            run_key=key, campaign=self.campaign, experiment=point.experiment, host=point.host,
            repetition=point.repetition, params=dict(point.params), status=status,
            reason=reason, argv=list(point.argv), cpus=point.cpus,
            host_profile=self.profiles[point.host], spec_sha256=self.spec_sha256,
            raw_dir=str(inside(self.results_dir, "runs", key, what="run key")),
            finished=time.time(), **extra,
        )  # fmt: skip

    def _done(self, point: RunPoint, record: RunRecord, seconds: float) -> None:
        with self._lock:
            self.summary.statuses[record.status] += 1
            self.summary.keys.append(record.run_key)
        self._notify()  # a host may wait for this run (a `together` group's adaptive step)
        self.reporter.point_done(point.host, point_label(point), record.status, record.reason,
                                 seconds)  # fmt: skip

    # -- one run -----------------------------------------------------------------------------

    def _run_point(self, ex: Executor, point: RunPoint, key: str, manifest: dict | None,
                   scratch: Path) -> None:  # fmt: skip
        """One point of any kind (socketlab.runkinds), with what every kind shares around it."""
        self._meet(point)
        label = point_label(point)
        self.reporter.point_started(point.host, label)
        t0 = time.monotonic()
        # a link planted at runs/<key> (or runs/) would take this run's files elsewhere and
        # rmtree would follow it: refuse it first, naming it; this point alone fails (PathError)
        raw = inside(self.results_dir, ".warmup" if point.warmup else "runs", key,
                     what="run key", links=False)  # fmt: skip
        remote = inside(ex.workdir, "runs", key, what="run key")
        coll_dir = f"{remote}/collectors"
        ex.check(["rm", "-rf", remote], what="clearing the run directory")
        ex.check(["mkdir", "-p", coll_dir], what="making the run directory")
        if raw.exists():
            shutil.rmtree(raw)  # an earlier failed attempt's files
        raw.mkdir(parents=True)
        before = self._fingerprint(ex)
        notes: dict[str, Any] = {}
        for name in point.collectors:
            argv = ex.tool(f"{name}.py", "start", "--out", coll_dir)
            if point.cpus:
                argv += ["--cpus", point.cpus]
            code, text = ex.call(argv, timeout=30)
            if code != 0:
                notes.setdefault("collector_errors", {})[name] = text.strip()[-300:]
            with contextlib.suppress(ValueError, IndexError, KeyError, HostError):
                ex.watch(int(json.loads(text.strip().splitlines()[-1])["pid"]))  # dies with us
        probe = None if point.warmup else point.extra.get("probe")
        before_probe = self._probe(ex, point, probe) if probe else None
        context = RunContext(ex, key, raw, remote, self.reporter,
                             self.jobs[point.build].remote_dir(ex) if point.build else None)
        out = run_kind(context, point)
        if probe:  # stored with the run (extra and run.json): socketlab.report.interference
            notes["probe"] = {"before": before_probe, "after": self._probe(ex, point, probe),
                              "below": probe["below"]}
        for name in point.collectors:
            code, text = ex.call(ex.tool(f"{name}.py", "stop", "--out", coll_dir), timeout=30)
            if code != 0:
                notes.setdefault("collector_errors", {})[name] = text.strip()[-300:]
        after = self._fingerprint(ex)
        if point.warmup:  # nothing is kept of a warm-up, on the host either
            ex.call(["rm", "-rf", remote])
            shutil.rmtree(raw, ignore_errors=True)
            self.reporter.point_done(point.host, label, "warmup", "", time.monotonic() - t0)
            return
        collector_files = ex.fetch_tree(coll_dir, raw / "collectors") if point.collectors else []
        self._judge(point, out, before, after, raw, notes)
        provenance = {
            "point": _point_dict(point), "run_key": key, "host_profile": self.profiles[point.host],
            "build": manifest, "fingerprint_before": before, "fingerprint_after": after,
            **out.provenance, "status": out.status, "reason": out.reason,
            "collectors": collector_files,
            "orchestrator": {"version": __version__, "controller": _controller(),
                             "run_as": getattr(ex, "run_as", "")}, **notes,
        }  # fmt: skip
        (raw / "run.json").write_text(json.dumps(provenance, indent=1, sort_keys=True, default=str))
        if point.host in self.host_facts:
            (raw / "facts.json").write_text(
                json.dumps(self.host_facts[point.host], indent=1, sort_keys=True, default=str))
        record = self._record(
            point, key, out.status, out.reason, exit_code=out.exit_code, started=out.started,
            duration_s=out.duration_s, build=manifest, fingerprint_before=before,
            fingerprint_after=after,
            extra={**out.extra, "collectors": collector_files, "orchestrator": __version__,
                   **notes},
        )  # fmt: skip
        self.store.add_run(record, out.metrics, requests=out.requests)
        self._done(point, record, time.monotonic() - t0)
        try:
            ex.call(["rm", "-rf", remote])  # cleanup only: the run is stored
        except HostUnreachable as exc:
            # the host went away after the run was stored: the run stands as stored, and
            # the host loop still learns that the host is gone
            raise _LostAfterStore(str(exc)) from exc

    def _probe(self, ex: Executor, point: RunPoint, probe: dict) -> dict:
        """One interference-probe reading on the point's CPUs (socketlab.probe). A probe that
        fails is kept as its error: the run is then judged as not probed, never lost."""
        from socketlab import probe as interference_probe

        at = time.time()
        argv = interference_probe.argv(probe, self.jobs[point.build].remote_dir(ex))
        code, text = ex.call(argv, timeout=30)
        if code != 0:
            return {"at": at, "error": f"exit {code}: {text.strip()[-300:]}"}
        try:
            return interference_probe.reading(text, at)
        except ValueError as exc:
            return {"at": at, "error": str(exc)}

    def _fingerprint(self, ex: Executor) -> dict:
        text = ex.check(ex.tool("fingerprint.py"), what="fingerprint")
        try:
            return json.loads(text.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise HostError(f"{ex.name}: fingerprint.py printed no JSON: {text[-200:]!r}") from None

    def _judge(self, point: RunPoint, out: Outcome, before: dict, after: dict, raw: Path,
               notes: dict) -> None:  # fmt: skip
        """What every kind's run is judged by: collectors (metrics, deaths), the required
        metrics, and drift of the host's state between the fingerprints."""
        for path in sorted((raw / "collectors").glob("*.jsonl")):
            collector = path.stem
            # collectors with a parser in socketlab.collect.parsers (clock, RAPL, perf, noise)
            # are parsed there; others by the JSON-lines contract
            found = collector_metrics(collector, path.parent).metrics
            out.metrics += [
                Metric(m["name"], m["value"], m["unit"],
                       {**{k: v for k, v in m["dims"].items() if k != "ts"}, "source": collector},
                       f"collector:{collector}/{JSONL_VERSION}")
                for m in found
            ]  # fmt: skip
        names = {m.name for m in out.metrics}
        missing = [n for n in point.sanity.required_metrics if n not in names]
        # a collector that died leaves its metrics missing: never "ok"
        broken = {**notes.get("collector_errors", {}), **_collector_deaths(raw / "collectors")}
        changes = drift(before, after)
        if out.status == COMPLETE and missing:
            out.status, out.reason = "failed", f"required metrics missing: {', '.join(missing)}"
        if out.status in (COMPLETE, "invalid") and changes:
            why = "host state drifted during the run: " + "; ".join(changes)
            out.status, out.reason = "invalid", f"{out.reason}; {why}" if out.reason else why
        if out.status == COMPLETE and broken:
            out.status = "failed"
            out.reason = "collector failed: " + "; ".join(f"{n}: {t}" for n, t in broken.items())


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


def _collector_deaths(folder: Path) -> dict[str, str]:
    """Collector -> the error its daemon recorded before dying (``_collector.run``'s record)."""
    return {
        path.stem: str(rec["error"])[-300:]
        for path in sorted(folder.glob("*.jsonl"))
        for rec in read_records(path) if "error" in rec
    }  # fmt: skip


#: how long a host waits at a `together` point for the rest of its group
TOGETHER_WAIT_S = 3600.0
#: once stopped by a signal, how long the host threads may take to store their interrupted runs
STOP_GRACE_S = 5.0


def _pooled(steps_by_host: dict[str, dict]) -> dict[float, dict[str, Any]]:
    """Hosts' ladder steps (``adaptive.stored_steps``) as one ladder's: runs expected and
    stored ok summed, metric values together, the first bad run (naming its host if several)."""
    pooled: dict[float, dict[str, Any]] = {}
    for host, steps in steps_by_host.items():
        for value, step in steps.items():
            into = pooled.setdefault(value, {"expected": 0, "ok": 0, "bad": "", "metrics": {}})
            into["expected"] += step["expected"]
            into["ok"] += step["ok"]
            if step["bad"] and not into["bad"]:
                several = len(steps_by_host) > 1
                into["bad"] = f"{host}: {step['bad']}" if several else step["bad"]
            for name, values in step["metrics"].items():
                into["metrics"].setdefault(name, []).extend(values)
    return pooled


def _together(point: RunPoint) -> tuple:
    params = json.dumps(point.params, sort_keys=True, default=str)
    return (point.experiment, params, point.repetition, point.extra["together"])


def _ident(point: RunPoint) -> tuple[str, str, str]:
    return (point.host, point.experiment, json.dumps(point.params, sort_keys=True, default=str))


def _point_dict(point: RunPoint) -> dict[str, Any]:
    return {
        "campaign": point.campaign, "experiment": point.experiment, "host": point.host,
        "params": point.params, "repetition": point.repetition, "argv": list(point.argv),
        "env": point.env, "cpus": point.cpus, "timeout_s": point.timeout_s, "build": point.build,
        "collectors": list(point.collectors), "kind": point.kind,
    }  # fmt: skip


def _controller() -> str:
    import os
    import socket

    return f"{socket.gethostname()}:{os.getpid()}"
