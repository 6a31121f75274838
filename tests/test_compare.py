"""The comparison verdicts, fed through the real store with c8i-shaped recorded outputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from socketlab.report.compare import (
    CHAIN_STATISTICS,
    DEVIATES,
    DISPUTED,
    INCONCLUSIVE,
    NOT_COMPARABLE,
    NOT_RUN,
    REPRODUCED,
    compare,
    convert,
    host_difference,
    short_model,
)
from socketlab.report.published import load_published
from socketlab.store import Store
from tests.published.c8i_fixture import CHAIN_REPS, fill_store, topology_facts

REAL = Path(__file__).resolve().parents[1] / "experiments" / "published" / "sram-oct-2026.yaml"
CAMPAIGN = "campaign-oct"


@pytest.fixture(scope="module")
def published():
    return load_published(REAL)


@pytest.fixture(scope="module")
def c8i():
    return {"topology": topology_facts("c8i-metal-48xl")}


def _rows(tmp_path, published, hosts, profile=None, **kw):
    with Store(tmp_path / "store.sqlite") as store:
        runs = fill_store(store, published, CAMPAIGN, **kw)
        frame = store.metrics_frame(CAMPAIGN)
    return compare(published, frame, hosts, runs=runs, profile=profile)


def test_c8i_fixtures_reproduce_every_measured_cell(tmp_path, published, c8i):
    rows = _rows(tmp_path, published, {"c8i": c8i})
    assert len(rows) == len(published.cells)
    measured = [r for r in rows if r.cell.experiment and not r.cell.unmeasured]
    assert len(measured) > 100
    # a disputed published figure never reads reproduced or deviates, even on the c8i
    disputed = [r for r in measured if r.cell.disputed]
    assert [r.cell.id for r in disputed] == ["compute/avx512-bf16-compute/flops_per_core"]
    assert all(r.kind == DISPUTED for r in disputed)
    measured = [r for r in measured if not r.cell.disputed]
    bad = [(r.cell.id, r.verdict) for r in measured if r.kind != REPRODUCED]
    assert bad == []
    chained = {
        (c.experiment, str(c.join_params()))
        for c in published.cells
        if c.statistic in CHAIN_STATISTICS
    }  # a chain's group runs CHAIN_REPS times
    for r in measured:
        # warm-ups, failed runs and stat summaries are not counted
        want = CHAIN_REPS if (r.cell.experiment, str(r.cell.join_params())) in chained else 3
        assert r.measured.n == want, r.cell.id
        assert r.verdict.startswith("reproduced within tolerance")
    for r in rows:
        if r.cell.unmeasured:
            assert r.kind == NOT_RUN and r.verdict == f"not run: {r.cell.unmeasured}"
    # µs per token is step p50 / B; TB/s cells were stored in GB/s by the ladder and converted
    tok = next(r for r in rows if r.cell.id == "batching/e2b-l0-2k-b16-amx/us_per_token")
    assert tok.measured.median == pytest.approx(13.3, rel=0.02)
    fast = next(r for r in rows if r.cell.id == "fast-tier/mib-64/bw_total")
    assert fast.measured.unit == "TB/s" and fast.measured.median == pytest.approx(0.657, rel=0.02)


def test_one_value_moved_20_percent_deviates(tmp_path, published, c8i):
    target = "ladder/l2-1.5-4k-read/bw_total"
    rows = _rows(tmp_path, published, {"c8i": c8i}, shift={target: 1.2})
    by_id = {r.cell.id: r for r in rows}
    moved = by_id[target]
    assert moved.kind == DEVIATES
    assert moved.ratio == pytest.approx(1.2, rel=0.02)
    assert moved.verdict == f"deviates: {moved.ratio:.2f}x of published (±5%, better)"
    assert "better" in moved.verdict  # higher is better for bandwidth
    others = [
        r
        for r in rows
        if r.cell.experiment and not r.cell.unmeasured and r is not moved and not r.cell.disputed
    ]
    assert all(r.kind == REPRODUCED for r in others)
    # and down 20% on a lower-is-better cell is "better"
    rows = _rows(
        tmp_path / "b", published, {"c8i": c8i}, shift={"exchange/n96-diss/exchange_p50": 0.8}
    )
    r = next(r for r in rows if r.cell.id == "exchange/n96-diss/exchange_p50")
    assert r.kind == DEVIATES and r.verdict.endswith(", better)")


def test_conditions_are_checked_where_both_sides_record_them(tmp_path, published, c8i):
    """The fixtures record what the binaries record (threads, participants, seconds, iters,
    kv_bytes, ...): each published condition a run records is compared with it."""
    rows = _rows(tmp_path, published, {"c8i": c8i})
    meta = {r["run_key"]: r["meta"] for r in fill_store(Store(":memory:"), published, CAMPAIGN)}
    from socketlab.report.compare import condition_differences

    checked = set()
    with Store(tmp_path / "store.sqlite", create=False) as store:
        records = store.metrics_frame(CAMPAIGN).to_dict("records")
    for r in rows:
        if r.kind != REPRODUCED:
            continue
        counted = [
            x
            for x in records
            if x["experiment"] == r.cell.experiment
            and x["metric"] == r.cell.metric
            and x["repetition"] >= 0
            and x["status"] == "ok"
            and x.get("dim.stat") != "best"
        ]
        for key in r.cell.conditions:
            value = r.cell.conditions[key]
            other = value * 2 + 1 if isinstance(value, int | float) else f"{value}-other"
            moved = dict(r.cell.conditions, **{key: other})
            cell = type(r.cell)(**{**r.cell.__dict__, "conditions": moved})
            if condition_differences(cell, counted, meta):
                checked.add(key)
    # the conditions of the measured tables that the native binaries record
    assert {
        "workers",
        "participants",
        "duration_s",
        "steps",
        "reps",
        "vector_bytes",
        "tile_kib",
        "kv_mib",
        "mib_per_core",
        "pages",
        "kernel",
        "load",
    } <= checked, checked


def test_a_condition_that_differs_is_not_comparable(tmp_path, published, c8i):
    """The c8i, but 93 workers (say 1 housekeeping core per node): every cell whose published
    conditions say 90 workers is not comparable, naming the condition; exchanges (participants,
    not workers) still reproduce."""
    rows = _rows(tmp_path, published, {"c8i": c8i}, recorded={"threads": 93, "workers": 93})
    by_id = {r.cell.id: r for r in rows}
    for cell_id in (
        "ladder/l2-1.5-4k-read/bw_total",
        "compute/amx-bf16-compute/flops_per_core",
        "batching/e2b-l0-2k-b16-amx/us_per_token",
        "tile-balance/e2b-l0-amx/bytes_max_over_mean",
        "clocks/avx512-bf16-gemv/busy_mhz_mean",
        "kv-stream/e2b-l4-8k/kv_read_bandwidth",
    ):
        r = by_id[cell_id]
        assert (r.kind, r.verdict) == (
            NOT_COMPARABLE,
            "not comparable: conditions differ: workers 93 vs 90",
        )
        assert r.ratio is None and r.measured is not None
    assert by_id["exchange/n96-diss/exchange_p50"].kind == REPRODUCED
    measured = [r for r in rows if r.measured is not None]
    workers = [
        r for r in measured if r.cell.conditions.get("workers") == 90 and not r.cell.disputed
    ]
    assert workers and all(r.kind == NOT_COMPARABLE for r in workers)
    assert all(
        r.kind == REPRODUCED
        for r in measured
        if "workers" not in r.cell.conditions and not r.cell.disputed
    )


def test_a_shorter_profile_is_named(tmp_path, published, c8i):
    """campaign-oct's quick profile on the c8i: 0.2 s per ladder rep, 2,000 exchange iterations,
    fewer repetitions. Those cells name the profile and what it shortened; cells whose published
    conditions say nothing of durations still compare."""
    rows = _rows(
        tmp_path,
        published,
        {"c8i": c8i},
        profile="quick",
        repetitions=2,
        recorded={"seconds": 0.2, "iters": 2000},
    )
    by_id = {r.cell.id: r for r in rows}
    assert by_id["ladder/l2-1.5-4k-read/bw_total"].verdict == (
        "not comparable: profile quick: 0.2 s per rep vs 2 s, 2 reps vs 3 published"
    )
    assert by_id["clocks/avx512-bf16-gemv/busy_mhz_mean"].verdict == (
        "not comparable: profile quick: 0.2 s per rep vs 10 s published"
    )
    assert by_id["exchange/n96-diss/exchange_p50"].verdict == (
        "not comparable: profile quick: 2,000 steps vs 20,000, 2 reps vs 3 published"
    )
    assert by_id["kv-stream/e2b-l4-8k/kv_read_bandwidth"].verdict == (
        "not comparable: profile quick: 2 reps vs 3 published"
    )
    # published with 2 reps and no duration: the quick runs match what was published
    assert by_id["batching/e2b-l0-2k-b16-amx/us_per_token"].kind == REPRODUCED
    # published without reps: 2 are too few for a verdict (the median's interval covers it 50%)
    tile = by_id["tile-balance/e2b-l0-amx/bytes_max_over_mean"]
    assert (
        tile.kind == INCONCLUSIVE
        and "; too few reps: 2 (a verdict needs 3: the median's interval from 2 covers it with 50%)"
        in tile.verdict
    )
    # without a profile the same differences are plain conditions
    rows = _rows(tmp_path / "b", published, {"c8i": c8i}, recorded={"seconds": 0.2})
    r = next(r for r in rows if r.cell.id == "ladder/l2-1.5-4k-read/bw_total")
    assert r.verdict == "not comparable: conditions differ: duration_s 0.2 vs 2"


def test_other_host_is_not_comparable_and_names_the_difference(tmp_path, published):
    """An AMD host (the recorded Zen 5 facts, whatever CPU runs the test): per-core cells say the
    core class differs, socket-level cells name the host difference, AMX cells are not run."""
    here = {"topology": topology_facts("this-machine")}
    rows = _rows(tmp_path, published, {"vm": here}, host="vm")
    measured = [r for r in rows if r.measured is not None]
    assert measured
    flags = set(here["topology"]["flags"])
    per_core = 0
    for r in rows:
        if r.cell.unmeasured:
            assert r.kind == NOT_RUN
        elif set(r.cell.requires) - flags:
            missing = sorted(set(r.cell.requires) - flags)
            assert (
                r.verdict.endswith(f"not run: host lacks {', '.join(missing)}")
                or r.verdict == f"not run: host lacks {', '.join(missing)}"
            )
        elif r.cell.disputed:
            assert r.kind == DISPUTED and "here: not comparable: core class differs" in r.verdict
        elif r.cell.per_core is not None:
            per_core += 1
            assert (r.kind, r.verdict) == (
                NOT_COMPARABLE,
                "not comparable: core class differs (AMD EPYC vs Intel Xeon 6975P-C)",
            )
        else:
            assert r.kind == NOT_COMPARABLE
            assert r.verdict == (
                "not comparable: host is AMD EPYC (2 cores), "
                "published host is Xeon 6975P-C (96 cores)"
            )
    assert per_core >= 16  # the L2 ladder, per-core L2 and latency cells without AMX
    amx = next(r for r in rows if r.cell.id == "ladder/l2-1.0-thp-amx/bw_total")
    assert amx.verdict == "not run: host lacks amx_bf16"


def test_not_run_reasons(tmp_path, published, c8i):
    # no runs at all, a planner skip, and a parameter nobody ran
    rows = compare(published, [], {"c8i": c8i}, skips=[("c8i", "kvstream", "dropped by profile")])
    by_id = {r.cell.id: r for r in rows}
    assert by_id["kv-stream/e2b-l4-2k/attention_us"].verdict == "not run: dropped by profile"
    assert by_id["ladder/l2-1.0-thp-read/bw_total"].verdict == (
        "not run: no ladder run with kernel=avx512-read, pages=thp, mib_per_core=1.0 "
        "reported bw_total"
    )
    assert all(r.kind == NOT_RUN for r in rows if not r.cell.disputed)
    disputed = by_id["compute/avx512-bf16-compute/flops_per_core"]
    assert disputed.kind == DISPUTED and "; here: not run: no compute run" in disputed.verdict
    # no hosts at all
    rows = compare(published, [], {})
    assert {r.host for r in rows} == {None}


def test_units_and_models():
    assert convert(1500, "GB/s", "TB/s") == pytest.approx(1.5)
    assert convert(2.0, "us", "ns") == pytest.approx(2000)
    assert convert(3270, "GFLOP/s", "Tflop/s") == pytest.approx(3.27)
    assert convert(1, "GB/s", "us") is None
    assert short_model("INTEL(R) XEON(R) 6975P-C") == "XEON 6975P-C"
    assert short_model("AMD EPYC 9R14 96-Core Processor") == "AMD EPYC 9R14"
    pub_host = {"model": "Intel Xeon 6975P-C", "cores": 96}
    assert host_difference(pub_host, {"cpu_model": "Intel(R) Xeon(R) 6975P-C", "cores": 96}) is None
    assert host_difference(pub_host, {"cpu_model": "Intel(R) Xeon(R) 6975P-C", "cores": 48}) == (
        "host is Xeon 6975P-C (48 cores), published host is Xeon 6975P-C (96 cores)"
    )


EDGE = """\
format: socketlab.published/1
id: edge
title: verdict edge cases
campaign: edge
host: {model: Intel Xeon 6975P-C, cores: 96}
tables:
  - id: t
    title: t
    source: "seed 000"
    experiment: e
    join: [mode]
    columns:
      bw: {unit: GB/s, better: higher}
      lat: {unit: us, better: lower}
      irq: {unit: 1/s, better: lower, tolerance: {rel: 0.2, abs: 1}}
      frac: {unit: fraction, better: none, tolerance: {abs: 0.01}}
    rows:
      - {id: zero, conditions: {mode: zero}, values: {lat: 0}}
      - {id: zero-abs, conditions: {mode: zero-abs}, values: {irq: 0}}
      - {id: samples, conditions: {mode: samples}, values: {lat: {samples: [1, 2, 3, 10]}}}
      - {id: range, conditions: {mode: range}, values: {bw: {range: [100, 200]}}}
      - {id: none, conditions: {mode: none}, values: {frac: 0.5}}
"""


def test_verdict_edge_cases(tmp_path, c8i):
    """Zero published values, samples without a value, ranges, OR-ed tolerances, better: none."""
    path = tmp_path / "edge.yaml"
    path.write_text(EDGE)
    pub = load_published(path)
    assert pub.table("t").cell("samples", "lat").reference == 2.5  # the median of 4 samples

    def verdicts(measured: dict[tuple[str, str], float]) -> dict[str, str]:
        units = {"bw": "GB/s", "lat": "us", "irq": "1/s", "frac": "fraction"}
        # three repetitions each (a verdict needs 3: socketlab.report.interval.MIN_REPS)
        recs = [
            {
                "experiment": "e",
                "host": "c8i",
                "metric": m,
                "value": v,
                "unit": units[m],
                "mode": case,
                "status": "ok",
                "run_key": f"{case}-{rep}",
            }
            for (case, m), v in measured.items()
            for rep in range(3)
        ]
        return {r.cell.row: r.verdict for r in compare(pub, recs, {"c8i": c8i})}

    v = verdicts(
        {
            ("zero", "lat"): 0.0,
            ("zero-abs", "irq"): 0.9,
            ("samples", "lat"): 2.6,
            ("range", "bw"): 209.0,
            ("none", "frac"): 0.509,
        }
    )
    assert v == {
        "zero": "reproduced within tolerance (±5%)",
        "zero-abs": "reproduced within tolerance (±20% or ±1)",  # 0.9 is within ±1 of 0
        "samples": "reproduced within tolerance (±5%)",  # 2.6 vs the median 2.5
        "range": "reproduced within tolerance (±5%)",  # 209 is within 5% of the range's top
        "none": "reproduced within tolerance (±0.01)",
    }
    v = verdicts(
        {
            ("zero", "lat"): 0.3,
            ("zero-abs", "irq"): 1.5,
            ("samples", "lat"): 3.0,
            ("range", "bw"): 90.0,
            ("none", "frac"): 0.52,
        }
    )
    assert v == {
        # no ratio to a published 0: the verdict says both numbers, never "infx"
        "zero": "deviates: 0.3 against a published 0 (±5%, worse)",
        "zero-abs": "deviates: 1.5 against a published 0 (±20% or ±1, worse)",
        "samples": "deviates: 1.20x of published (±5%, worse)",
        "range": "deviates: 0.60x of published (±5%, worse)",  # against the range's middle
        "none": "deviates: 1.04x of published (±0.01)",  # no better/worse without a direction
    }
    rows = compare(
        pub,
        [
            {
                "experiment": "e",
                "host": "c8i",
                "metric": "lat",
                "value": 0.3,
                "unit": "us",
                "mode": "zero",
                "status": "ok",
            }
        ],
        {"c8i": c8i},
    )
    one = next(r for r in rows if r.cell.row == "zero")
    assert one.ratio is None  # and one value is not a verdict:
    assert one.verdict == (
        "inconclusive: 0.3 against a published 0 (±5%, worse); too few reps: "
        "1 (a verdict needs 3: the median's interval from 1 covers it with 0%)"
    )


def test_chain_cells_take_the_runs_in_repetition_order(tmp_path, published, c8i):
    """A stability chain's first / last run and drift (mean of the last quarter over the first
    quarter's) come from the runs in repetition order, however the store returns them."""
    with Store(tmp_path / "store.sqlite") as store:
        runs = fill_store(store, published, CAMPAIGN)
        frame = store.metrics_frame(CAMPAIGN)
    rows = compare(published, frame.sample(frac=1, random_state=3), {"c8i": c8i}, runs=runs)
    chain = {r.cell.id: r for r in rows if r.cell.table.startswith("stability-chain")}
    assert chain["stability-chain/stab3-p50/first"].measured.median == pytest.approx(1294.0)
    assert chain["stability-chain/stab3-p50/last"].measured.median == pytest.approx(1336.9)
    assert chain["stability-chain/p6-12b/drift"].measured.median == pytest.approx(1.049)
    assert chain["stability-chain-p99/stab3-p99/drift"].measured.median == pytest.approx(1.047)
    assert chain["stability-chain/p6-26b/first"].kind == NOT_RUN
    judged = [r for r in chain.values() if not r.cell.unmeasured]
    assert len(judged) == 16 and all(r.kind == REPRODUCED for r in judged), [
        (r.cell.id, r.verdict) for r in judged if r.kind != REPRODUCED
    ]
    drift = chain["stability-chain/stab3-p50/drift"]
    assert drift.measured.n == CHAIN_REPS and drift.measured.unit == "ratio"
