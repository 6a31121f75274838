"""The locality-aware CPU-set planner (socketlab.placement.cpuset) on the recorded topologies, and
`orchestrate cpuset` run as the real CLI (shared/reference/isolation.md §9.3-9.6)."""

from __future__ import annotations

import copy
import itertools
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from socketlab.cpulist import format_cpulist, parse_cpulist
from socketlab.errors import PlanError
from socketlab.placement.cpuset import (
    Job,
    make_view,
    node_distances,
    plan_jobs,
    take_distributed,
    take_packed,
)
from socketlab.placement.isolation import plan_isolation
from socketlab.topology import Topology, read_topology, topology_from_snapshot
from tests.fixtures.topology import FIXTURES, snapshot, topo

ORCHESTRATE = str(Path(sys.executable).parent / "orchestrate")
C8I = str(FIXTURES / "c8i-metal-48xl.json")


def chiplet() -> Topology:
    """c8i with its L3 cut into 12 LLCs of 8 cores (an EPYC-like chiplet layout), so the LLC
    level is finer than NUMA: 4 LLCs per node."""
    s = copy.deepcopy(snapshot("c8i-metal-48xl"))
    for rec in s["cpus"].values():
        llc = int(rec["core_id"]) // 8
        rec["cache"]["index3"]["id"] = str(llc)
        rec["cache"]["index3"]["shared_cpu_list"] = format_cpulist(
            c for c in range(192) if (c % 96) // 8 == llc
        )
    s["hostname"] = "chiplet"
    return topology_from_snapshot(s)


def with_hugepages(name: str, pages: dict[int, int]) -> Topology:
    s = copy.deepcopy(snapshot(name))
    for node, count in pages.items():
        s["nodes"][str(node)]["hugepages_2m"] = str(count)
    return topology_from_snapshot(s)


def jobs_of(plan) -> dict[str, str]:
    return {p.job.name: format_cpulist(p.cpus) for p in plan.placements}


# -- §9.6 worked example, pinned exactly ------------------------------------------------------


def test_c8i_worked_example_pack():
    t = topo("c8i-metal-48xl")
    plan = plan_jobs([Job("A", 32), Job("B", 80)], t, plan_isolation(t), "pack", order="given")
    a, b = plan.placement("A"), plan.placement("B")
    # A: 16 whole cores of node 0 (all nodes tie at 60 free; the lowest id wins).
    assert format_cpulist(a.cpus) == "2-17,98-113" and a.nodes == (0,)
    # B: all of node 1 (60 CPUs) plus 20 CPUs as whole cores of the fullest node, node 0.
    assert format_cpulist(b.cpus) == "18-27,34-63,114-123,130-159"
    assert b.nodes == (0, 1)
    assert set(parse_cpulist("34-63,130-159")) <= set(b.cpus)
    assert plan.sharing("B") == ["A"]
    assert format_cpulist(plan.free) == "28-31,66-95,124-127,162-191"
    assert a.pin_order[:16] == tuple(range(2, 18)) and a.pin_order[16:] == tuple(range(98, 114))
    assert b.score == (2, 12, 0, 0, 1, 159)  # 12: same-socket SNC nodes, no table


def test_c8i_worked_example_isolate():
    t = topo("c8i-metal-48xl")
    plan = plan_jobs([Job("A", 32), Job("B", 80)], t, plan_isolation(t), "isolate", order="given")
    assert jobs_of(plan) == {
        "A": "2-17,98-113",
        # node 1 + 10 cores of node 2: node 0 stays A's alone, node 2 is fragmented instead.
        "B": "34-63,66-75,130-159,162-171",
    }
    assert plan.placement("B").nodes == (1, 2)
    assert plan.sharing("A") == [] and plan.sharing("B") == []
    assert plan.placement("B").score == (2, 12, 0, 0, 2, 171)


def test_c8i_first_fit_decreasing_places_b_first():
    # The same two jobs given together: B (the bigger) goes first and takes node 0 whole plus
    # 10 cores of node 1; A then best-fits into what is left of node 1 (pack) or keeps to the
    # untouched node 2 (isolate).
    t = topo("c8i-metal-48xl")
    iso = plan_isolation(t)
    pack = plan_jobs([Job("A", 32), Job("B", 80)], t, iso, "pack")
    assert [p.job.name for p in pack.placements] == ["B", "A"]
    assert jobs_of(pack) == {"B": "2-31,34-43,98-127,130-139", "A": "44-59,140-155"}
    isolate = plan_jobs([Job("A", 32), Job("B", 80)], t, iso, "isolate")
    assert jobs_of(isolate) == {"B": "2-31,34-43,98-127,130-139", "A": "66-81,162-177"}


def test_whole_domains_are_judged_against_the_isolated_cpus():
    # Every node holds housekeeping CPUs; relative to U a node is still "entirely free", so 120
    # CPUs are exactly nodes 0 and 1 (kubelet comparing against the machine would scatter).
    t = topo("c8i-metal-48xl")
    iso = plan_isolation(t)
    view = make_view(t, iso.workers + iso.siblings)
    assert (view.first, view.second, view.use_llc) == ("socket", "node", False)
    got = take_packed(120, view.universe, view, whole_cores=True)
    assert format_cpulist(got) == "2-31,34-63,98-127,130-159"
    assert not set(got) & set(iso.housekeeping)


# -- kubelet-like allocator cases --------------------------------------------------------------


@pytest.fixture(scope="module")
def dual():
    """two-socket: 2 sockets = 2 NUMA nodes, SMT 2; node 0 = even CPUs, core (0,16) first."""
    t = topo("two-socket")
    return make_view(t, [c.id for c in t.cpus])


@pytest.mark.parametrize(
    "n, taken, expected",
    [
        (1, "", "0"),  # the first CPU of the first core of the first node
        (2, "", "0,16"),  # a whole core
        (3, "", "0,2,16"),  # a core, then the fullest node's next core
        (16, "", "0,2,4,6,8,10,12,14,16,18,20,22,24,26,28,30"),  # a whole node/socket
        (18, "", "0-2,4,6,8,10,12,14,16-18,20,22,24,26,28,30"),  # node 0 + a core of node 1
        (32, "", "0-31"),
        (1, "0", "16"),  # fills the partly used core first
        (3, "0", "2,16,18"),
        (16, "0,2", "1,3,5,7,9,11,13,15,17,19,21,23,25,27,29,31"),  # the free node, not node 0
        (4, "0,2,4,6,16,18,20,22", "8,10,24,26"),  # best fit: the fuller node
        # Whole free cores (node 1) come before the half-used cores left on node 0.
        (4, "0,2,4,6,8,10,12,14,16,18,20,22", "1,3,17,19"),
        (6, "0,2,4,6,8,10,12,14,16,18,20,22", "1,3,5,17,19,21"),  # as long as need allows
    ],
)
def test_packed_dual_socket(dual, n, taken, expected):
    free = set(dual.universe) - set(parse_cpulist(taken))
    assert format_cpulist(take_packed(n, free, dual)) == expected


def test_packed_spread_and_full_pcpus(dual):
    everything = dual.universe
    # distribute-cpus-across-cores: one thread per core before any sibling.
    assert take_packed(4, everything, dual, spread=True) == [0, 2, 4, 6]
    with pytest.raises(PlanError, match="multiple of 2"):
        take_packed(3, everything, dual, whole_cores=True)
    # Whole cores skip the half-used core of CPU 0.
    assert take_packed(2, everything - {0}, dual, whole_cores=True) == [2, 18]
    with pytest.raises(PlanError, match="only 31 are free"):
        take_packed(32, everything - {0}, dual)
    with pytest.raises(PlanError, match="outside the allocatable"):
        take_packed(1, {99}, dual)
    assert take_packed(0, everything, dual) == []


def test_distributed_dual_socket(dual):
    everything = dual.universe
    # Fits one node: KEP-2902 only spreads what needs more than one node's share.
    assert format_cpulist(take_distributed(8, everything, dual)) == "0,2,4,6,16,18,20,22"
    # 20 CPUs need both nodes: 10 each, whole cores.
    got = take_distributed(20, everything, dual, whole_cores=True)
    assert format_cpulist(got) == "0-9,16-25"
    assert sum(c % 2 == 0 for c in got) == 10
    # 6 free whole-core CPUs short on node 0: 8 CPUs go to node 1 for the best balance.
    free = everything - set(range(0, 12, 2))
    assert (
        format_cpulist(take_distributed(8, free, dual, whole_cores=True)) == "1,3,5,7,17,19,21,23"
    )
    # An odd count can't be grouped in cores: packed, as kubelet does.
    assert take_distributed(3, everything, dual) == take_packed(3, everything, dual)


def test_6543p_b_single_node():
    t = topo("xeon-6543p-b")
    view = make_view(t, [c.id for c in t.cpus])
    assert take_packed(3, view.universe, view) == [0, 1, 32]
    assert take_distributed(64, view.universe, view) == list(range(64))
    iso = plan_isolation(t)
    plan = plan_jobs([Job("A", 20), Job("B", 8, whole_cores=False), Job("C", 4)], t, iso)
    assert jobs_of(plan) == {"A": "2-11,34-43", "B": "12-19", "C": "20-21,52-53"}
    assert plan.placement("B").pin_order == tuple(range(12, 20))
    # B took first threads only; their siblings stay free for host threads, and C skips them.
    assert set(parse_cpulist("44-51")) <= set(plan.free)


def test_chiplet_llc_level():
    t = chiplet()
    iso = plan_isolation(t)
    view = make_view(t, iso.workers + iso.siblings)
    assert view.use_llc and view.levels == ["socket", "node", "llc"]
    assert not make_view(topo("c8i-metal-48xl"), iso.workers).use_llc  # SNC: L3 is socket-wide
    node0 = view.universe & set(t.nodes[0])
    # Best fit among LLCs: LLC 0 (6 worker cores, 12 CPUs) is taken whole first, the other 8
    # CPUs are 4 cores of LLC 1 (first fit, §9.3 step 4b).
    assert format_cpulist(take_packed(20, node0, view, whole_cores=True)) == "2-11,98-107"
    assert format_cpulist(take_packed(28, node0, view, whole_cores=True)) == "2-15,98-111"
    plan = plan_jobs([Job("A", 16), Job("B", 12)], t, iso)
    # A is exactly one LLC (cores 8-15); B is LLC 0, whose 6 worker cores make 12 CPUs.
    assert jobs_of(plan) == {"A": "8-15,104-111", "B": "2-7,98-103"}
    assert plan.placement("A").llcs == (1,) and plan.placement("B").llcs == (0,)
    pack = plan_jobs([Job("A", 4), Job("B", 4)], t, iso, "pack", order="given")
    isolate = plan_jobs([Job("A", 4), Job("B", 4)], t, iso, "isolate", order="given")
    assert jobs_of(pack) == {"A": "2-3,98-99", "B": "4-5,100-101"}  # shares LLC 0
    assert jobs_of(isolate) == {"A": "2-3,98-99", "B": "8-9,104-105"}  # an LLC of its own


def test_hugepage_feasibility():
    t = with_hugepages("c8i-metal-48xl", {0: 100, 1: 0, 2: 500})
    iso = plan_isolation(t)
    plan = plan_jobs(
        [Job("A", 32, hugepages_per_node=200), Job("B", 16, hugepages_per_node=400)],
        t,
        iso,
    )
    a, b = plan.placement("A"), plan.placement("B")
    assert a.nodes == (2,) and a.hugepages["feasible"] is True
    assert a.hugepages["nodes"] == {"2": {"available": 500, "ok": True}}
    # After A, no node has 400 pages left: B is placed for its CPUs alone (best fit: next to A,
    # leaving one partly used node rather than two) and reported short.
    assert b.hugepages["feasible"] is False
    assert b.nodes == (2,) and b.hugepages["nodes"] == {"2": {"available": 300, "ok": False}}
    no_demand = plan_jobs([Job("A", 2)], t, iso).placement("A")
    assert no_demand.hugepages is None


@pytest.mark.parametrize(
    "jobs, kwargs, message",
    [
        ([Job("A", 3)], {}, "cpus=3 is not a whole number of cores"),
        ([Job("A", 182)], {}, "asks for 182 CPUs but only 180"),
        ([Job("A", 91, whole_cores=False)], {}, "only 90 free worker CPUs"),
        ([Job("A", 100), Job("B", 100)], {}, "job 'B': asks for 100 CPUs but only 80"),
        ([{"name": "A", "cpus": 2, "core": 1}], {}, "unknown field 'core'"),
        ([{"name": "A"}], {}, "cpus: expected a whole number >= 1, got None"),
        ([{"name": "A", "cpus": 2, "distributed": "yes"}], {}, "distributed: expected true"),
        ([Job("A", 2), Job("A", 4)], {}, "named twice"),
        (["A=2"], {}, "expected a job"),
        ([Job("A", 2)], {"policy": "greedy"}, "policy: expected one of pack, isolate"),
        ([Job("A", 2)], {"order": "random"}, "order: expected one of"),
    ],
)
def test_plan_errors(jobs, kwargs, message):
    t = topo("c8i-metal-48xl")
    with pytest.raises(PlanError, match=message) as info:
        plan_jobs(jobs, t, plan_isolation(t), **kwargs)
    assert "\n" not in str(info.value)


def test_isolation_plan_of_another_host_is_refused():
    with pytest.raises(PlanError, match="not online CPUs of this host"):
        plan_jobs([Job("A", 2)], topo("two-socket"), plan_isolation(topo("c8i-metal-48xl")))


# -- properties over many random job mixes --------------------------------------------------------

TOPOLOGIES = {
    "c8i-metal-48xl": lambda: topo("c8i-metal-48xl"),
    "two-socket": lambda: topo("two-socket"),
    "xeon-6543p-b": lambda: topo("xeon-6543p-b"),
    "chiplet": chiplet,
}


def random_jobs(rng: random.Random, cores: int, tpc: int) -> list[Job]:
    """A mix that always fits: every whole-core job and every first-thread CPU uses up a core."""
    jobs, budget = [], cores
    for i in range(rng.randint(1, 7)):
        if budget <= 0:
            break
        size = rng.randint(1, max(1, min(budget, cores // 2)))
        threads = rng.random() < 0.25
        jobs.append(
            Job(
                name=f"j{i}",
                cpus=size if threads else size * tpc,
                whole_cores=not threads,
                distributed=rng.random() < 0.2,
            )
        )
        budget -= size
    return jobs


def min_nodes(n: int, counts: dict[int, int]) -> int:
    total = 0
    for k, count in enumerate(sorted(counts.values(), reverse=True), start=1):
        total += count
        if total >= n:
            return k
    raise AssertionError("did not fit")


@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
def test_random_job_mixes(name):
    t = TOPOLOGIES[name]()
    iso = plan_isolation(t)
    universe = set(iso.workers + iso.siblings)
    core_of = {c: core for core in t.cores for c in core.cpus}
    node_of = {c.id: c.node for c in t.cpus}
    rng = random.Random(name)
    for _ in range(40):
        jobs = random_jobs(rng, len(iso.workers), t.threads_per_core)
        policy = rng.choice(["pack", "isolate"])
        plan = plan_jobs(jobs, t, iso, policy)
        # Deterministic: again, and with the jobs given in another order.
        shuffled = jobs[:]
        rng.shuffle(shuffled)
        assert plan_jobs(shuffled, t, iso, policy).facts() == plan.facts()
        assert [p.job.name for p in plan.placements] == [
            j.name for j in sorted(jobs, key=lambda j: (-j.cpus, j.name))
        ]
        free = set(universe)
        for p in plan.placements:
            cpus = set(p.cpus)
            assert len(cpus) == len(p.cpus) == p.job.cpus
            assert cpus <= free, "overlaps an earlier job or leaves U"
            if p.job.whole_cores:
                assert all(set(core_of[c].cpus) <= cpus for c in cpus), "split a core"
                usable = {c for c in free if set(core_of[c].cpus) <= free}
            else:
                assert cpus <= set(iso.workers), "a first-thread job got a sibling"
                usable = free & set(iso.workers)
            counts: dict[int, int] = {}
            for c in usable:
                counts[node_of[c]] = counts.get(node_of[c], 0) + 1
            if not p.job.distributed:
                assert len(p.nodes) == min_nodes(p.job.cpus, counts), "not the fewest nodes"
            assert p.nodes == tuple(sorted({node_of[c] for c in cpus}))
            assert sorted(p.pin_order) == sorted(cpus)
            index = [core_of[c].cpus.index(c) for c in p.pin_order]
            assert index == sorted(index), "a second thread before a first thread"
            free -= cpus
        assert set(plan.free) == free
        assert not set(iso.housekeeping) & (universe - free)


# -- the CLI ---------------------------------------------------------------------------------


def orchestrate(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([ORCHESTRATE, *args], capture_output=True, text=True, timeout=timeout)


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("orchestrate: error: ")
    return lines[0]


def test_cli_fixture_json_matches_the_planner():
    proc = orchestrate("cpuset", "A=32,B=80", "--topology", C8I, "--order", "given", "--json")
    assert proc.returncode == 0, proc.stderr
    (host,) = json.loads(proc.stdout)["hosts"]
    assert host["name"] == "c8i-metal-48xl"
    t = topo("c8i-metal-48xl")
    expected = plan_jobs([Job("A", 32), Job("B", 80)], t, plan_isolation(t), order="given")
    assert host["cpuset"] == json.loads(json.dumps(expected.facts()))
    jobs = {j["name"]: j for j in host["cpuset"]["jobs"]}
    assert jobs["B"]["cpulist"] == "18-27,34-63,114-123,130-159" and jobs["B"]["mems"] == "0-1"
    assert host["isolation"]["workers_list"] == "2-31,34-63,66-95"


def test_cli_fixture_table_options():
    proc = orchestrate(
        "cpuset",
        "A=32",
        "B=80",
        "C=6",
        "--topology",
        C8I,
        "--policy",
        "isolate",
        "--order",
        "given",
        "--threads",
        "C",
        "--distributed",
        "B",
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "policy isolate, order given" in out
    assert "2-17,98-113" in out  # A
    assert "C threads" in out and "B dist" in out
    t = topo("c8i-metal-48xl")
    plan = plan_jobs(
        [Job("A", 32), Job("B", 80, distributed=True), Job("C", 6, whole_cores=False)],
        t,
        plan_isolation(t),
        "isolate",
        order="given",
    )
    for p in plan.placements:
        assert p.job.name in out and format_cpulist(p.cpus)[:12] in out.replace("\n", "")


def test_cli_hugepages_short_exits_1():
    proc = orchestrate("cpuset", "A=2", "--topology", C8I, "--hugepages", "A=64", "--json")
    assert proc.returncode == 1, proc.stderr
    (job,) = json.loads(proc.stdout)["hosts"][0]["cpuset"]["jobs"]
    assert job["hugepages"]["feasible"] is False  # the fixture has no 2 MiB pages reserved


def test_cli_localhost():
    t = read_topology("/")
    plannable = all(len(t.cores_in_node(n)) > 1 for n in t.nodes if t.nodes[n])
    proc = orchestrate("cpuset", "A=1", "--threads", "A", "--housekeeping", "1", "--json")
    if not plannable:
        one_line_error(proc)
        return
    assert proc.returncode == 0, proc.stderr
    (host,) = json.loads(proc.stdout)["hosts"]
    assert host["name"] == "localhost"
    (job,) = host["cpuset"]["jobs"]
    iso = plan_isolation(t, 1)
    assert job["cpus"] == [iso.workers[0]] and job["cpus"][0] not in iso.housekeeping
    # --topology / reads the same live tree without the inventory.
    direct = orchestrate(
        "cpuset", "A=1", "--threads", "A", "--housekeeping", "1", "--json", "--topology", "/"
    )
    assert direct.returncode == 0, direct.stderr
    assert json.loads(direct.stdout)["hosts"][0]["cpuset"] == host["cpuset"]
    # The default of 2 housekeeping cores per node: planned, or one line saying why not.
    default = orchestrate("cpuset", "A=1", "--threads", "A", "--json")
    if all(len(t.cores_in_node(n)) > 2 for n in t.nodes if t.nodes[n]):
        assert default.returncode == 0, default.stderr
    else:
        assert "leaves no worker cores" in one_line_error(default)


@pytest.mark.parametrize(
    "args, message",
    [
        (["A=3", "--topology", C8I], "job 'A': cpus=3 is not a whole number of cores"),
        (["A=1000", "--topology", C8I], "asks for 1000 CPUs but only 180"),
        (["A=2", "--distributed", "X", "--topology", C8I], "--distributed X: no such job"),
        (["A=x", "--topology", C8I], "job 'A=x': expected NAME=CPUS"),
        (["A=2,A=4", "--topology", C8I], "job 'A': given twice"),
        (["A=2", "--policy", "greedy", "--topology", C8I], "--policy: expected one of"),
        (["A=2", "--hugepages", "A", "--topology", C8I], "--hugepages A: expected NAME=PAGES"),
        (["A=2", "--topology", "/nonexistent.json"], "/nonexistent.json: --topology: no such"),
        (["A=2", "--topology", C8I, "--limit", "x"], "can't be combined with --inventory"),
        (["A=2", "--limit", "no-such-host"], "no-such-host"),
        (["A=2", "--housekeeping", "0", "--topology", C8I], "housekeeping_per_node"),
    ],
)
def test_cli_errors(args, message):
    line = one_line_error(orchestrate("cpuset", *args))
    assert message in line


# -- issue 18: the four defects, each on a topology built for it ---------------------------------


def _usable_by(level: str, t: Topology, cpus: set[int]) -> dict[int, int]:
    """Free CPUs of complete cores per node/LLC (an independent count from the topology)."""
    tpc = t.threads_per_core
    whole = {c for core in t.cores if len(core.cpus) == tpc for c in core.cpus}
    out: dict[int, int] = {}
    for cpu in t.cpus:
        if cpu.id in cpus and cpu.id in whole:
            key = cpu.node if level == "node" else cpu.llc
            out[key] = out.get(key, 0) + 1
    return out


def _fewest(n: int, capacity: dict[int, int]) -> int:
    total = 0
    for k, cap in enumerate(sorted(capacity.values(), reverse=True), start=1):
        total += cap
        if total >= n:
            return k
    raise AssertionError("does not fit")


def test_offline_sibling_never_splits_a_core():
    # 32 cores / 64 threads, CPU 35 (sibling of 3) offline: before the fix A got 2-3 (CPU 2
    # without 34, plus the half core 3) and CPU 34 was stranded.
    t = topo("offline-sibling")
    assert t.cpu(3).siblings == (3,) and 35 not in {c.id for c in t.cpus}
    iso = plan_isolation(t)
    plan = plan_jobs([Job("A", 2), Job("B", 2)], t, iso, order="given")
    assert jobs_of(plan) == {"A": "2,34", "B": "4,36"}
    for p in plan.placements:
        assert all(
            len(t.cpu(c).siblings) == 2 and set(t.cpu(c).siblings) <= set(p.cpus) for c in p.cpus
        )
    # The half core is left for a first-thread job, not wasted.
    threads = plan_jobs([Job("A", 58), Job("T", 1, whole_cores=False)], t, iso, order="given")
    assert 3 not in threads.placement("A").cpus
    assert threads.placement("T").cpus == (3,)
    # Whole-core jobs can use at most the 29 complete worker cores.
    with pytest.raises(PlanError, match="only 58 CPUs in whole free cores"):
        plan_jobs([Job("A", 60)], t, iso)


@pytest.mark.parametrize("name", ["genoa-1s-nps1", "genoa-1s-nps4"])
@pytest.mark.parametrize("ccds", [4, 5, 6, 7, 8])
def test_twelve_ccds_fewest_llcs(name, ccds):
    # 12 CCDs per socket: C(12, 4) = 495 LLC sets, above the old cap of 256, so the LLC search
    # was skipped and the job got one CCD more than it needed.
    t = topo(name)
    iso = plan_isolation(t)
    universe = set(iso.workers + iso.siblings)
    n = ccds * 16
    by_node = _usable_by("node", t, universe)
    k_nodes = _fewest(n, by_node)
    best_llcs = min(
        _fewest(n, _usable_by("llc", t, universe & set().union(*(t.nodes[x] for x in combo))))
        for combo in itertools.combinations(sorted(by_node), k_nodes)
        if sum(by_node[x] for x in combo) >= n
    )
    p = plan_jobs([Job("A", n)], t, iso).placement("A")
    assert len(p.nodes) == k_nodes
    assert len(p.llcs) == best_llcs, (format_cpulist(p.cpus), p.llcs)
    assert p.search == "exact"
    assert len(p.cpus) == n and set(p.cpus) <= universe


def test_twenty_four_ccds_bounded_search_still_fewest_llcs():
    # Two Genoa sockets in NPS1: a job bigger than a node spans both nodes' 24 LLCs; C(24, 13)
    # sets can't be enumerated, so the search is bounded and says so, but the count is the
    # fewest (the fullest LLCs first), checked here independently.
    t = topo("genoa-2s-nps1")
    iso = plan_isolation(t)
    universe = set(iso.workers + iso.siblings)
    n = 200
    p = plan_jobs([Job("A", n)], t, iso).placement("A")
    assert len(p.nodes) == 2
    assert len(p.llcs) == _fewest(n, _usable_by("llc", t, universe))
    print(f"24-CCD search: {p.search}, {len(p.llcs)} LLCs, {p.candidates} candidates")
    assert p.search == "bounded"
    assert plan_jobs([Job("A", 64)], t, iso).placement("A").search == "exact"


def test_snc2_prefers_a_same_socket_pair_of_nodes():
    # Two sockets, SNC2: a 28-CPU job needs two nodes. Before the distance term, {0, 2} (one
    # node per socket, lower CPU ids with the interleaved numbering) won on the highest CPU.
    s = snapshot("snc2-two-socket")
    t = topology_from_snapshot(s)
    iso = plan_isolation(t, 1)
    table = node_distances(s)
    assert table[0] == {0: 10, 1: 12, 2: 21, 3: 21}
    for distances in (table, None):  # the sysfs table, or the socket-derived fallback
        p = plan_jobs([Job("A", 28)], t, iso, distances=distances).placement("A")
        assert p.nodes == (0, 1), format_cpulist(p.cpus)
        assert {t.cpu(c).package for c in p.cpus} == {0}
        assert p.score[1] == 12
    # The table, not the socket ids, decides: a table that puts node 2 nearest to 0 wins.
    odd = {a: dict(row) for a, row in table.items()}
    odd[0][2] = odd[2][0] = 11
    p = plan_jobs([Job("A", 28)], t, iso, distances=odd).placement("A")
    assert p.nodes == (0, 2)


def _bad(mutate):
    s = copy.deepcopy(snapshot("two-socket"))
    mutate(s)
    return s


MALFORMED = [
    (lambda s: s.update(nodes=list(s["nodes"].values())), "nodes: expected an object"),
    (lambda s: s["cpus"].update({"3": "3"}), "cpus.3: expected an object, got '3'"),
    (lambda s: s["cpus"]["3"].update(cache=[1]), "cpus.3.cache: expected an object"),
    (lambda s: s["cpus"]["3"]["cache"].update(index3=7), "cpus.3.cache.index3: expected an"),
    (lambda s: s["cpus"]["3"].update(core_id="\u0664"), "cpus.3.core_id: expected an integer"),
    (lambda s: s["nodes"].update({"\u0661": s["nodes"].pop("1")}), "nodes.\u0661: expected an"),
    (lambda s: s.update(irqs="none"), "irqs: expected a list"),
    (lambda s: s.update(irqs=["x"]), "irqs[0]: expected an object"),
    (lambda s: s.update(cpuinfo=["x"]), "cpuinfo: expected an object"),
    (lambda s: s.update(irqbalance_pids=["a"]), "irqbalance_pids: expected an integer"),
    (lambda s: s["nodes"]["0"].update(distance="10 x"), "nodes.0.distance: expected 2 whole"),
    (lambda s: s["nodes"]["1"].update(distance="21 10 10"), "nodes.0.distance: expected 2"),
]


@pytest.mark.parametrize("mutate, message", MALFORMED)
def test_cli_malformed_snapshot_is_one_line(tmp_path, mutate, message):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(_bad(mutate)))
    line = one_line_error(orchestrate("cpuset", "A=2", "--topology", str(path)))
    assert str(path) in line and message in line, line


def test_cli_not_an_object_and_unicode_counts(tmp_path):
    path = tmp_path / "list.json"
    path.write_text("[1, 2]")
    line = one_line_error(orchestrate("cpuset", "A=2", "--topology", str(path)))
    assert "expected a JSON object" in line
    # U+0664 is an Arabic-Indic four: \d and int() accept it, a CPU count must not.
    line = one_line_error(orchestrate("cpuset", "A=\u0664", "--topology", C8I))
    assert "expected NAME=CPUS" in line
    line = one_line_error(
        orchestrate("cpuset", "A=2", "--hugepages", "A=\u0664", "--topology", C8I)
    )
    assert "expected NAME=PAGES" in line


def test_cli_offline_sibling_and_distances_from_the_snapshot():
    proc = orchestrate(
        "cpuset",
        "A=2",
        "B=2",
        "--order",
        "given",
        "--json",
        "--topology",
        str(FIXTURES / "offline-sibling.json"),
    )
    assert proc.returncode == 0, proc.stderr
    jobs = {j["name"]: j for j in json.loads(proc.stdout)["hosts"][0]["cpuset"]["jobs"]}
    assert jobs["A"]["cpulist"] == "2,34" and jobs["A"]["search"] == "exact"
    proc = orchestrate(
        "cpuset",
        "A=28",
        "--housekeeping",
        "1",
        "--json",
        "--topology",
        str(FIXTURES / "snc2-two-socket.json"),
    )
    assert proc.returncode == 0, proc.stderr
    (job,) = json.loads(proc.stdout)["hosts"][0]["cpuset"]["jobs"]
    assert job["nodes"] == [0, 1] and job["score"]["distance"] == 12
