"""The controller's decisions (socketlab.tailor.controller), pure, on recorded topologies:
estimates, hysteresis, water-fill, and the sets' invariants (disjoint, compact, never
housekeeping)."""

from __future__ import annotations

import math
import random

import pytest

from socketlab.errors import PlanError
from socketlab.placement.isolation import plan_isolation
from socketlab.tailor.controller import (
    Estimator,
    EstimatorConfig,
    Tailor,
    demand_sample,
    percentile,
    universe_plan,
    water_fill,
)
from tests.fixtures.topology import topo


def test_percentile_is_nearest_rank():
    assert percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 90) == 9
    assert percentile([0.2, 5.0, 0.1], 90) == 5.0  # one spike in three samples is the p90
    assert percentile([3.0], 50) == 3.0


def test_estimate_headroom_tolerance_and_idle():
    cfg = EstimatorConfig(window=3, headroom=0.10, tolerance=0.15, shrink_after=2)
    e = Estimator(cfg)
    assert e.add(1.0) == 1  # 1.1 CPUs: the 0.1 above a whole CPU is within tolerance
    assert e.add(1.3) == 2  # 1.43 CPUs: a second core
    # Whole cores on an SMT host: 3 CPUs are 2 cores of 2 threads.
    smt = Estimator(cfg, threads_per_core=2)
    assert smt.add(3.0) == 2
    idle = Estimator(cfg)
    assert idle.add(0.05) == 0  # below idle_below: parked
    with pytest.raises(PlanError, match=">= 0"):
        idle.add(-0.5)


def test_hysteresis_grows_at_once_and_shrinks_after_holding():
    e = Estimator(EstimatorConfig(window=2, shrink_after=3, headroom=0.0))
    sizes = [e.add(x) for x in [4.0, 4.0, 1.0, 1.0, 1.0, 1.0, 1.0, 6.0]]
    # The window (2) forgets 4.0 after two samples of 1.0; the smaller estimate then has to
    # hold 3 samples; a jump up is taken on the sample that shows it.
    assert sizes == [4, 4, 4, 4, 4, 1, 1, 6]


def test_demand_sample_counts_waiting_threads():
    assert demand_sample(0.25, 1.0) == 1.0  # a busy thread that got a quarter of a CPU
    assert demand_sample(1.8, 1.0) == 1.8
    assert demand_sample(0.4) == 0.4
    with pytest.raises(PlanError):
        demand_sample(0.1, -1)


@pytest.mark.parametrize(
    "wants, capacity, expected",
    [
        ({"a": 2, "b": 3}, 8, {"a": 2, "b": 3}),  # fits: as asked
        ({"a": 6, "b": 2}, 4, {"a": 3, "b": 1}),  # 1 each, the other 2 by what is wanted beyond
        ({"a": 1, "b": 1, "c": 1}, 2, {"a": 1, "b": 1, "c": 0}),  # more than cores: c parked
        ({"a": 0, "b": 5}, 3, {"a": 0, "b": 3}),
    ],
)
def test_water_fill(wants, capacity, expected):
    got = water_fill(wants, capacity)
    assert got == expected
    assert sum(got.values()) <= capacity


def check_invariants(t: Tailor, assignment) -> None:
    hk = set(t.housekeeping)
    busy = {n: set(c) for n, c in assignment.sets.items() if n not in assignment.parked}
    for n, cpus in assignment.sets.items():
        assert not cpus or set(cpus) <= set(t.universe), n
        assert not set(cpus) & hk, f"{n} holds housekeeping CPUs"
    names = sorted(busy)
    for i, x in enumerate(names):
        for y in names[i + 1 :]:
            assert not busy[x] & busy[y], f"{x} and {y} overlap"
    for n, cpus in busy.items():
        assert len(cpus) == assignment.cores[n] * t.tpc


@pytest.mark.parametrize("name", ["c8i-metal-48xl", "genoa-1s-nps4", "two-socket"])
def test_random_demand_keeps_the_invariants(name):
    t_ = topo(name)
    tailor = Tailor(
        t_, plan_isolation(t_), ["w0", "w1", "w2", "w3"], EstimatorConfig(window=3, shrink_after=2)
    )
    check_invariants(tailor, tailor.start())
    rng = random.Random(name)
    changes = 0
    for _ in range(60):
        sample = {n: rng.choice([0.0, 0.5, 3.0, 9.0, 20.0]) for n in tailor.workloads}
        a = tailor.step(sample)
        changes += a.changed
        check_invariants(tailor, a)
    assert changes > 3  # the demand moved, so did the sets


def test_sets_are_llc_compact_and_disjoint_on_chiplets():
    # genoa-1s-nps1: one node, 12 CCDs of 16 CPUs; two workloads that each want a CCD's worth
    # get one CCD each under `isolate`.
    t_ = topo("genoa-1s-nps1")
    tailor = Tailor(t_, plan_isolation(t_), ["a", "b"], EstimatorConfig(window=1))
    a = tailor.step({"a": 14.0, "b": 14.0})  # x 1.1 headroom: 15.4 CPUs, 8 cores
    llc_of = {c.id: c.llc for c in t_.cpus}
    for n in ("a", "b"):
        assert len(a.sets[n]) == 16
        assert len({llc_of[c] for c in a.sets[n]}) == 1, n
    assert {llc_of[c] for c in a.sets["a"]} != {llc_of[c] for c in a.sets["b"]}


def test_parked_workload_gets_unheld_cpus_or_shares_the_last_core():
    t_ = topo("this-machine")  # 2 CPUs, no SMT
    tailor = Tailor(t_, universe_plan(t_, [0, 1]), ["a", "b"], EstimatorConfig(window=1))
    assert tailor.housekeeping == ()
    first = tailor.step({"a": 1.0, "b": 0.0})
    assert first.parked == ("b",) and first.sets == {"a": (0,), "b": (1,)}  # unheld CPU 1
    grown = tailor.step({"a": 2.0, "b": 0.0})
    assert grown.sets["a"] == (0, 1) and grown.sets["b"] == (1,)  # shares the last core
    assert grown.changed and not tailor.step({"a": 2.0, "b": 0.0}).changed


def test_spill_margin_widens_busy_sets_with_unheld_cpus():
    t_ = topo("xeon-6543p-b")
    cfg = EstimatorConfig(window=1, spill=2)
    tailor = Tailor(t_, plan_isolation(t_), ["a", "b"], cfg)
    a = tailor.step({"a": 2.0, "b": 2.0})
    own = math.ceil(2 / 1) * t_.threads_per_core
    for n in ("a", "b"):
        assert len(a.sets[n]) == own + 2
    shared = set(a.sets["a"]) & set(a.sets["b"])
    assert len(shared) == 2  # only the spill CPUs are shared


def test_bad_config_and_workloads():
    t_ = topo("xeon-6543p-b")
    iso = plan_isolation(t_)
    with pytest.raises(PlanError, match="window: expected >= 1"):
        Tailor(t_, iso, ["a"], EstimatorConfig(window=0))
    with pytest.raises(PlanError, match="each named once"):
        Tailor(t_, iso, ["a", "a"])
    with pytest.raises(PlanError, match="--cpus: expected online CPUs"):
        universe_plan(t_, [999])
    with pytest.raises(PlanError, match="no sample for workload 'b'"):
        Tailor(t_, iso, ["a", "b"]).step({"a": 1.0})
