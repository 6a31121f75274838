"""campaign-oct's real-layer experiments (native/layer on dumps the controller ships) and the
report's stage tables: plans on recorded topologies, the dump cache, a real run through the store
into the report, the verdicts of AVX-512 rows on a host without it, and the slice run's
per-phase compute as per-core cells (recorded Granite Rapids facts + a SYNTHESIZED slice run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from socketlab.execute import default_workroot
from socketlab.layer.shapes import load_shape
from socketlab.report.compare import (
    DEVIATES,
    DEVIATES_PER_CORE,
    INCONCLUSIVE,
    NOT_COMPARABLE,
    REPRODUCED,
    REPRODUCED_PER_CORE,
    compare,
)
from socketlab.report.derived import derive
from socketlab.report.gather import build_report
from socketlab.report.published import PUBLISHED_DIR, load_published
from socketlab.spec.expand import expand_points
from socketlab.spec.hosts import host_entry
from socketlab.spec.load import load_spec
from socketlab.store import Store, store_path
from socketlab.topology import topology_from_snapshot
from tests.published import gnr_recorded
from tests.published.c8i_fixture import PUBLISHED_DEVICES, fill_store, topology_facts
from tests.published.gnr_slice_synthesized import PHASES, add_slice_runs
from tests.support import hostclass
from tests.support.campaign import run_quick

REPO = Path(__file__).resolve().parents[1]
CAMPAIGN = REPO / "experiments" / "campaign-oct.yaml"
PUBLISHED = PUBLISHED_DIR / "sram-oct-2026.yaml"
ORCHESTRATE = Path(sys.executable).parent / "orchestrate"
LAYER_EXPS = (
    "layer-p2",
    "layer-p2-amx",
    "layer-p3",
    "layer-p3-long",
    "layer-p4",
    "layer-p4-amx",
    "layer-p5",
    "layer-p5-amx",
    "layer-resident",
    "layer-slice",
)
#: verdicts of a per-core cell judged on a host with the published core, and of a cell judged
#: as published on the published host
PER_CORE_KINDS = (REPRODUCED_PER_CORE, DEVIATES_PER_CORE, INCONCLUSIVE)
MEASURED_KINDS = (REPRODUCED, DEVIATES, INCONCLUSIVE)
#: the stage tables of §5.5-5.8 and §5.11 (issue 12)
STAGE_SECTIONS = {"5.5", "5.6", "5.7", "5.8", "5.11"}


def _entry(name: str, spec) -> dict:
    snap = json.loads((REPO / "tests" / "fixtures" / "topology" / f"{name}.json").read_text())
    if name == "c8i-metal-48xl":  # the published host, with the pseudo-lock driver loaded
        snap["devices"] = PUBLISHED_DEVICES
    return host_entry(topology_from_snapshot(snap), spec)


def _gnr_entry(spec) -> dict:
    snap = json.loads((gnr_recorded.RECORDED / "host_facts.json").read_text())
    return host_entry(topology_from_snapshot(snap), spec)


def _stage_argv(argv) -> list[str]:
    return list(argv)


def _opt(argv, name: str) -> str:
    argv = list(argv)
    for i, a in enumerate(argv):
        if a == name:
            return argv[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    raise AssertionError(f"{name} not in {argv}")


@pytest.mark.parametrize("host", ["this-machine", "c8i-metal-48xl", "gnr-kvm", "zen4-kvm-2vcpu"])
def test_quick_plan_runs_the_layer_stage_through_the_dump_cache(host):
    """Every layer point runs the stage binary itself (no Python on the host) on a dump the
    controller ships: the point names a real shape file and the dump's key, and the stage gets
    --dump <workdir>/layer-dumps/<key>. The kernel follows the recorded facts: avx2 without
    AVX-512 BF16, avx512 with it; AMX only where the facts have AMX (the others skip with the
    reason)."""
    spec = load_spec(CAMPAIGN, profile="quick")
    entry = (
        _gnr_entry(spec)
        if host == "gnr-kvm"
        else hostclass.entry(host, spec)
        if host == "zen4-kvm-2vcpu"
        else _entry(host, spec)
    )
    entry["python"] = "/opt/py/bin/python3"
    plan = expand_points(spec, {host: entry})
    flags = set(entry["topology"]["flags"])
    skipped = {s.experiment: s.reason for s in plan.skipped}
    points = [p for p in plan.points if p.experiment in LAYER_EXPS]
    ran = {p.experiment for p in points}
    for exp in ("layer-p2-amx", "layer-p4-amx", "layer-p5-amx"):
        if {"amx_bf16", "amx_tile"} <= flags:
            assert exp in ran  # AMX hosts run them
        else:
            assert "lacks CPU flags amx_bf16" in skipped[exp]
    assert {"layer-p2", "layer-p3", "layer-p5", "layer-slice"} <= ran
    kernel = "avx512" if "avx512_bf16" in flags else "avx2"
    print(f"branch: recorded facts of {host}: avx gemv -> {kernel}")
    for p in points:
        assert "/opt/py/bin/python3" not in p.argv  # nothing of socketlab runs on the host
        dump = p.extra["layer_dump"]
        load_shape(dump["shape"])  # a real shape file: shapes are never typed here
        assert dump["key"].startswith(load_shape(dump["shape"]).name + "-c")
        stage = list(p.argv)
        assert stage[0] == "build/cc/layer"
        root = default_workroot()  # /tmp/socketlab, or the xdist worker's own folder
        assert _opt(stage, "--dump") == f"{root}/{host}/layer-dumps/{dump['key']}"
        want = "amx" if p.params["gemv"] == "amx" else kernel
        assert _opt(stage, "--gemv") == want, p.argv
    (slice_point, *_) = [p for p in points if p.experiment == "layer-slice"]
    stage = _stage_argv(slice_point.argv)
    assert _opt(stage, "--slice") == "0/90" and "," not in _opt(stage, "--cpus")
    assert _opt(stage, "--steps") == "5000"  # the published steps: per-core cells compare
    e2b = [p for p in points if p.extra["layer_dump"]["shape"] == "gemma4-e2b-l0"]
    tiny = [p for p in points if p.extra["layer_dump"]["shape"].startswith("tiny")]
    assert e2b and tiny
    counts = {e: c["runs"] for e, c in plan.counts()[host].items() if e in LAYER_EXPS}
    assert sum(counts.values()) <= 60  # small: the quick profile stays under 10 minutes


def test_full_plan_on_c8i_covers_the_published_stage_rows():
    """Every published stage cell joined to a layer experiment has a full-profile point on the
    c8i, on its 90 workers."""
    spec = load_spec(CAMPAIGN)
    plan = expand_points(spec, {"c8i": _entry("c8i-metal-48xl", spec)})
    assert plan.skipped == []
    pub = load_published(PUBLISHED)
    points = [p for p in plan.points if p.experiment in LAYER_EXPS]
    joined = [c for c in pub.cells if c.experiment in LAYER_EXPS and not c.unmeasured]
    assert len(joined) >= 400
    for cell in joined:
        match = [
            p
            for p in points
            if p.experiment == cell.experiment
            and all(str(p.params.get(k)) == str(v) for k, v in cell.join_params().items())
        ]
        assert match, f"{cell.id}: no point with {cell.join_params()}"
    p2 = [p for p in points if p.experiment == "layer-p2" and p.params["context"] == 131072]
    assert p2 and all(_opt(_stage_argv(p.argv), "--cpus") == "2-31,34-63,66-95" for p in p2)


def test_no_cell_needs_the_real_layer_stage_any_more():
    """Was 519 cells "not run: needs the real-layer stage benchmark"; now 0. What is left
    unmeasured in the stage tables says a precise reason (driver, PMU, a variant, arithmetic)."""
    pub = load_published(PUBLISHED)
    facts = {"topology": topology_facts("this-machine")}
    rows = compare(pub, [], {"vm": facts})
    # + the lock tables kv-lock, batching-residency; + moe-routing (issue 27)
    assert len(rows) == len(pub.cells) == 758
    assert not [r.cell.id for r in rows if "real-layer stage" in r.verdict]
    stage = [
        c
        for c in pub.cells
        if next(t for t in pub.tables if t.id == c.table).section in STAGE_SECTIONS
    ]
    layer = [c for c in stage if c.experiment in LAYER_EXPS and not c.unmeasured]
    print(f"stage-table cells: {len(stage)}, joined to native/layer: {len(layer)}")
    assert len(layer) >= 400
    for c in stage:
        if c.unmeasured:
            assert "not in this toolkit yet" not in c.unmeasured, c.id


def test_layer_stage_caches_the_dump_and_repeats_long_kv(tmp_path):
    """The first run generates the dump, the second reuses it (no "generated" line, same
    files); past --kv-cap a full-attention layer gets --ctx-repeat, a sliding one does not.
    The program sees the arguments (here `echo` prints them)."""
    cache = tmp_path / "cache"

    def stage(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(ORCHESTRATE), "layer-stage", *args], capture_output=True, text=True, timeout=300
        )

    full = ["--shape", "tiny-full", "--context", "64", "--batch", "2", "--cache", str(cache)]
    first = stage(*full, "--kv-cap", "32", "--", "/bin/echo", "ARGS")
    assert first.returncode == 0, first.stderr
    assert "layer dump: generated" in first.stderr
    (dump,) = [d for d in cache.iterdir() if d.is_dir()]
    assert dump.name.startswith("tiny-full-c32-b2-s1-")
    assert first.stdout.split() == ["ARGS", "--dump", str(dump.resolve()), "--ctx-repeat", "2"]
    assert json.loads((dump / "meta.json").read_text())["ctx"] == 32
    mtime = (dump / "meta.json").stat().st_mtime_ns
    again = stage(*full, "--kv-cap", "32", "--", "/bin/echo", "ARGS")
    assert again.returncode == 0 and "generated" not in again.stderr
    assert (dump / "meta.json").stat().st_mtime_ns == mtime
    sliding = stage(
        "--shape",
        "tiny",
        "--context",
        "64",
        "--cache",
        str(cache),
        "--kv-cap",
        "40",
        "--",
        "/bin/echo",
    )
    assert "--ctx-repeat" not in sliding.stdout and "tiny-c40-b1-s1-" in sliding.stdout
    matrices = stage("--shape", "gemma4-e2b-l0", "--matrices", "--", "/bin/echo")
    assert matrices.stdout.split()[-1] == load_shape("gemma4-e2b-l0").gemv_layer_arg()
    for bad, why in (
        (
            ["--shape", "nosuch", "--context", "8", "--cache", str(cache), "--", "/bin/echo"],
            "no such shape file",
        ),
        (
            [
                "--shape",
                "tiny-full",
                "--context",
                "50",
                "--kv-cap",
                "32",
                "--cache",
                str(cache),
                "--",
                "/bin/echo",
            ],
            "must be a multiple",
        ),
        (
            ["--shape", "tiny", "--context", "8", "--cache", str(cache)],
            "expected '-- PROGRAM ARG...'",
        ),
        (
            [
                "--shape",
                "tiny",
                "--context",
                "8",
                "--cache",
                str(cache),
                "--",
                str(tmp_path / "missing"),
            ],
            "cannot run",
        ),
    ):
        proc = stage(*bad)
        assert proc.returncode == 2, (bad, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1 and why in proc.stderr, proc.stderr


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Path:
    """A real run of campaign-oct's layer-slice and layer-p2 points through `orchestrate run`
    on this machine: E2B L0 2K and the tiny shape at a few steps, and the slice at the published
    5,000 steps x 3 repetitions (one worker of 90: about a second each), so that a host with
    the published core gets a per-core verdict of its own measurement."""
    root = tmp_path_factory.mktemp("layer-run")
    doc = yaml.safe_load(CAMPAIGN.read_text())
    keep = {"layer-p2", "layer-slice"}
    doc["experiments"] = [e for e in doc["experiments"] if e["name"] in keep]
    doc["profiles"]["quick"]["experiments"] = {
        "layer-p2": {
            "sweep": {
                "matrix": {
                    "layer": ["tiny", "E2B L0"],
                    "context": [2048],
                    "all_gather": [True],
                    "gemv": ["avx"],
                    "steps": [12],
                },
                "exclude": [],
            },
            "repetitions": 1,
        },
        "layer-slice": {
            "sweep": {
                "matrix": {
                    "layer": ["E2B L0"],
                    "context": [2048],
                    "workers": [90],
                    "gemv": ["avx"],
                    "steps": [5000],
                }
            },
            "repetitions": 3,
        },
    }
    return run_quick(doc, root, "campaign-oct.yaml", timeout=900)


@pytest.mark.parametrize("host", hostclass.HOSTS)
def test_real_layer_run_reaches_the_report_with_verdicts(real_run, host, tmp_path):
    """Host-dependent, every branch on any machine (tests/support/hostclass.py): the stored runs
    of this machine judged under its own facts and under each recorded host's. The slice cells
    are per core with the published core, "core class differs" on another core, judged as
    published on the published host; a run that recorded the avx2 kernel says "kernel differs"
    wherever the cell is compared; the socket-level step p50 is never comparable on 2 cores."""
    spec = load_spec(real_run / "campaign-oct.yaml", profile="quick")
    results = hostclass.judged_as(real_run, "campaign-oct", host, spec, tmp_path)
    rep = build_report("campaign-oct", results=results, spec_path=real_run / "no-spec.yaml")
    rows = {r.cell.id: r for r in rep.rows}
    slice_row = rows["real-layer-phases/e2b-l0-2k-worker/gateup"]
    p50 = rows["real-layer/e2b-l0-2k-avx-on/step_p50"]
    assert slice_row.measured is not None and slice_row.measured.n == 3
    assert p50.measured is not None and p50.measured.n == 1
    topo = hostclass.host_topology(results, "campaign-oct")
    klass = hostclass.classify(topo, rep.published[0].host)
    with Store(store_path("campaign-oct", real_run)) as store:
        frame = store.metrics_frame("campaign-oct")
    (ran,) = set(frame[frame.experiment == "layer-slice"]["dim.gemv"].dropna())
    print(
        f"branch: facts of {host} ({topo['cpu_model']}, {topo['cores']} cores): {klass}; "
        f"slice ran {ran}: {slice_row.verdict} | step p50: {p50.verdict}"
    )
    assert slice_row.per_core_text.startswith("7.2 → ")
    kernel_differs = "kernel differs: avx2 ran, avx512 published"
    if klass == hostclass.OTHER_CORE:
        assert slice_row.kind == NOT_COMPARABLE
        assert slice_row.verdict.startswith("not comparable: core class differs (")
        assert slice_row.verdict.endswith(" vs Intel Xeon 6975P-C)")
    elif ran == "avx2":  # the published core or host, but the portable kernel ran
        assert slice_row.kind == NOT_COMPARABLE and kernel_differs in slice_row.verdict
    elif klass == hostclass.PUBLISHED_CORE:
        assert slice_row.kind in PER_CORE_KINDS, slice_row.verdict
        assert "per core" in slice_row.verdict and "core class: " in slice_row.verdict
    else:  # the published host: judged as published, on the measured value itself
        assert slice_row.kind in MEASURED_KINDS and "per core" not in slice_row.verdict
    assert p50.kind == NOT_COMPARABLE  # a 2-core run is never the published socket
    if ran == "avx2":
        assert kernel_differs in p50.verdict
    want = {
        hostclass.OTHER_CORE: "published host is Xeon 6975P-C (96 cores)",
        hostclass.PUBLISHED_CORE: "needs 96 cores (host has 2)",
        hostclass.PUBLISHED_HOST: "conditions differ: workers ",
    }[klass]
    assert want in p50.verdict, p50.verdict
    assert not [r for r in rep.rows if "real-layer stage" in r.verdict]


def test_real_slice_output_has_what_the_synthesized_fixture_writes(real_run):
    """The synthesized GNR slice fixture writes the records a real slice run prints."""
    from tests.published.gnr_slice_synthesized import slice_output

    with Store(store_path("campaign-oct", real_run)) as store:
        frame = store.metrics_frame("campaign-oct")
    real = frame[frame.experiment == "layer-slice"]
    synth = {json.loads(ln)["name"] for ln in slice_output().splitlines()[1:]}
    assert synth <= set(real.metric)
    assert set(real[real.metric == "phase_compute"]["dim.phase"]) == set(PHASES)
    derived = {r["metric"] for r in derive(real.to_dict("records"))}
    assert {"gateup_us", "down_us", "compute_total", "sync_bcast"} <= derived


def _gnr_report(tmp_path, phases=PHASES, facts=None):
    gnr_recorded.fill_results(tmp_path, facts=facts)
    add_slice_runs(tmp_path, phases)
    rep = build_report("campaign-oct", results=tmp_path, spec_path=tmp_path / "no-spec.yaml")
    return {r.cell.id: r for r in rep.rows if r.cell.table == "real-layer-phases"}


def test_slice_cells_are_per_core_on_the_published_core(tmp_path):
    """Recorded GNR guest facts + the SYNTHESIZED slice run: per-phase compute next to the
    published 7.2 / 3.1 / 20 µs as per-core cells; gate/up moved 1.5x deviates alone."""
    rows = _gnr_report(tmp_path / "a")
    assert {r.kind for r in rows.values()} == {REPRODUCED_PER_CORE}, {
        k: r.verdict for k, r in rows.items()
    }
    gateup = rows["real-layer-phases/e2b-l0-2k-worker/gateup"]
    assert "core class: vendor GenuineIntel" in gateup.verdict
    assert gateup.per_core_text.startswith("7.2 → 7.2")
    compute = rows["real-layer-phases/e2b-l0-2k-worker/compute"]
    assert abs(compute.per_core_measured.median - 20.0) < 0.1
    moved = _gnr_report(tmp_path / "b", {**PHASES, "gateup": PHASES["gateup"] * 1.5})
    kinds = {k.rsplit("/", 1)[1]: r.kind for k, r in moved.items()}
    assert kinds == {
        "gateup": DEVIATES_PER_CORE,
        "down": REPRODUCED_PER_CORE,
        "compute": DEVIATES_PER_CORE,
    }


def test_slice_cells_on_an_amd_host_say_core_class_differs(tmp_path):
    amd = {
        "topology": topology_facts("this-machine"),
        "isolation": None,
        "isolation_applied": False,
    }
    rows = _gnr_report(tmp_path, facts=amd)
    for r in rows.values():
        assert r.kind == NOT_COMPARABLE
        assert r.verdict.startswith(
            "not comparable: core class differs (AMD EPYC vs Intel Xeon 6975P-C)"
        ), r.verdict
        assert r.per_core_text.split(" → ")[1] != "—"  # the measured per-phase figure shown


def test_avx512_rows_run_on_avx2_say_kernel_differs(tmp_path):
    """On the published host (c8i facts), runs that recorded the portable avx2 kernel do not
    reproduce AVX-512 rows: "kernel differs"; AMX rows and the native/gemv-free rows are not
    touched; recorded as avx512 the same cells reproduce."""
    pub = load_published(PUBLISHED)
    facts = {"c8i": {"topology": topology_facts("c8i-metal-48xl")}}
    for gemv, want in (("avx2", NOT_COMPARABLE), ("avx512", REPRODUCED)):
        with Store(tmp_path / f"{gemv}.sqlite") as store:
            runs = fill_store(store, pub, "campaign-oct", recorded={"gemv": gemv})
            frame = store.metrics_frame("campaign-oct")
        # fill_store records the kernel per row; rows published as amx keep "amx"
        frame.loc[frame["dim.gemv"] == "avx512", "dim.gemv"] = gemv
        for r in runs:
            if r["meta"].get("gemv") == "avx512":
                r["meta"]["gemv"] = gemv
        rows = [
            r
            for r in compare(pub, frame, facts, runs=runs)
            if r.cell.experiment in LAYER_EXPS
            and r.cell.conditions.get("gemv") == "avx"
            and not r.cell.unmeasured
            and not r.cell.per_core
        ]
        assert len(rows) > 250
        assert {r.kind for r in rows} == {want}, {r.verdict for r in rows if r.kind != want}
        if gemv == "avx2":
            assert all("kernel differs: avx2 ran, avx512 published" in r.verdict for r in rows)
