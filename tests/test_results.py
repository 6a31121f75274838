"""socketlab.results and `orchestrate compare` on real campaigns run here: the shipped quickstart
(A), and the quickstart trimmed to three points and built with -O0 (B, its ladder kernels
deliberately slower; sysbench is not built, so it is unchanged). Both run once per module.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
import yaml

from socketlab import results
from socketlab.cli import main
from socketlab.errors import StoreError
from socketlab.results import schema
from socketlab.store import Store
from tests.conftest import _knobs_locked
from tests.support.campaign import local_inventory
from tests.support.moto import aws_client, moto_server

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "experiments" / "quickstart.yaml"
#: the quickstart's ladder kernels this CPU runs: avx512-read needs AVX-512 F (the spec's
#: requires); without it A is the quickstart with the AVX2 kernel alone, so every test below
#: runs on every x86 machine, with the counts of the kernels it ran
KERNELS = (
    ["avx2-read", "avx512-read"]
    if "avx512f" in Path("/proc/cpuinfo").read_text()
    else ["avx2-read"]
)
K = len(KERNELS)
RUNS = K * 2 * 3 + 12  #: ladder: kernels x 2 sizes x 3 reps; sysbench: 4 points x 3 reps
#: the ladder points B keeps: every kernel at 16K (the 512K points stay A's alone)
B_LADDER = {"kernel": KERNELS, "size": ["16K"]}


def _run(spec: Path, results_dir: Path, inventory: Path) -> None:
    rc = main(
        ["run", str(spec), "--results", str(results_dir), "--inventory", str(inventory), "--plain"]
    )
    assert rc == 0


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A: experiments/quickstart.yaml as shipped; B: two ladder points and one sysbench point,
    the native build at -O0. Run under the shared kernel-knob lock (module fixtures come before
    the autouse one), so another session's knob test can't mark a run invalid."""
    root = tmp_path_factory.mktemp("results")
    inventory = local_inventory(root)
    doc = yaml.safe_load(QUICKSTART.read_text())
    ladder = doc["experiments"][0]
    if K == 1:  # no AVX-512 here: the quickstart with the AVX2 kernel alone
        ladder["sweep"]["matrix"]["kernel"] = KERNELS
        ladder.pop("requires", None)
    shipped = root / "quickstart.yaml"
    shipped.write_text(yaml.safe_dump(doc, sort_keys=False))
    doc["builds"]["native"]["flags"] = "-O0 -march=native"
    doc["experiments"][0]["sweep"]["matrix"] = B_LADDER
    doc["experiments"][1]["sweep"]["matrix"] = {"threads": [1], "prime": [2000]}
    slow = root / "quickstart-O0.yaml"
    slow.write_text(yaml.safe_dump(doc, sort_keys=False))
    with _knobs_locked(fcntl.LOCK_SH, "shared"):
        _run(shipped, root / "a", inventory)
        _run(slow, root / "b", inventory)
    return root


def _raw_metrics(store: Path) -> Counter:
    with sqlite3.connect(store) as db:
        return Counter(db.execute("SELECT run_key, name, value, unit, parser FROM metrics"))


def test_frames_are_typed_and_hold_every_stored_value_once(runs):
    res = results.load("quickstart", results=runs / "a")
    assert res.campaign == "quickstart" and len(res.runs) == RUNS
    for name, columns in (("runs", schema.RUNS), ("metrics", schema.METRICS)):
        frame = getattr(res, name)
        for col in columns:
            assert str(frame[col.name].dtype) == col.dtype, (name, col.name, frame[col.name].dtype)
    # parameters and dimensions typed by their values
    assert str(res.runs["kernel"].dtype) == "category"
    assert str(res.runs["threads"].dtype) == "Int64" and str(res.runs["prime"].dtype) == "Int64"
    assert str(res.metrics["dim.bytes_per_core"].dtype) == "Int64"
    ok = res.runs[res.runs["status"] == "ok"]
    assert (ok["finished"] > ok["started"]).all() and (ok["duration_s"] > 0).all()
    built = res.runs[res.runs["experiment"] == "ladder-read"]
    assert set(built["build_flags"]) == {"-O3 -march=native"} and built["compiler"].notna().all()
    assert res.runs.loc[res.runs["experiment"] == "sysbench-cpu", "build_name"].isna().all()
    # every value the store holds, once: the same multiset as its metrics table
    rows = Counter(
        zip(
            res.metrics["run_key"],
            res.metrics["metric"].astype(str),
            res.metrics["value"],
            res.metrics["unit"].astype(str),
            res.metrics["parser"].astype(str),
            strict=True,
        )
    )
    assert rows == _raw_metrics(res.store_path)
    # joined on demand: each value with its run's columns
    wide = res.metrics_with_runs()
    assert len(wide) == len(res.metrics) and wide["experiment"].notna().all()
    assert (wide["started"].notna()).all()


def test_sources_and_one_line_errors(runs, tmp_path):
    store = runs / "a" / "quickstart" / "store.sqlite"
    keys = set(results.load("quickstart", results=runs / "a").runs["run_key"])
    for source in (runs / "a", runs / "a" / "quickstart", store):
        assert set(results.load(source).runs["run_key"]) == keys
    with pytest.raises(StoreError, match="no such file or folder"):
        results.load(tmp_path / "nowhere")
    with pytest.raises(StoreError, match="no campaign 'nope'"):
        results.load("nope", results=runs / "a")
    with pytest.raises(StoreError, match="no such results folder"):
        results.load("quickstart", results=tmp_path / "missing")
    assert not (tmp_path / "missing").exists() and not (tmp_path / "nowhere").exists()
    Store(tmp_path / "empty" / "e" / "store.sqlite").close()  # a store that holds no runs
    with pytest.raises(StoreError, match="holds no runs"):
        results.load(tmp_path / "empty" / "e")
    two = tmp_path / "two"
    for name in ("x", "y"):
        shutil.copytree(runs / "a" / "quickstart", two / name)
    with pytest.raises(StoreError, match=r"2 campaigns \(x, y\); name one"):
        results.load(two)
    assert not results.load(two, campaign="y").runs.empty


def test_export_parquet_reads_back_equal(runs, tmp_path, capsys):
    res = results.load("quickstart", results=runs / "a")
    for table, frame in (("metrics", res.metrics_with_runs()), ("runs", res.runs)):
        out = tmp_path / f"{table}.parquet"
        assert (
            main(
                [
                    "export",
                    "quickstart",
                    "--results",
                    str(runs / "a"),
                    "--format",
                    "parquet",
                    "--table",
                    table,
                    "-o",
                    str(out),
                ]
            )
            == 0
        )
        back = pd.read_parquet(out)
        pd.testing.assert_frame_equal(back, frame)
    import pyarrow.parquet as pq

    arrow = pq.read_schema(tmp_path / "metrics.parquet")
    assert str(arrow.field("started").type) == "timestamp[ns, tz=UTC]"
    assert str(arrow.field("value").type) == "double"
    assert str(arrow.field("experiment").type).startswith("dictionary")
    # the CSV carries the run columns the issue found missing
    assert (
        main(["export", "quickstart", "--results", str(runs / "a"), "-o", str(tmp_path / "m.csv")])
        == 0
    )
    head = (tmp_path / "m.csv").read_text().splitlines()[0].split(",")
    assert {"started", "duration_s", "n_cpus", "build_name", "build_flags"} <= set(head)


def test_load_a_pushed_campaign_from_s3(runs, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIASOCKETLABRESULTS")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "results-api-test-secret")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    with moto_server(tmp_path) as server:
        aws_client(
            "s3", server.url, "AKIASOCKETLABRESULTS", "results-api-test-secret"
        ).create_bucket(Bucket="lab")
        assert (
            main(
                [
                    "push",
                    "quickstart",
                    "s3://lab/team",
                    "--results",
                    str(runs / "a"),
                    "--endpoint-url",
                    server.url,
                ]
            )
            == 0
        )
        remote = results.load("s3://lab/team/quickstart", endpoint_url=server.url)
        with pytest.raises(Exception, match="no results of campaign 'other'"):
            results.load("s3://lab/team/other", endpoint_url=server.url)
    local = results.load("quickstart", results=runs / "a")
    key = ["run_key", "metric", "value", "unit"]
    pd.testing.assert_frame_equal(
        remote.metrics[key].sort_values(key).reset_index(drop=True),
        local.metrics[key].sort_values(key).reset_index(drop=True),
        check_categorical=False,
    )
    assert set(remote.runs["run_key"]) == set(local.runs["run_key"])
    assert remote.runs["started"].equals(remote.runs["started"]) and remote.folder.is_dir()


def test_example_script_pivots_the_sweep_and_plots_it(runs, tmp_path):
    out = tmp_path / "sweep.png"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "docs" / "examples" / "sweep_plot.py"),
            str(runs / "a" / "quickstart"),
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    # the printed medians are the store's: bw_total (stat=median) of the runs stored ok
    with sqlite3.connect(runs / "a" / "quickstart" / "store.sqlite") as db:
        rows = db.execute(
            "SELECT r.params, m.value FROM metrics m JOIN runs r USING (run_key) "
            "WHERE m.name='bw_total' AND r.status='ok' AND m.dims LIKE "
            '\'%"stat": "median"%\''
        ).fetchall()
    values = {}
    for params, value in rows:
        p = json.loads(params)
        values.setdefault((p["size"], p["kernel"]), []).append(value)
    expected = {k: float(pd.Series(v).median()) for k, v in values.items()}
    assert len(expected) == 2 * K
    ladder = proc.stdout.split("sysbench:")[0]
    for (size, _), med in expected.items():
        line = next(x for x in ladder.splitlines() if x.startswith(size))
        assert f"{med:.2f}" in line, (line, med)


def _inside_same_band(x: dict) -> bool:
    """Whether a compared point's interval lies inside compare's "same" band (1 +- 5%)."""
    return bool(x["ci_low"]) and x["ci_low"] >= 0.95 and x["ci_high"] <= 1.05


def _compare_lines(argv: list[str], capsys) -> tuple[int, list[dict], str]:
    rc = main(["compare", *argv, "--json"])
    captured = capsys.readouterr()
    return rc, [json.loads(x) for x in captured.out.splitlines()], captured.err


def test_compare_names_the_slower_build_with_its_interval(runs, tmp_path, capsys):
    a, b = str(runs / "a" / "quickstart"), str(runs / "b" / "quickstart")
    rc, lines, _ = _compare_lines([a, b], capsys)
    assert rc == 0
    compared = [x for x in lines if x["verdict"] not in ("only in A", "only in B")]
    speed = [
        x for x in compared if x["experiment"] == "ladder-read" and x["metric"].startswith("bw_")
    ]
    assert len(speed) == 7 * K  # kernels x (bw_total x 3 stats + 4 per-core stats)
    for x in speed:
        assert x["n_a"] == x["n_b"] == 3 and x["ci_low"] <= x["ratio"] <= x["ci_high"]
        # avx2-read is intrinsics that -O0 spills around every load: ~8x slower on every CPU
        # it ran on, so "slower" whatever a shared VM's noise. avx512-read's timed loop is asm
        # (4 loads per 256 B); -O0 adds only the 4 zmm stores of its outputs: 2.35x slower on
        # the GNR guest (16K: 396 vs 167 GB/s), the same speed on the machine CI once ran on.
        # So its verdict is not asserted, only that it follows its interval (below)
        if x["kernel"] == "avx2-read":
            assert x["verdict"] == "slower" and x["ci_high"] < 0.95, x
    # sysbench is not built: the same program both times. Its peak memory is near-constant (it
    # read "same", 0.996x, in most runs, but an interval over 3 reps can cross the 5% band:
    # "inconclusive" then); its speed is whatever this shared machine gave. Neither may read
    # faster or slower on memory, and every verdict must follow its interval
    same = [
        x for x in compared if x["experiment"] == "sysbench-cpu" and x["metric"] == "peak_tree_rss"
    ]
    assert len(same) == 1 and same[0]["verdict"] in ("same", "inconclusive"), same
    # a campaign against itself: ratio 1 everywhere, never faster or slower; "same" where its
    # repetitions agree (the resampled interval of a noisy metric may still cross the band)
    rc, itself, _ = _compare_lines([a, a], capsys)
    verdicts = Counter(x["verdict"] for x in itself)
    assert rc == 0 and set(verdicts) <= {"same", "inconclusive"} and verdicts["same"], verdicts
    assert all(x["ratio"] == 1.0 for x in itself)
    for x in compared:
        assert (x["verdict"] == "same") == _inside_same_band(x), x
    sysbench = next(x for x in compared if x["metric"] == "events_per_second")
    with capsys.disabled():  # the figure this VM gave, for the record (-s)
        print(
            f"\nsysbench events/s B/A {sysbench['ratio']:.3f} ({sysbench['ci_low']:.3f}-"
            f"{sysbench['ci_high']:.3f}): {sysbench['verdict']}"
        )
    # points only A ran are listed: the 512K ladder points and three sysbench points
    only_a = [x for x in lines if x["verdict"] == "only in A"]
    assert {x["size"] for x in only_a if x["experiment"] == "ladder-read"} == {"512K"}
    assert {(x["threads"], x["prime"]) for x in only_a if x["experiment"] == "sysbench-cpu"} == {
        (1, 20000),
        (2, 2000),
        (2, 20000),
    }
    assert not [x for x in lines if x["verdict"] == "only in B"]

    # --fail-on slower: exit 1, naming every slower point
    rc = main(["compare", a, b, "--fail-on", "slower", "--metric", "bw_total"])
    out, err = capsys.readouterr()
    assert rc == 1
    named = [x for x in err.splitlines() if x.startswith("orchestrate: compare: slower: ")]
    assert 3 <= len(named) <= 3 * K and all("ladder-read" in x and "bw_total" in x for x in named)
    assert sum("kernel=avx2-read" in x for x in named) == 3  # each stat of the -O0 avx2 kernel
    assert "| slower |" in out and "## Only in A" in out
    # the HTML has the table and the plot
    html = tmp_path / "compare.html"
    assert main(["compare", a, b, "--format", "html", "-o", str(html)]) == 0
    page = html.read_text()
    assert page.count("data:image/png;base64,") == 1 and '<td class="slower">slower' in page


def test_compare_by_build_within_one_campaign(runs, tmp_path, capsys):
    """B's runs resumed into A's campaign (as `orchestrate run` does when the flags change):
    one store, two builds of the ladder; sysbench's key is the same, so it is A's alone."""
    mixed = tmp_path / "mixed"
    shutil.copytree(runs / "a", mixed)
    with sqlite3.connect(mixed / "quickstart" / "store.sqlite") as db:
        db.execute("ATTACH ? AS b", (str(runs / "b" / "quickstart" / "store.sqlite"),))
        db.execute("INSERT OR IGNORE INTO runs SELECT * FROM b.runs")
        db.execute(
            "INSERT INTO metrics SELECT * FROM b.metrics WHERE run_key IN "
            "(SELECT run_key FROM b.runs WHERE experiment = 'ladder-read')"
        )
    rc, lines, _ = _compare_lines(
        ["quickstart", "--results", str(mixed), "--by", "build", "--metric", "bw_total"], capsys
    )
    assert rc == 0
    compared = [x for x in lines if x["verdict"] not in ("only in A", "only in B")]
    assert len(compared) == 3 * K
    assert {x["verdict"] for x in compared if x["kernel"] == "avx2-read"} == {"slower"}
    for x in compared:  # avx512-read's verdict is the CPU's (the test above), not its interval
        assert (x["verdict"] == "same") == _inside_same_band(x), x
    assert compared[0]["a"].startswith("quickstart build native@")
    assert "(-O3 -march=native)" in compared[0]["a"] and "(-O0 -march=native)" in compared[0]["b"]
    rc = main(["compare", "quickstart", "--results", str(mixed), "--by", "host"])
    err = capsys.readouterr().err
    assert rc == 2 and "expected 2, or name two with --between" in err


def test_status_json(runs, capsys):
    assert main(["status", "quickstart", "--results", str(runs / "a"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["runs"] == RUNS and sum(doc["statuses"].values()) == RUNS
    assert {(e["experiment"], sum(e["statuses"].values())) for e in doc["experiments"]} == {
        ("ladder-read", 6 * K),
        ("sysbench-cpu", 12),
    }
    assert main(["status", "--results", str(runs / "a"), "--json"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert json.loads(line)["campaign"] == "quickstart"
