"""The runner's parts that touch no host: the verdict (socketlab.runner.judge, pure) and the
`together` synchroniser (socketlab.runner.groups) with real threads and a real store."""

from __future__ import annotations

import threading
import time

import pytest

from socketlab.errors import HostError
from socketlab.parse import Metric
from socketlab.runkinds import Outcome
from socketlab.runner.groups import GroupSync
from socketlab.runner.judge import Collected, judge
from socketlab.runner.stop import StopFlag
from socketlab.spec.points import RunPoint
from socketlab.store import Store
from socketlab.store.status import RunStatus

BEFORE = {"thp": "madvise", "isolated": "2-3"}


def metric(name: str) -> Metric:
    return Metric(name, 1.0, "1", {}, "jsonl/1")


def test_an_ok_run_with_its_metrics_and_a_still_host_stays_ok():
    out = Outcome(metrics=[metric("bw")])
    assert judge(out, BEFORE, dict(BEFORE), Collected([metric("irqs")]), ["bw", "irqs"]) == (
        RunStatus.OK,
        "",
    )


def test_a_missing_metric_fails_naming_it_and_a_collector_metric_counts():
    out = Outcome(metrics=[metric("bw")])
    verdict = judge(out, BEFORE, BEFORE, Collected(), ["bw", "irqs", "lat"])
    assert verdict == (RunStatus.FAILED, "required metrics missing: irqs, lat")
    assert (
        judge(
            out, BEFORE, BEFORE, Collected([metric("irqs"), metric("lat")]), ["bw", "irqs", "lat"]
        ).status
        == RunStatus.OK
    )


def test_drift_makes_a_run_invalid_and_keeps_the_kinds_reason():
    after = {**BEFORE, "thp": "always"}
    assert judge(Outcome(), BEFORE, after, Collected()) == (
        RunStatus.INVALID,
        "host state drifted during the run: thp: madvise -> always",
    )
    said = Outcome(status=RunStatus.INVALID, reason="server restarted")
    assert judge(said, BEFORE, after, Collected()).reason == (
        "server restarted; host state drifted during the run: thp: madvise -> always"
    )
    # a run that failed on its own stays failed: drift does not hide why
    failed = Outcome(status=RunStatus.FAILED, reason="exit code 1")
    assert judge(failed, BEFORE, after, Collected()) == (RunStatus.FAILED, "exit code 1")


def test_a_broken_collector_fails_an_ok_run_naming_it():
    verdict = judge(Outcome(), BEFORE, BEFORE, Collected(broken={"perf_stat": "no PMU"}))
    assert verdict == (RunStatus.FAILED, "collector failed: perf_stat: no PMU")
    timeout = Outcome(status=RunStatus.TIMEOUT, reason="killed after 1 s")
    assert judge(timeout, BEFORE, BEFORE, Collected(broken={"x": "y"})).status == "timeout"


def _point(host: str, together: str | None = "g") -> RunPoint:
    return RunPoint(
        "c", "e", host, {"n": 1}, 0, ("true",), extra={"together": together} if together else {}
    )


def _groups(tmp_path, points: list[RunPoint], wait_s: float = 30.0) -> GroupSync:
    hosts = sorted({p.host for p in points})
    groups = GroupSync(
        campaign="c",
        points=points,
        hosts=hosts,
        store=Store(tmp_path / "s.sqlite"),
        stop=StopFlag(),
        wait_s=wait_s,
    )
    groups.plan({h: [(p, f"k-{h}") for p in points if p.host == h] for h in hosts})
    return groups


def test_together_hosts_start_at_one_moment(tmp_path):
    points = [_point(h) for h in ("a", "b", "c")]
    groups = _groups(tmp_path, points)
    met: dict[str, float] = {}

    def host(point: RunPoint, delay: float) -> None:
        time.sleep(delay)
        groups.meet(point)
        met[point.host] = time.monotonic()

    delays = (0, 0.3, 0.6)
    threads = [
        threading.Thread(target=host, args=(p, d)) for p, d in zip(points, delays, strict=True)
    ]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(met) == ["a", "b", "c"]
    assert min(met.values()) - started >= 0.6  # nobody went before the last one came
    assert max(met.values()) - min(met.values()) < 0.2


def test_a_host_that_ends_releases_its_group_with_the_reason(tmp_path):
    point, other = _point("a"), _point("b")
    groups = _groups(tmp_path, [point, other])
    threading.Timer(0.3, groups.host_ended, args=("b",)).start()
    with pytest.raises(HostError, match="together group 'g': not every host"):
        groups.meet(point)


def test_a_point_without_a_group_never_waits(tmp_path):
    groups = _groups(tmp_path, [_point("a", None), _point("b", None)], wait_s=0.01)
    started = time.monotonic()
    groups.meet(_point("a", None))
    assert time.monotonic() - started < 0.1
