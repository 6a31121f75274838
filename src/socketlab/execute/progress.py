"""Progress of a campaign: a rich live display on a TTY, plain log lines or JSON lines elsewhere.

The runner calls a reporter from its host threads; every reporter is thread-safe.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

from socketlab.store.status import RunStatus


class Reporter:
    """Plain log lines on stderr (not a TTY, or --plain)."""

    def __init__(self, stream=None) -> None:
        self.stream = stream or sys.stderr
        self.lock = threading.Lock()
        self.total = 0
        self.done = 0
        self.durations: list[float] = []
        self.hosts = 1
        self.t0 = time.monotonic()

    # events --------------------------------------------------------------------------------
    def start(self, campaign: str, total: int, hosts: int, skipped: int) -> None:
        self.total, self.hosts = total, max(1, hosts)
        self.emit("start", campaign=campaign, total=total, hosts=hosts, already_done=skipped)

    def point_started(self, host: str, label: str) -> None:
        self.emit("point", host=host, point=label)

    def point_done(self, host: str, label: str, status: str, reason: str, seconds: float) -> None:
        with self.lock:
            if status != "warmup":  # warm-ups are not in the total
                self.done += 1
            self.durations.append(seconds)
        self.emit(
            "done",
            host=host,
            point=label,
            status=status,
            reason=reason,
            seconds=round(seconds, 3),
            progress=f"{self.done}/{self.total}",
            eta_s=self.eta(),
        )

    def message(self, host: str, text: str) -> None:
        self.emit("message", host=host, text=text)

    def finish(self, summary: dict[str, Any]) -> None:
        self.emit("finish", **summary)

    # helpers -------------------------------------------------------------------------------
    def eta(self) -> float | None:
        if not self.durations:
            return None
        mean = sum(self.durations) / len(self.durations)
        return round(mean * (self.total - self.done) / self.hosts, 1)

    def emit(self, event: str, **fields: Any) -> None:
        with self.lock:
            self.stream.write(self.format(event, fields) + "\n")
            self.stream.flush()

    def format(self, event: str, fields: dict[str, Any]) -> str:
        stamp = time.strftime("%H:%M:%S")
        if event == "done":
            why = f" ({fields['reason']})" if fields.get("reason") else ""
            eta = f", eta {fields['eta_s']:g} s" if fields.get("eta_s") is not None else ""
            return (
                f"{stamp} [{fields['progress']}] {fields['host']}: {fields['point']} "
                f"{fields['status']} in {fields['seconds']:.2f} s{why}{eta}"
            )
        if event == "point":
            return f"{stamp} {fields['host']}: running {fields['point']}"
        if event == "message":
            return f"{stamp} {fields['host']}: {fields['text']}"
        if event == "start":
            return (
                f"{stamp} campaign {fields['campaign']}: {fields['total']} runs to do on "
                f"{fields['hosts']} host(s), {fields['already_done']} already stored"
            )
        return f"{stamp} {event}: " + ", ".join(f"{k}={v}" for k, v in fields.items())


class JsonReporter(Reporter):
    """One JSON object per event on stdout (--json)."""

    def __init__(self, stream=None) -> None:
        super().__init__(stream or sys.stdout)

    def format(self, event: str, fields: dict[str, Any]) -> str:
        return json.dumps({"event": event, "ts": round(time.time(), 3), **fields}, default=str)


def escape(text: str) -> str:
    from rich.markup import escape as rich_escape

    return rich_escape(text)


class RichReporter(Reporter):
    """A live display: points done/total with ETA, and the current point of each host."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.console = Console(stderr=True)  # labels carry [params]: escape(), not markup
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=self.console,
            transient=False,
        )
        self.task: Any = None  # a rich TaskID once started
        self.host_tasks: dict[str, Any] = {}

    def start(self, campaign: str, total: int, hosts: int, skipped: int) -> None:
        self.total, self.hosts = total, max(1, hosts)
        self.progress.start()
        self.task = self.progress.add_task(f"{campaign} ({skipped} already stored)", total=total)

    def _host_task(self, host: str):
        if host not in self.host_tasks:
            self.host_tasks[host] = self.progress.add_task(f"  {host}", total=None)
        return self.host_tasks[host]

    def point_started(self, host: str, label: str) -> None:
        with self.lock:
            self.progress.update(self._host_task(host), description=f"  {host}: {escape(label)}")

    def point_done(self, host: str, label: str, status: str, reason: str, seconds: float) -> None:
        with self.lock:
            if status == "warmup":
                return
            self.done += 1
            self.progress.advance(self.task)
            if status != RunStatus.OK:
                self.console.print(
                    f"{host}: {escape(label)} [bold red]{status}[/] {escape(reason)}"
                )

    def message(self, host: str, text: str) -> None:
        with self.lock:
            self.console.print(f"{host}: {escape(text)}")

    def finish(self, summary: dict[str, Any]) -> None:
        with self.lock:
            self.progress.stop()
            counts = ", ".join(f"{k} {v}" for k, v in summary.get("statuses", {}).items())
            self.console.print(f"done: {counts or 'nothing to run'}")


def make_reporter(json_lines: bool = False, plain: bool = False) -> Reporter:
    if json_lines:
        return JsonReporter()
    if not plain and sys.stderr.isatty():
        return RichReporter()
    return Reporter()
