"""The results store: one transaction per run, resume by key, metric rows with provenance."""

from __future__ import annotations

import sqlite3
import threading

import pytest

from socketlab.errors import StoreError
from socketlab.parse import Metric, parse_output
from socketlab.spec.points import ParserSpec
from socketlab.store import RunRecord, Store, store_path


def record(key: str, status: str = "ok", **params) -> RunRecord:
    return RunRecord(
        run_key=key,
        campaign="c1",
        experiment="exp",
        host="h1",
        repetition=0,
        params=params or {"size": "16K", "threads": 2},
        status=status,
    )


def test_store_is_wal_and_holds_run_and_metrics(tmp_path):
    path = store_path("c1", tmp_path)
    with Store(path) as store:
        store.add_run(record("k1"), [Metric("bw", 12.5, "GB/s", {"cpu": 3}, "jsonl/1")])
        assert store.has_complete("k1")
        assert not store.has_complete("missing")
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    rows = raw.execute("SELECT run_key, name, value, unit, dims, parser FROM metrics").fetchall()
    assert rows == [("k1", "bw", 12.5, "GB/s", '{"cpu": 3}', "jsonl/1")]


def test_a_failing_metric_rolls_back_the_whole_run(tmp_path):
    with Store(tmp_path / "s.sqlite") as store:
        bad = Metric("bw", "not a number", "GB/s")  # float() fails before the transaction
        with pytest.raises(ValueError):
            store.add_run(record("k1"), [Metric("ok", 1.0, "s"), bad])
        assert store.status_of("k1") is None
        # unit NULL violates NOT NULL in the metric insert: after the run row is written
        with pytest.raises(sqlite3.IntegrityError):
            store.add_run(record("k1"), [Metric("ok", 1.0, "s"), Metric("bw", 2.0, None)])
        assert store.status_of("k1") is None
        assert store.metric_count() == 0
        store.add_run(record("k1"), [Metric("ok", 1.0, "s")])  # the store is usable after it
        assert store.status_of("k1") == "ok" and store.metric_count() == 1


def test_rerun_replaces_the_attempt_and_its_metrics(tmp_path):
    with Store(tmp_path / "s.sqlite") as store:
        store.add_run(record("k1", status="failed"), [Metric("bw", 1.0, "GB/s")])
        store.add_run(record("k1"), [Metric("bw", 2.0, "GB/s"), Metric("lat", 3.0, "ns")])
        (run,) = store.runs("c1")
        assert run.status == "ok" and run.attempts == 2
        frame = store.metrics_frame("c1")
        assert sorted(frame["value"]) == [2.0, 3.0]


def test_metrics_frame_has_a_column_per_parameter_and_dimension(tmp_path):
    with Store(tmp_path / "s.sqlite") as store:
        store.add_run(record("k1", size="16K", threads=1), [Metric("bw", 1.0, "GB/s", {"cpu": 0})])
        store.add_run(record("k2", size="1M", threads=2), [Metric("bw", 2.0, "GB/s", {"cpu": 1})])
        store.add_run(record("k3", status="timeout", size="1M", threads=4), [])
        frame = store.metrics_frame("c1")
        for column in (
            "run_key",
            "campaign",
            "experiment",
            "host",
            "repetition",
            "status",
            "metric",
            "value",
            "unit",
            "parser",
            "size",
            "threads",
            "dim.cpu",
        ):
            assert column in frame.columns
        assert list(frame.sort_values("value")["size"]) == ["16K", "1M"]
        assert store.statuses("c1") == {"k1": "ok", "k2": "ok", "k3": "timeout"}


def test_parsers_feed_the_store_with_their_version(tmp_path):
    stdout = (
        'banner line\n{"type":"meta","binary":"x"}\n'
        '{"type":"metric","name":"bw_total","value":97.3,"unit":"GB/s","kernel":"load"}\n'
        "    events per second:  4468.12\n"
    )
    parsers = (
        ParserSpec("jsonl"),
        ParserSpec(
            "regex", {"eps": {"pattern": r"events per second:\s+(?P<value>[\d.]+)", "unit": "1/s"}}
        ),
    )
    parsed = parse_output(parsers, stdout)
    assert parsed.errors == []
    assert parsed.meta == [{"type": "meta", "binary": "x"}]
    assert [(m.name, m.value, m.unit, m.dims, m.parser) for m in parsed.metrics] == [
        ("bw_total", 97.3, "GB/s", {"kernel": "load"}, "jsonl/1"),
        ("eps", 4468.12, "1/s", {}, "regex/1"),
    ]
    with Store(tmp_path / "s.sqlite") as store:
        store.add_run(record("k1"), parsed.metrics)
        assert set(store.metrics_frame("c1")["parser"]) == {"jsonl/1", "regex/1"}


def test_malformed_metric_records_are_reported_not_stored():
    bad = '{"type":"metric","name":"x","value":"fast","unit":"s"}\n{"type":"metric","value":1}\n'
    parsed = parse_output((ParserSpec("jsonl"),), bad)
    assert parsed.metrics == []
    assert len(parsed.errors) == 2 and "not a number" in parsed.errors[0]


def test_threads_can_share_a_store(tmp_path):
    with Store(tmp_path / "s.sqlite") as store:

        def write(host: str) -> None:
            for i in range(50):
                store.add_run(record(f"{host}-{i}"), [Metric("m", float(i), "s")])

        threads = [threading.Thread(target=write, args=(h,)) for h in ("a", "b", "c")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(store.runs("c1")) == 150
        assert store.metric_count("c1") == 150


def test_missing_store_is_a_user_error(tmp_path):
    with pytest.raises(StoreError, match="no results store"):
        Store(tmp_path / "nope" / "store.sqlite", create=False)
    (tmp_path / "junk.sqlite").write_text("this is not sqlite " * 100)
    with pytest.raises(StoreError, match="not a usable results store"):
        Store(tmp_path / "junk.sqlite")


def _requests(n: int):
    from socketlab.serve.records import RequestRecord

    return [
        RequestRecord(index=i, phase="measured", events=[[i, 1]], status="ok") for i in range(n)
    ]


def test_serving_requests_are_stored_with_their_run_in_one_transaction(tmp_path):
    from socketlab.serve.requests_store import load_requests

    path = tmp_path / "s.sqlite"
    with Store(path) as store:
        store.add_run(
            record("k1"),
            [Metric("bw", 1.0, "GB/s")],
            requests=[("c1", _requests(3)), ("c2", _requests(1))],
        )
        # a duplicate request index fails inside the transaction: no run, no requests
        dup = _requests(2) + _requests(1)
        with pytest.raises(sqlite3.IntegrityError):
            store.add_run(record("k2"), [Metric("bw", 1.0, "GB/s")], requests=[("c1", dup)])
        assert store.status_of("k2") is None
        # a rerun replaces the levels it brings
        store.add_run(record("k1"), [], requests=[("c1", _requests(2))])
    got = load_requests(path)
    assert sorted((k, level, len(v)) for (k, level), v in got.items()) == [
        ("k1", "c1", 2),
        ("k1", "c2", 1),
    ]
    raw = sqlite3.connect(path)
    count = "SELECT count(*) FROM serve_requests WHERE run_key = 'k2'"
    assert raw.execute(count).fetchone() == (0,)
    assert raw.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("2",)


def test_a_version_1_store_gains_serve_requests_under_version_2(tmp_path):
    path = tmp_path / "old.sqlite"
    raw = sqlite3.connect(path)
    raw.executescript(
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "INSERT INTO meta VALUES ('schema_version', '1');"
    )
    raw.close()
    with Store(path) as store:
        store.add_run(record("k1"), [], requests=[("c1", _requests(1))])
        assert [r["idx"] for r in store.request_rows("c1")] == [0]
    with sqlite3.connect(path) as again:
        assert again.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (
            "2",
        )
