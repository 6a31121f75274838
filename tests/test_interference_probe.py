"""The interference probe (issue 24 item 1) and the campaign-wide interleaved order (item 2):
`ladder --probe` on this CPU, the probe around every point of a real `orchestrate run`, the
readings stored with the run, and how the report turns them into disturbed or quiet runs
(socketlab.report.interference). No timed assertion: rates are compared with rates read by the
same probe, and only where the test sets the numbers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from socketlab.errors import SpecError
from socketlab.probe import cpus_of, point_probe, probe_bytes, reading
from socketlab.report.interference import (
    RunState,
    campaign_best,
    is_guest,
    references,
    run_states,
    summary_text,
)
from socketlab.report.probe_quiet import QuietClass, class_of, load, recorded_references
from socketlab.spec.expand import expand_points
from socketlab.spec.load import load_spec
from socketlab.store import Store, store_path
from tests.support import hostclass
from tests.support.campaign import write_spec

REPO = Path(__file__).resolve().parents[1]
ORCHESTRATE = Path(sys.executable).parent / "orchestrate"
CAMPAIGN = REPO / "experiments" / "campaign-oct.yaml"


cpu_flags = hostclass.proc_cpu_flags  # this machine's /proc/cpuinfo flags


@pytest.fixture(scope="module")
def ladder() -> Path:
    build = REPO / "native" / "build" / "cc"
    subprocess.run(
        ["make", "-s", "-C", str(REPO / "native"), f"BUILD={build}", str(build / "ladder")],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return build / "ladder"


def test_native_probe_reads_the_units_this_core_has(ladder):
    """Host-dependent (prints its branch): l2-read everywhere, amx-stream where CPUID has AMX,
    bf16-dot where it has AVX-512 BF16; the missing ones are named in the meta record."""
    proc = subprocess.run(
        [str(ladder), "--probe", "--cpus", "0", "--size", "256K"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    r = reading(proc.stdout, at=1.0)
    flags = cpu_flags()
    want = (
        {"l2-read"}
        | ({"amx-stream"} if {"amx_tile", "amx_bf16"} <= flags else set())
        | ({"bf16-dot"} if "avx512_bf16" in flags else set())
    )
    print(f"branch: probe units on this CPU: {sorted(r['units'])}; missing {r['units_missing']}")
    assert set(r["units"]) == want
    assert set(r["units_missing"]) == {"l2-read", "amx-stream", "bf16-dot"} - want
    assert all(set(v) == {"0"} and v["0"] > 0 for v in r["units"].values())
    assert r["rate_units"] == dict.fromkeys(want, "GB/s")
    assert r["steal_ticks"]["0"] >= 0  # /proc/stat: every Linux has steal


def test_native_probe_usage_errors_are_one_line(ladder):
    for args, why in (
        (["--probe", "--kernel", "avx512-read"], "leave out --kernel"),
        (["--probe", "--size", "10"], "is smaller than the"),
        (["--probe", "--cpus", "0-"], "--cpus"),
    ):
        proc = subprocess.run([str(ladder), *args], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and why in proc.stderr, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1 and not proc.stdout


def test_probe_planning_is_pure():
    """Which points are probed, on which CPUs, over how many bytes."""
    topo = {"caches": {"L2": {"size_bytes": 2 << 20}}}
    settings = {"build": "native", "below": 0.75}
    assert cpus_of(None, ["x", "--cpus", "3-4"]) == "3-4"
    assert cpus_of(None, ["x", "--cpus=5"]) == "5" and cpus_of("7", ["--cpus", "1"]) == "7"
    assert cpus_of(None, ["sleep", "1"]) is None
    assert probe_bytes(topo) == 1 << 20 and probe_bytes({}) == 1 << 20
    assert probe_bytes({"caches": {"L2": {"size_bytes": 1 << 20}}}) == 512 << 10
    assert point_probe(settings, "native", "build/cc", None, ["l", "--cpus", "1"], topo) == {
        "binary": "build/cc/ladder",
        "cpus": "1",
        "bytes": 1 << 20,
        "below": 0.75,
    }
    assert point_probe(settings, "other", "build/cc", "1", [], topo) is None
    assert point_probe(settings, "native", "build/cc", None, ["sleep"], topo) is None
    assert point_probe(None, "native", "build/cc", "1", [], topo) is None


def _reading(at: float, amx: float, read: float = 170.0, steal: int = 0, cpu: str = "1"):
    return {
        "at": at,
        "units": {"amx-stream": {cpu: amx}, "l2-read": {cpu: read}},
        "rate_units": {"amx-stream": "GB/s", "l2-read": "GB/s"},
        "steal_ticks": {cpu: steal},
    }


def test_disturbed_is_below_the_fraction_of_the_hosts_best():
    """The reference is each host's best reading; a run is disturbed when a reading before or
    after it fell below `below` x that best on any CPU, or when steal took more than 1% of the
    time between them; a failed probe leaves the run unprobed, never quiet."""
    runs = [
        {
            "run_key": "a",
            "host": "h",
            "probe": {"before": _reading(0, 130), "after": _reading(3, 125), "below": 0.8},
        },
        {
            "run_key": "b",
            "host": "h",
            "probe": {"before": _reading(10, 95.9), "after": _reading(13, 130), "below": 0.8},
        },
        {
            "run_key": "c",
            "host": "h",
            "probe": {
                "before": _reading(20, 110),
                "after": _reading(23, 130, steal=5),
                "below": 0.8,
            },
        },
        {
            "run_key": "d",
            "host": "h",
            "probe": {"before": {"at": 30, "error": "exit 3"}, "after": _reading(33, 130)},
        },
        {
            "run_key": "e",
            "host": "other",
            "probe": {"before": _reading(0, 60), "after": _reading(3, 60), "below": 0.8},
        },
        {"run_key": "f", "host": "h"},
    ]
    assert campaign_best(runs) == {
        "h": {"amx-stream": 130.0, "l2-read": 170.0},
        "other": {"amx-stream": 60.0, "l2-read": 170.0},
    }
    assert {u: r.value for u, r in references(runs)["h"].items()} == campaign_best(runs)["h"]
    states = run_states(runs)
    assert states["a"] == RunState(True, False, "")
    assert states["b"].disturbed and states["b"].why == (
        "probe amx-stream 95.9 vs quiet 130 GB/s (0.74x, below 0.8x) before the run on cpu 1"
    )
    assert states["c"].disturbed and states["c"].why == (
        "steal 1.7% of the run on cpu 1 (above 1%)"
    )  # 5 ticks of 10 ms over 3 s
    assert states["d"] == RunState() and states["f"] == RunState()  # not probed
    assert states["e"] == RunState(True, False, "")  # its own host's best, not h's
    assert is_guest({"flags": ["fpu", "hypervisor"]}) and not is_guest({"flags": ["fpu"]})


GNR_TOPOLOGY = {  # the recorded Granite Rapids guest's facts, as far as the class match reads
    "vendor": "GenuineIntel",
    "family": 6,
    "caches": {"L1d": {"size_bytes": 48 << 10}, "L2": {"size_bytes": 2 << 20}},
}
GNR = QuietClass(
    "gnr",
    {"vendor": "GenuineIntel", "family": 6, "l1d_kib": 48, "l2_kib": 2048},
    {"amx-stream": 120.0, "l2-read": 170.0},
    "a test's words",
)


def test_a_recorded_quiet_rate_exposes_a_neighbour_who_stayed_the_whole_campaign():
    """Every run of a campaign read low together (a neighbour for its whole length): against
    the campaign's best nothing is disturbed; against the core class's recorded quiet rate every
    run is, and the message names the recorded source. A campaign above the recorded rate keeps
    its own best; a host of another class, or a unit not recorded, is unaffected."""
    slow = [
        {
            "run_key": k,
            "host": "h",
            "probe": {"before": _reading(i, 45.0), "after": _reading(i + 3, 44.0), "below": 0.8},
        }
        for i, k in enumerate("abc")
    ]
    assert not any(s.disturbed for s in run_states(slow).values())  # the old blind spot
    recorded = recorded_references({"h": {"topology": GNR_TOPOLOGY}}, [GNR])
    assert recorded == {"h": GNR}
    states = run_states(slow, recorded)
    assert all(s.disturbed for s in states.values())
    assert states["a"].why == (
        "probe amx-stream 44 vs quiet 120 GB/s (recorded for gnr; 0.37x, below 0.8x) "
        "after the run on cpu 1"
    )
    refs = references(slow, recorded)["h"]
    assert (refs["amx-stream"].value, refs["amx-stream"].source) == (120.0, "recorded for gnr")
    assert (refs["l2-read"].value, refs["l2-read"].source) == (170.0, "the campaign's best")
    line = summary_text(slow, recorded)["h"]
    assert line.startswith("quiet reference (recorded for gnr) amx-stream 120 GB/s; ")
    assert "(the campaign's best) l2-read 170 GB/s" in line and "3 disturbed" in line, line
    fast = [{**r, "probe": {**r["probe"], "before": _reading(0, 150.0)}} for r in slow]
    assert references(fast, recorded)["h"]["amx-stream"].value == 150.0  # its own best
    amd = {**GNR_TOPOLOGY, "vendor": "AuthenticAMD"}
    assert class_of(amd, [GNR]) is None and recorded_references({"h": amd}, [GNR]) == {}
    l2_1m = {**GNR_TOPOLOGY, "caches": {**GNR_TOPOLOGY["caches"], "L2": {"size_bytes": 1 << 20}}}
    assert class_of(l2_1m, [GNR]) is None


def test_the_shipped_quiet_file_loads_and_matches_the_recorded_guest():
    """experiments/probe/quiet.yaml holds a class for the published core, matched by the
    recorded Granite Rapids guest's own facts file."""
    from socketlab.topology import topology_from_snapshot

    classes = load()
    assert classes and all(c.units and c.measured for c in classes)
    topo = topology_from_snapshot(hostclass.snapshot("gnr-kvm-2vcpu")).facts()
    found = class_of(topo, classes)
    assert found is not None and {"l2-read", "amx-stream", "bf16-dot"} <= set(found.units)
    zen4 = topology_from_snapshot(hostclass.snapshot("zen4-kvm-2vcpu")).facts()
    assert class_of(zen4, classes) is None


@pytest.mark.parametrize(
    "text, error",
    [
        ("format: other/1\nclasses: []\n", "format: expected socketlab.probe-quiet/1"),
        ("format: socketlab.probe-quiet/1\n", "classes: expected a list of core classes"),
        (
            "format: socketlab.probe-quiet/1\nclasses: [{id: x, core: {vendor: V}, units: "
            "{a: 1}, measured: m}]\n",
            "classes[0].core: expected a mapping of exactly vendor, family, l1d_kib, l2_kib",
        ),
        (
            "format: socketlab.probe-quiet/1\nclasses: [{id: x, core: {vendor: V, family: 6, "
            "l1d_kib: 48, l2_kib: 2048}, units: {l2-read: -1}, measured: m}]\n",
            "classes[0].units.l2-read: expected a positive number (GB/s per CPU)",
        ),
        (
            "format: socketlab.probe-quiet/1\nclasses: [{id: x, core: {vendor: V, family: 6, "
            "l1d_kib: 48, l2_kib: 2048}, units: {l2-read: 1}, measured: m, extra: 1}]\n",
            "classes[0].extra: expected one of id, core, units, measured, probe_bytes",
        ),
        ("format: [unclosed\n", "YAML syntax error"),
    ],
)
def test_a_bad_quiet_file_is_one_line_naming_file_and_field(tmp_path, text, error):
    path = tmp_path / "quiet.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as exc:
        load(path)
    msg = str(exc.value)
    assert msg.startswith(str(path)) and error in msg and "\n" not in msg, msg
    assert load(tmp_path / "absent.yaml") == []  # no file: the campaign's best decides


def test_a_real_run_stores_the_probe_around_each_point(tmp_path):
    """Through `orchestrate run` on this machine: every point of the probe's build carries a
    reading taken right before it started and one right after it ended, on its CPUs; a point
    without a build is not probed; the run.json keeps the same record."""
    flags = cpu_flags()
    kernel = "avx512-read" if "avx512f" in flags else "avx2-read"
    spec = write_spec(
        tmp_path / "s.yaml",
        {
            "campaign": "probe-run",
            "isolation": {"housekeeping_per_node": 1},
            "builds": {"native": {"source": ".", "target": "all"}},
            "probe": {"build": "native", "below": 0.7},
            "experiments": [
                {
                    "name": "read",
                    "build": "native",
                    "repetitions": 2,
                    "command": f"{{{{ build.dir }}}}/ladder --kernel {kernel} --size 65536 "
                    "--cpus {{ facts.workers_list }} --seconds 0.05 --reps 1",
                },
                {"name": "idle", "command": ["sleep", "0.1"]},
            ],
        },
    )
    proc = subprocess.run(
        [str(ORCHESTRATE), "run", str(spec), "--plain", "--results", str(tmp_path / "r")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    with Store(store_path("probe-run", tmp_path / "r"), create=False) as store:
        runs = store.runs("probe-run")
    reads = [r for r in runs if r.experiment == "read"]
    assert len(reads) == 2 and all(r.status == "ok" for r in runs)
    for r in reads:
        probe = r.extra["probe"]
        assert probe["below"] == 0.7
        before, after = probe["before"], probe["after"]
        assert set(before["units"]["l2-read"]) == set(r.cpus or before["units"]["l2-read"])
        assert before["at"] <= r.started and after["at"] >= r.started + r.duration_s - 0.5
        saved = json.loads((Path(r.raw_dir) / "run.json").read_text())["probe"]
        assert saved == probe
    (idle,) = [r for r in runs if r.experiment == "idle"]
    assert "probe" not in idle.extra


def _two_experiments(tmp_path, **top):
    tmp_path.mkdir(parents=True, exist_ok=True)
    return load_spec(
        write_spec(
            tmp_path / "o.yaml",
            {
                "campaign": "o",
                **top,
                "experiments": [
                    {
                        "name": "a",
                        "command": ["true", "{{ x }}"],
                        "sweep": {"matrix": {"x": [1, 2]}},
                        "repetitions": 3,
                        "warmup": 1,
                    },
                    {"name": "b", "command": ["true"], "repetitions": 2},
                ],
            },
        )
    )


def test_interleaved_campaign_order_runs_round_by_round(tmp_path):
    """`order: interleaved`: repetition k of every point of every experiment before k+1 of
    any; a point's warm-up right before its first run; the default keeps experiment after
    experiment."""
    entry = hostclass.entry("gnr-kvm-2vcpu", _two_experiments(tmp_path))

    def order(spec):
        return [
            (p.experiment, p.params.get("x"), p.repetition)
            for p in expand_points(spec, {"h": entry}).points
        ]

    assert order(_two_experiments(tmp_path / "i", order="interleaved")) == [
        ("a", 1, -1),
        ("a", 1, 0),
        ("a", 2, -1),
        ("a", 2, 0),
        ("b", None, 0),
        ("a", 1, 1),
        ("a", 2, 1),
        ("b", None, 1),
        ("a", 1, 2),
        ("a", 2, 2),
    ]
    assert order(_two_experiments(tmp_path / "s")) == [
        ("a", 1, -1),
        ("a", 1, 0),
        ("a", 1, 1),
        ("a", 1, 2),
        ("a", 2, -1),
        ("a", 2, 0),
        ("a", 2, 1),
        ("a", 2, 2),
        ("b", None, 0),
        ("b", None, 1),
    ]


def test_spec_and_profile_errors_are_one_line(tmp_path):
    with pytest.raises(
        SpecError,
        match=r"o.yaml:\d+: probe.build: no build 'nat' \(the spec's "
        r"builds: none declared\); expected the build whose ladder runs the probe",
    ):
        _two_experiments(tmp_path, probe={"build": "nat"})
    with pytest.raises(SpecError, match=r"order"):
        _two_experiments(tmp_path / "b", order="round-robin")
    path = write_spec(
        tmp_path / "p.yaml",
        {
            "campaign": "p",
            "experiments": [{"name": "a", "command": ["true"]}],
            "profiles": {"one": {"only": ["a", "zzz"]}},
        },
    )
    with pytest.raises(SpecError, match=r"profiles.one.only: no experiment named 'zzz'"):
        load_spec(path, profile="one")


def test_per_core_profile_plans_every_per_core_cell_interleaved():
    """campaign-oct --profile per-core on the recorded GNR guest: only the per-core
    experiments, at 2 s x 1 rep per run and 3 repetitions, interleaved, each point probed on
    its CPUs; every per-core cell of the published file has its point; the planned seconds
    stay far under 30 minutes."""
    from socketlab.report.published import PUBLISHED_DIR, load_published

    spec = load_spec(CAMPAIGN, profile="per-core")
    assert spec.order == "interleaved" and spec.probe == {"build": "native", "below": 0.8}
    plan = expand_points(spec, {"gnr": hostclass.entry("gnr-kvm-2vcpu", spec)})
    assert plan.skipped == []
    points = [p for p in plan.points if not p.warmup]
    assert {p.experiment for p in points} == {
        "ladder",
        "ladder-amx",
        "compute",
        "compute-amx",
        "latency",
        "layer-slice",
    }
    assert all(p.extra.get("probe") for p in points)
    assert [p.repetition for p in points] == sorted(p.repetition for p in points)
    pub = load_published(PUBLISHED_DIR / "sram-oct-2026.yaml")
    for cell in (c for c in pub.cells if c.per_core is not None and not c.unmeasured):
        if cell.conditions.get("scope") in ("adjacent-node", "far-node"):
            continue  # needs another NUMA node: not a per-core cell on one node
        match = [
            p
            for p in points
            if p.experiment == cell.experiment
            and all(str(p.params.get(k)) == str(v) for k, v in cell.join_params().items())
        ]
        assert len(match) == 3, (cell.id, len(match))
    seconds = 0.0
    for p in points:
        argv = list(p.argv)
        if "--seconds" in argv:
            assert (
                argv[argv.index("--seconds") + 1] == "2" and argv[argv.index("--reps") + 1] == "1"
            )
            seconds += 2
    print(
        f"per-core profile on the GNR guest: {len(points)} runs, {seconds:.0f} s of timed "
        "ladder loops"
    )
    assert len(points) == 69 and seconds < 600


def test_a_per_core_profile_run_is_judged_per_core(tmp_path):
    """Host-dependent, every branch (tests/support/hostclass.py): one point of campaign-oct's
    per-core profile (the L2 read at 1.0 MiB THP, 2 s x 1 rep per run, 3 runs, probed) really
    run here, then judged under each host class: the three runs count as the published 3 reps
    of 2 s (no "profile" condition), so on the published core the verdict is per core, whatever
    the noise makes it; on another core "core class differs"."""
    import yaml

    from socketlab.report.compare import (
        DEVIATES_PER_CORE,
        INCONCLUSIVE,
        NOT_COMPARABLE,
        NOT_RUN,
        REPRODUCED_PER_CORE,
    )
    from socketlab.report.gather import build_report

    if "avx512f" not in cpu_flags():
        pytest.skip("branch: this CPU lacks AVX-512: the ladder experiment is not planned here")
    doc = yaml.safe_load(CAMPAIGN.read_text())
    doc["experiments"] = [e for e in doc["experiments"] if e["name"] == "ladder"]
    per_core = doc["profiles"]["per-core"]
    per_core["only"] = ["ladder"]
    per_core["experiments"] = {
        "ladder": {
            **per_core["experiments"]["ladder"],
            "sweep": {
                "matrix": {"kernel": ["avx512-read"], "pages": ["thp"], "mib_per_core": [1.0]},
                "exclude": [],
            },
        }
    }
    doc["profiles"] = {"per-core": per_core}
    spec_path = tmp_path / "campaign-oct.yaml"
    spec_path.write_text(yaml.safe_dump(doc, sort_keys=False))
    results = tmp_path / "r"
    proc = subprocess.run(
        [
            str(ORCHESTRATE),
            "run",
            str(spec_path),
            "--profile",
            "per-core",
            "--plain",
            "--results",
            str(results),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    spec = load_spec(spec_path, profile="per-core")
    for host in hostclass.HOSTS:
        judged = hostclass.judged_as(results, "campaign-oct", host, spec, tmp_path / host)
        rep = build_report("campaign-oct", results=judged, spec_path=spec_path)
        r = next(x for x in rep.rows if x.cell.id == "ladder/l2-1.0-thp-read/bw_total")
        topo = hostclass.host_topology(judged, "campaign-oct")
        klass = hostclass.classify(topo, rep.published[0].host)
        print(f"branch: facts of {host}: {klass}: {r.verdict}")
        probe_line = rep.provenance["interference"]["localhost"]
        assert probe_line.startswith("quiet reference (")  # the campaign's best or recorded
        assert "; 3 of 3 runs probed, " in probe_line, probe_line
        assert r.measured is not None and r.measured.n == 3
        assert "profile" not in r.verdict and "reps" not in r.verdict.split(";")[0]
        if klass == hostclass.PUBLISHED_CORE:
            assert r.kind in (REPRODUCED_PER_CORE, DEVIATES_PER_CORE, INCONCLUSIVE)
            assert "per core" in r.verdict and "core class: " in r.verdict
            if r.kind == INCONCLUSIVE:  # says why, with the numbers
                assert "; spread: " in r.verdict or "; disturbed: " in r.verdict
        elif klass == hostclass.OTHER_CORE:
            assert r.kind == NOT_COMPARABLE and "core class differs" in r.verdict
        else:  # the published host: a 90-worker total against one core's
            assert r.kind == NOT_COMPARABLE and "workers 1 vs 90" in r.verdict
        assert r.kind != NOT_RUN
