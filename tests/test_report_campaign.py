"""campaign-oct and the published file agree, and the quick profile plans on real topologies.

Plans are pure: the campaign file is expanded against recorded host facts (the c8i topology and
this machine's), exactly as `orchestrate plan/run` would, without running anything.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from socketlab.cpulist import parse_cpulist
from socketlab.errors import SpecError
from socketlab.parse.collectors import METRIC_SOURCES
from socketlab.report.derived import DERIVED
from socketlab.report.published import load_published
from socketlab.spec.expand import expand_points
from socketlab.spec.hosts import host_entry
from socketlab.spec.load import load_spec, sweep_points
from socketlab.topology import topology_from_snapshot
from tests.published.c8i_fixture import PUBLISHED_DEVICES

REPO = Path(__file__).resolve().parents[1]
CAMPAIGN = REPO / "experiments" / "campaign-oct.yaml"
PUBLISHED = REPO / "experiments" / "published" / "sram-oct-2026.yaml"
TOPO = REPO / "tests" / "fixtures" / "topology"
#: metrics each native binary prints (its --help), plus what collectors add
NATIVE_METRICS = {
    "ladder": {
        "bw_total",
        "bw_per_core_mean",
        "bw_per_core_min",
        "bw_per_core_p50",
        "bw_per_core_max",
        "gflops_total",
        "tflops_total",
        "tflops_per_core_mean",
        "tflops_per_core_min",
        "tflops_per_core_p50",
        "tflops_per_core_max",
        "core_clock_mean",
        "core_clock_min",
    },
    "exchange": {"latency_p50", "latency_p99", "latency_min"},
    "gemv": {
        "step_p50",
        "step_p99",
        "weight_bw",
        "tflops",
        "rows_max_over_mean",
        "layer_bytes_max_over_mean",
        "layer_bytes_per_worker_max",
        "layer_bytes_per_worker_mean",
    },
    "kvstream": {"kv_bw", "step_p50", "step_p99"},
    # native/layer (its --help), plus the phase sums socketlab.report.derived makes of them
    "layer": {
        "step_p50",
        "step_p95",
        "step_p99",
        "step_max",
        "phase_compute",
        "phase_gemv",
        "phase_barrier",
        "weight_bytes_per_worker",
        "kv_bytes_per_step",
        "held_lock_before",
        "held_lock_after",
        "gate_pass",
        "routing_kl",
        "routing_flips",
        "gate_kv_copies",
    }
    | set(DERIVED),
    "sleep": set(),
}


def _program(command) -> str:
    """The measuring program: after `layer-stage ... --` when the dump wrapper runs it."""
    argv = [str(a) for a in command]
    if "layer-stage" in argv:
        return Path(argv[argv.index("--") + 1]).name
    return Path(argv[0]).name


def _topology(name: str):
    snap = json.loads((TOPO / f"{name}.json").read_text())
    if name == "c8i-metal-48xl":  # the published host, with the pseudo-lock driver loaded
        snap["devices"] = PUBLISHED_DEVICES
    return topology_from_snapshot(snap)


def _plan(name: str, profile: str | None):
    spec = load_spec(CAMPAIGN, profile=profile)
    return spec, expand_points(spec, {name: host_entry(_topology(name), spec)})


def test_every_measured_published_cell_has_a_campaign_point():
    """Join keys are sweep parameters (or a metric dimension) of the cell's experiment, the
    experiment's program prints the metric (or a collector it runs does), and a point exists."""
    spec = load_spec(CAMPAIGN)
    pub = load_published(PUBLISHED)
    assert pub.campaign == spec.campaign
    experiments = {e.name: e for e in spec.experiments}
    checked = 0
    for cell in pub.cells:
        if cell.unmeasured:
            continue
        exp = experiments.get(cell.experiment)
        assert exp is not None, f"{cell.id}: no experiment {cell.experiment}"
        program = _program(exp.command)
        source = METRIC_SOURCES.get(cell.metric)
        if source:
            assert source in exp.collectors, f"{cell.id}: {source} not collected"
        else:
            assert cell.metric in NATIVE_METRICS[program], f"{cell.id}: {program} lacks metric"
        params = {k: v for k, v in cell.join_params().items() if k in exp.sweep.names}
        dims = set(cell.join) - set(exp.sweep.names)
        assert dims <= {"interrupt"}, f"{cell.id}: join keys {dims} are not parameters"
        points = sweep_points(exp.sweep)
        assert any(all(str(p[k]) == str(v) for k, v in params.items()) for p in points), (
            f"{cell.id}: no point with {params}"
        )
        checked += 1
    assert checked > 100


def test_quick_plan_on_this_machine_skips_amx_with_the_reason():
    spec, plan = _plan("this-machine", "quick")
    skipped = {s.experiment: s.reason for s in plan.skipped}
    amx = {
        "ladder-amx",
        "clocks-amx",
        "gemv-batch-amx",
        "compute-amx",
        "layer-p2-amx",
        "layer-p4-amx",
        "layer-p5-amx",
        "layer-tp-amx",
    }
    # the lock experiments need /dev/pseudo_lock, which a kernel without modules can't have
    locked = {
        "layer-p4-lock12",
        "layer-p4-lock14",
        "layer-p5-amx-locked",
        "layer-e4b-locked",
        "layer-resident-locked",
        "layer-stability-locked",
        "layer-tp-stability-locked",
    }
    assert set(skipped) == amx | {"exchange-umwait"} | locked
    assert all(
        skipped[e].endswith(
            "/dev/pseudo_lock (pseudo-lock driver not loaded: kernel without module support)"
        )
        for e in locked
    )
    assert all("lacks CPU flags amx_bf16" in skipped[e] for e in amx)
    assert "lacks CPU flags waitpkg" in skipped["exchange-umwait"]
    counts = {e: c["runs"] for e, c in plan.counts()["this-machine"].items()}
    # the quick profile stays small; tile-balance(-moe)'s runs are arithmetic (milliseconds each)
    # (the layer experiments' own budget: tests/test_campaign_layer.py)
    assert sum(c for e, c in counts.items() if not e.startswith(("tile-balance", "layer-"))) <= 60
    assert counts["tile-balance"] == 6
    ladder = [p for p in plan.points if p.experiment == "ladder"]

    def arg(p, flag):
        return p.argv[p.argv.index(flag) + 1]

    # the per-core cells (L2 sizes, compared per core on a host with the published core) run at
    # the published 2 s x 3 reps; the socket-level sizes stay short
    assert {(p.params["mib_per_core"], arg(p, "--seconds"), arg(p, "--reps")) for p in ladder} == {
        (1.0, "2", "3"),
        (1.3, "2", "3"),
        (1.5, "2", "3"),
        (4, "0.2", "2"),
        (64, "0.2", "2"),
    }
    (compute,) = [p for p in plan.points if p.experiment == "compute"]
    assert (arg(compute, "--seconds"), arg(compute, "--reps")) == ("2", "3")
    # one housekeeping core in the quick profile leaves CPU 1 as the worker on 2 cores
    assert {p.argv[p.argv.index("--cpus") + 1] for p in ladder} == {"1"}
    (noise,) = [p for p in plan.points if p.experiment == "noise-load"]
    assert noise.argv[noise.argv.index("--kernel") + 1] == "avx512-read"  # no AMX here


def test_full_plan_on_c8i_uses_the_published_placement():
    spec, plan = _plan("c8i-metal-48xl", None)
    assert plan.skipped == []
    by_exp: dict[str, list] = {}
    for p in plan.points:
        by_exp.setdefault(p.experiment, []).append(p)
    ladder = by_exp["ladder"][0]
    assert ladder.argv[ladder.argv.index("--cpus") + 1] == "2-31,34-63,66-95"  # 90 workers
    participants = {}
    for p in by_exp["exchange"]:
        cpus = parse_cpulist(p.argv[p.argv.index("--cpus") + 1])
        participants[p.params["scope"]] = cpus
    assert {k: len(v) for k, v in participants.items()} == {
        "one-node": 32,
        "two-nodes": 64,
        "all-nodes": 96,
    }
    assert participants["one-node"] == list(range(32))  # physical cores, no SMT siblings
    pairs = {p.params["target"]: p.argv[p.argv.index("--pairs") + 1] for p in by_exp["latency"]}
    assert pairs == {
        "next-core": "0:1",
        "last-core-of-node": "0:31",
        "first-core-next-node": "0:32",
        "first-core-last-node": "0:64",
    }
    rows = {
        p.params["weights_mib_per_core"]: int(p.argv[p.argv.index("--rows") + 1])
        for p in by_exp["gemv-batch-amx"]
    }
    # 0.77 MiB per worker over 90 workers at 2,560 BF16 columns, in 16-row tiles
    assert rows[0.77] % 16 == 0 and abs(rows[0.77] * 2560 * 2 / 90 / 2**20 - 0.77) < 0.01
    kv = {(p.params["layer"], p.params["context"]): p.argv for p in by_exp["kvstream"]}
    argv = kv[("E4B L5", 131072)]
    assert argv[argv.index("--heads") + 1] == "8"  # 4 KiB of K+V per token
    # the noise run streams AMX as published (p0_noise.sh) where the host has it
    (noise,) = by_exp["noise-load"]
    assert noise.argv[noise.argv.index("--kernel") + 1] == "amx-bf16-stream"


def test_profile_errors_are_one_line(tmp_path):
    with pytest.raises(
        SpecError,
        match=r"campaign-oct.yaml:\d+: profiles: no profile 'fast' "
        r"\(this spec has: per-core, quick\)",
    ):
        load_spec(CAMPAIGN, profile="fast")
    bad = tmp_path / "bad.yaml"
    bad.write_text(CAMPAIGN.read_text().replace("      ladder-amx:\n", "      ladder-amd:\n", 1))
    with pytest.raises(SpecError, match=r"profiles.quick.experiments.ladder-amd: no experiment"):
        load_spec(bad, profile="quick")
    bad.write_text(
        CAMPAIGN.read_text().replace(
            "    defaults: {timeout_s: 120}\n", "    defualts: {timeout_s: 120}\n", 1
        )
    )
    with pytest.raises(SpecError, match=r"profiles.quick: unknown key 'defualts'"):
        load_spec(bad, profile="quick")
