"""One point of any kind, with what every kind shares around it: a fresh run folder here and on
the host, fingerprints before and after (through the host's agent: no process per point),
collectors, the interference probe, the kind's run (socketlab.runkinds), the verdict
(socketlab.runner.judge), the provenance files and the record, stored in one transaction.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from socketlab import __version__
from socketlab import probe as interference_probe
from socketlab.errors import HostError
from socketlab.execute import Executor, HostUnreachable
from socketlab.parse import Metric
from socketlab.parse.collectors import collector_metrics, read_records
from socketlab.parse.jsonl import VERSION as JSONL_VERSION
from socketlab.runkinds import RunContext
from socketlab.runkinds import run_point as run_kind
from socketlab.runner.judge import Collected, judge
from socketlab.runner.record import Recorder, point_label
from socketlab.safepath import inside
from socketlab.spec.points import RunPoint


class LostAfterStore(HostUnreachable):
    """The host became unreachable after the run was stored (during its cleanup)."""


@dataclass(frozen=True)
class Build:
    """The point's build on its host: where it is (the runs' working folder) and its manifest."""

    remote_dir: str | None = None
    manifest: dict | None = None


def run_point(
    ex: Executor,
    point: RunPoint,
    key: str,
    *,
    build: Build,
    recorder: Recorder,
    facts: dict | None = None,
) -> None:
    """Run ``point`` on ``ex`` and store it (a warm-up leaves nothing); HostError or PathError
    when a step around the run fails, LostAfterStore when the host went away after storing."""
    reporter = recorder.reporter
    label = point_label(point)
    reporter.point_started(point.host, label)
    t0 = time.monotonic()
    # a link planted at runs/<key> (or runs/) would take this run's files elsewhere and
    # rmtree would follow it: refuse it first, naming it; this point alone fails (PathError)
    raw = inside(
        recorder.results_dir,
        ".warmup" if point.warmup else "runs",
        key,
        what="run key",
        links=False,
    )
    remote = inside(ex.workdir, "runs", key, what="run key")
    coll_dir = f"{remote}/collectors"
    ex.fresh_dir(remote, "collectors")
    if raw.exists():
        shutil.rmtree(raw)  # an earlier failed attempt's files
    raw.mkdir(parents=True)
    before = ex.fingerprint()
    notes: dict[str, Any] = {}
    _start_collectors(ex, point, coll_dir, notes)
    probe = None if point.warmup else point.extra.get("probe")
    before_probe = _probe(ex, probe, build) if probe else None
    out = run_kind(RunContext(ex, key, raw, remote, reporter, build.remote_dir), point)
    if probe:  # stored with the run (extra and run.json): socketlab.report.interference
        notes["probe"] = {
            "before": before_probe,
            "after": _probe(ex, probe, build),
            "below": probe["below"],
        }
    _stop_collectors(ex, point, coll_dir, notes)
    after = ex.fingerprint()
    if point.warmup:  # nothing is kept of a warm-up, on the host either
        ex.remove(remote)
        shutil.rmtree(raw, ignore_errors=True)
        reporter.point_done(point.host, label, "warmup", "", time.monotonic() - t0)
        return
    files = ex.fetch_tree(coll_dir, raw / "collectors") if point.collectors else []
    collected = read_collected(raw / "collectors", notes.get("collector_errors", {}))
    out.metrics += collected.metrics
    out.status, out.reason = judge(out, before, after, collected, point.sanity.required_metrics)
    _write_provenance(raw, point, key, ex, out, build, before, after, files, notes, recorder, facts)
    record = recorder.record(
        point,
        key,
        out.status,
        out.reason,
        exit_code=out.exit_code,
        started=out.started,
        duration_s=out.duration_s,
        build=build.manifest,
        fingerprint_before=before,
        fingerprint_after=after,
        extra={**out.extra, "collectors": files, "orchestrator": __version__, **notes},
    )
    recorder.store_run(point, record, out.metrics, out.requests, time.monotonic() - t0)
    try:
        ex.remove(remote)  # cleanup only: the run is stored
    except HostUnreachable as exc:
        # the host went away after the run was stored: the run stands as stored, and the
        # host loop still learns that the host is gone
        raise LostAfterStore(str(exc)) from exc


def read_collected(folder: Path, errors: dict[str, str]) -> Collected:
    """The collectors' files fetched into ``folder``: their metrics (collectors with a parser
    in socketlab.parse.collectors, such as clock, RAPL, perf and noise, are parsed there; the
    others by the JSON-lines contract) and, with ``errors`` (starts and stops that failed),
    every collector whose daemon recorded an error before dying."""
    metrics: list[Metric] = []
    deaths: dict[str, str] = {}
    for path in sorted(folder.glob("*.jsonl")):
        name = path.stem
        metrics += [
            Metric(
                m["name"],
                m["value"],
                m["unit"],
                {**{k: v for k, v in m["dims"].items() if k != "ts"}, "source": name},
                f"collector:{name}/{JSONL_VERSION}",
            )
            for m in collector_metrics(name, path.parent).metrics
        ]
        died = [str(rec["error"])[-300:] for rec in read_records(path) if "error" in rec]
        if died:
            deaths[name] = died[-1]
    return Collected(metrics, {**errors, **deaths})


def controller_id() -> str:
    """Who runs this session: this machine's name and the orchestrator's PID."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _start_collectors(ex: Executor, point: RunPoint, coll_dir: str, notes: dict) -> None:
    for name in point.collectors:
        argv = ex.tool(f"{name}.py", "start", "--out", coll_dir)
        if point.cpus:
            argv += ["--cpus", point.cpus]
        code, text = ex.call(argv, timeout=30)
        if code != 0:
            notes.setdefault("collector_errors", {})[name] = text.strip()[-300:]
        with contextlib.suppress(ValueError, IndexError, KeyError, HostError):
            ex.watch(int(json.loads(text.strip().splitlines()[-1])["pid"]))  # dies with us


def _stop_collectors(ex: Executor, point: RunPoint, coll_dir: str, notes: dict) -> None:
    for name in point.collectors:
        code, text = ex.call(ex.tool(f"{name}.py", "stop", "--out", coll_dir), timeout=30)
        if code != 0:
            notes.setdefault("collector_errors", {})[name] = text.strip()[-300:]


def _probe(ex: Executor, probe: dict, build: Build) -> dict:
    """One interference-probe reading on the point's CPUs (socketlab.probe). A probe that
    fails is kept as its error: the run is then judged as not probed, never lost."""
    at = time.time()
    code, text = ex.call(interference_probe.argv(probe, build.remote_dir), timeout=30)
    if code != 0:
        return {"at": at, "error": f"exit {code}: {text.strip()[-300:]}"}
    try:
        return interference_probe.reading(text, at)
    except ValueError as exc:
        return {"at": at, "error": str(exc)}


def _write_provenance(
    raw: Path,
    point: RunPoint,
    key: str,
    ex: Executor,
    out,
    build: Build,
    before: dict,
    after: dict,
    files: list[str],
    notes: dict,
    recorder: Recorder,
    facts: dict | None,
) -> None:
    """run.json (everything the run was and produced but its metrics) and the host's facts."""
    provenance = {
        "point": _point_dict(point),
        "run_key": key,
        "host_profile": recorder.profiles[point.host],
        "build": build.manifest,
        "fingerprint_before": before,
        "fingerprint_after": after,
        **out.provenance,
        "status": out.status,
        "reason": out.reason,
        "collectors": files,
        "orchestrator": {
            "version": __version__,
            "controller": controller_id(),
            "run_as": getattr(ex, "run_as", ""),
        },
        **notes,
    }
    (raw / "run.json").write_text(json.dumps(provenance, indent=1, sort_keys=True, default=str))
    if facts is not None:
        (raw / "facts.json").write_text(json.dumps(facts, indent=1, sort_keys=True, default=str))


def _point_dict(point: RunPoint) -> dict[str, Any]:
    return {
        "campaign": point.campaign,
        "experiment": point.experiment,
        "host": point.host,
        "params": point.params,
        "repetition": point.repetition,
        "argv": list(point.argv),
        "env": point.env,
        "cpus": point.cpus,
        "timeout_s": point.timeout_s,
        "build": point.build,
        "collectors": list(point.collectors),
        "kind": point.kind,
    }
