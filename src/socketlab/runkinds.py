"""How one point of each experiment kind runs: ``run(context, point) -> Outcome``.

The runner (socketlab.runner) owns everything around a run, the same for every kind: the
host's lock and builds, a fresh run folder here and on the host, fingerprints before and after
and the drift check, collectors, the record, storage and resume. A kind only runs the point
and judges what it produced. ``command`` is here; other kinds name their module in ``KINDS``
(imported the first time a point of the kind runs), which has a ``run`` of the same shape.
"""

from __future__ import annotations

import importlib
import json
import re
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from socketlab.parse import Metric, parse_output
from socketlab.store.status import RunStatus

#: kind -> module with ``run(context, point) -> Outcome``
KINDS = {"command": __name__, "serving": "socketlab.serve.runkind"}


@dataclass
class RunContext:
    """What a kind gets to run one point with."""

    ex: Any  #: socketlab.execute.Executor of the point's host
    key: str  #: the run key
    raw: Path  #: this run's folder here (made fresh; a warm-up's is removed after)
    remote: str  #: this run's folder on the host (made fresh, collectors/ inside)
    reporter: Any  #: socketlab.execute.progress.Reporter
    cwd: str | None = None  #: where the point's build is on the host


@dataclass
class Outcome:
    """What a run produced; the runner adds collectors, drift and the record around it."""

    status: RunStatus = RunStatus.OK
    reason: str = ""
    metrics: list[Metric] = field(default_factory=list)
    exit_code: int | None = None
    started: float | None = None  #: unix time
    duration_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)  #: stored in the record's extra
    provenance: dict[str, Any] = field(default_factory=dict)  #: added to run.json
    #: serving: (load level, request records) stored with the run (table serve_requests)
    requests: list[tuple[str, list]] = field(default_factory=list)


def run_point(context: RunContext, point) -> Outcome:
    """Run ``point`` with its kind."""
    return importlib.import_module(KINDS[point.kind]).run(context, point)


def run(context: RunContext, point) -> Outcome:
    """The command kind: argv pinned, timed, in its own process group; judged by its sanity."""
    ex = context.ex
    result = ex.run(
        point.argv,
        env=point.env,
        cwd=context.cwd,
        timeout=point.timeout_s,
        cpus=point.cpus,
        out_dir=context.remote,
        pidfile=f"{context.remote}/collectors/target.pid",
    )
    (context.raw / "stdout").write_text(result.stdout)
    (context.raw / "stderr").write_text(result.stderr)
    parsed = parse_output(point.parsers, result.stdout, result.stderr)
    if parsed.meta:
        (context.raw / "meta.json").write_text(json.dumps(parsed.meta, indent=1, default=str))
    status, reason = _verdict(point, result, parsed.errors)
    fields = {k: v for k, v in result.__dict__.items() if k not in ("stdout", "stderr")}
    return Outcome(
        status,
        reason,
        list(parsed.metrics),
        result.exit_code,
        result.started,
        result.duration_s,
        {"pgid": result.pgid},
        {"result": fields},
    )


def _verdict(point, result, errors: list[str]) -> tuple[RunStatus, str]:
    if result.timed_out:
        return (
            RunStatus.TIMEOUT,
            f"killed after {point.timeout_s:g} s (process group {result.pgid})",
        )
    if result.exit_code is None:
        return RunStatus.FAILED, result.stderr.strip()[-300:] or "no result"
    sanity = point.sanity
    if result.exit_code not in sanity.exit_codes:
        said = _not_available(result)
        if said:
            return RunStatus.UNAVAILABLE, said
        tail = " | ".join(result.stderr.strip().splitlines()[-2:])
        why = f"exit code {result.exit_code} (accepted: {', '.join(map(str, sanity.exit_codes))})"
        if result.exit_code < 0:  # subprocess's -N: killed by signal N (a crash, usually)
            why = f"killed by {_signal_name(-result.exit_code)} ({why})"
        return RunStatus.FAILED, why + (f": {tail}" if tail else "")
    if errors:
        return RunStatus.FAILED, "unparsable output: " + "; ".join(errors[:3])
    for pattern in sanity.must_not_match:
        match = re.search(pattern, result.stdout + "\n" + result.stderr, re.MULTILINE)
        if match:
            return (
                RunStatus.FAILED,
                f"output matches must_not_match {pattern!r}: {match.group(0)[:80]!r}",
            )
    return RunStatus.OK, ""


#: the native binaries' and host tools' convention (docs/benchmarks.md): exit 3 and one line
#: "<tool>: not available on this host: <reason>" on stderr
NOT_AVAILABLE_EXIT = 3
_NOT_AVAILABLE = re.compile(r"not available on this host: .*")


def _not_available(result) -> str | None:
    """The host's own "not available on this host: <reason>" line, when the command exited 3
    with one; None otherwise (then a non-accepted exit code is a failure)."""
    if result.exit_code != NOT_AVAILABLE_EXIT:
        return None
    for line in reversed(result.stderr.strip().splitlines()):
        found = _NOT_AVAILABLE.search(line)
        if found:
            return found.group(0)[:300]
    return None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
