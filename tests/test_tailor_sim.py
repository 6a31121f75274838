"""The controller's simulator (socketlab.tailor.simulator) and `orchestrate tailor simulate`:
traces in and out, the three policies' accounting, and what the controller buys on the
recorded c8i topology and a 12-CCD one (numbers in docs/tailor.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from socketlab.errors import PlanError, SpecError
from socketlab.placement.cpuset import node_distances
from socketlab.placement.isolation import plan_isolation
from socketlab.tailor.simulator import (
    generate_mix,
    parse_trace,
    simulate,
    trace_csv,
)
from socketlab.topology import topology_from_snapshot
from tests.fixtures.topology import FIXTURES, snapshot

ORCHESTRATE = str(Path(sys.executable).parent / "orchestrate")
#: the stranded-capacity bound docs/tailor.md states for the controller on the mixed trace
STRANDED_BOUND = 0.05


def host(name: str):
    snap = snapshot(name)
    t = topology_from_snapshot(snap)
    return t, plan_isolation(t), node_distances(snap)


def test_trace_csv_and_jsonl_agree():
    csv_text = "t,workload,cpus\n0,a,1.5\n0,b,0\n1,a,2\n2,a,0.5\n2,b,3\n"
    jsonl = "\n".join(
        json.dumps({"t": t, "workload": w, "cpus": c})
        for t, w, c in [(0, "a", 1.5), (0, "b", 0), (1, "a", 2), (2, "a", 0.5), (2, "b", 3)]
    )
    a, b = parse_trace(csv_text, "x.csv"), parse_trace(jsonl, "x.jsonl")
    assert a.demand == b.demand and a.period == 1.0 and a.workloads == ("a", "b")
    assert a.demand[1] == {"a": 2.0, "b": 0.0}  # missing at t=1: no demand
    again = parse_trace(trace_csv(a), "again.csv")
    assert again.demand == a.demand


@pytest.mark.parametrize(
    "text, message",
    [
        ("t,workload,cpus\n0,a,1\n1,a,-2\n", "x.csv:3: cpus: expected a demand >= 0, got -2"),
        ("t,workload,cpus\n0,a,one\n", "x.csv:2: cpus: expected a number, got 'one'"),
        ("t,workload,cpus\n0,a,\u0664\n", "x.csv:2: cpus: expected a number"),
        ("time,w,c\n0,a,1\n", "x.csv:1: header: expected t,workload,cpus"),
        ("t,workload,cpus\n0,a,1\n0,a,2\n", "x.csv:3: workload 'a' at t=0 given twice"),
        ("t,workload,cpus\n0,a,1\n1,a,1\n2.5,a,1\n", "expected a regular time grid"),
        ('{"t": 0, "workload": "a"}\n', "x.csv:1: expected an object with t, workload and cpus"),
        ("t,workload,cpus\n", "no rows"),
    ],
)
def test_bad_traces(text, message):
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_trace(text, "x.csv")


@pytest.mark.parametrize("name", ["c8i-metal-48xl", "genoa-1s-nps1"])
@pytest.mark.parametrize("policy", ["cfs", "static", "tailor"])
def test_accounting_is_conserved(name, policy):
    t, iso, dist = host(name)
    cap = len(iso.workers) + len(iso.siblings)
    trace = generate_mix("mixed", capacity=cap, minutes=2, seed=3)
    r = simulate(trace, t, iso, policy, distances=dist)
    for tick, demand in zip(r.ticks, trace.demand, strict=True):
        assert sum(tick.served.values()) <= cap + 1e-6
        for n, d in demand.items():
            assert -1e-9 <= tick.served[n] <= d + 1e-9
        held = [set(c) for c in tick.own.values()]
        assert set().union(*held) <= set(iso.workers + iso.siblings)
        if policy != "cfs":  # hard sets never overlap
            assert sum(len(h) for h in held) == len(set().union(*held))
    assert 0 <= r.summary["stranded"] <= 1 and 0 <= r.summary["unserved"] <= 1


def test_controller_beats_spread_on_twelve_ccds_and_strands_little():
    t, iso, dist = host("genoa-1s-nps1")
    cap = len(iso.workers) + len(iso.siblings)
    trace = generate_mix("mixed", capacity=cap, minutes=10, seed=0)
    m = {p: simulate(trace, t, iso, p, distances=dist).summary for p in ("cfs", "static", "tailor")}
    print({p: (v["llcs_per_workload"], v["stranded"], v["unserved"]) for p, v in m.items()})
    assert m["tailor"]["llcs_per_workload"] < m["cfs"]["llcs_per_workload"] / 2
    assert m["tailor"]["stranded"] < STRANDED_BOUND
    assert m["tailor"]["stranded"] < m["static"]["stranded"]
    assert m["cfs"]["stranded"] == 0  # work-conserving by construction


def test_controller_keeps_workloads_on_fewer_nodes_on_c8i():
    # c8i's L3 is socket-wide (SNC3): one LLC, so the locality the controller buys is nodes.
    t, iso, dist = host("c8i-metal-48xl")
    cap = len(iso.workers) + len(iso.siblings)
    trace = generate_mix("mixed", capacity=cap, minutes=10, seed=0)
    cfs = simulate(trace, t, iso, "cfs", distances=dist).summary
    tailor = simulate(trace, t, iso, "tailor", distances=dist).summary
    assert tailor["llcs"] == 1 and cfs["llcs_per_workload"] == tailor["llcs_per_workload"] == 1
    assert tailor["nodes_per_workload"] < cfs["nodes_per_workload"]
    assert tailor["stranded"] < STRANDED_BOUND


def test_generator_rejects_bad_mixes():
    with pytest.raises(PlanError, match="expected one of mixed"):
        generate_mix("spiky", capacity=10)
    with pytest.raises(PlanError, match="--peak"):
        generate_mix("mixed", capacity=10, peak=2)


def orchestrate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [ORCHESTRATE, "tailor", *args], capture_output=True, text=True, timeout=300
    )


def one_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("orchestrate: error: ")
    return line


def test_cli_simulate_json_plots_and_trace_file(tmp_path):
    trace = tmp_path / "mix.csv"
    proc = orchestrate(
        "simulate",
        "--generate",
        "mixed",
        "--minutes",
        "2",
        "--topology",
        str(FIXTURES / "genoa-1s-nps1.json"),
        "--plot",
        str(tmp_path / "png"),
        "--write-trace",
        str(trace),
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert set(out["policies"]) == {"cfs", "static", "tailor"}
    pngs = sorted((tmp_path / "png").glob("*.png"))
    assert [p.name for p in pngs] == [f"genoa-1s-nps1-{p}.png" for p in ("cfs", "static", "tailor")]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    # The written trace replays to the same numbers.
    again = orchestrate(
        "simulate", str(trace), "--topology", str(FIXTURES / "genoa-1s-nps1.json"), "--json"
    )
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["policies"] == out["policies"]


def test_cli_simulate_bad_input(tmp_path):
    bad = tmp_path / "neg.csv"
    bad.write_text("t,workload,cpus\n0,a,1\n1,a,-3\n")
    line = one_line(
        orchestrate("simulate", str(bad), "--topology", str(FIXTURES / "c8i-metal-48xl.json"))
    )
    assert f"{bad}:3: cpus: expected a demand >= 0, got -3" in line
    no_llc = snapshot("two-socket")
    for rec in no_llc["cpus"].values():
        rec["cache"] = {}
    path = tmp_path / "no-llc.json"
    path.write_text(json.dumps(no_llc))
    line = one_line(orchestrate("simulate", "--generate", "mixed", "--topology", str(path)))
    assert "no LLC information for CPU 0" in line
    line = one_line(orchestrate("simulate", "--topology", str(FIXTURES / "c8i-metal-48xl.json")))
    assert "expected a TRACE file or --generate" in line
