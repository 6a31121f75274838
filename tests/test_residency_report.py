"""`requires: {devices: [...]}`, the device facts behind it, and the §5.4 P1 residency cells
(experiments/published/residency-oct-2026.yaml) joined to experiments/residency.yaml: plain
cells measured (not comparable off the published host), locked cells "not run" with the reason
the host lacks /dev/pseudo_lock."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from socketlab.errors import PlanError
from socketlab.paths import SCHEMAS
from socketlab.report.compare import NOT_COMPARABLE, NOT_RUN
from socketlab.report.gather import build_report
from socketlab.report.published import load_published
from socketlab.spec.expand import expand_points
from socketlab.spec.hosts import host_entry
from socketlab.spec.load import load_spec, sweep_points
from socketlab.topology import host_facts_module, read_topology, topology_from_snapshot
from tests.fixtures.topology import snapshot
from tests.support import hostclass
from tests.support.campaign import run_quick, stored

REPO = Path(__file__).resolve().parents[1]
RESIDENCY = REPO / "experiments" / "residency.yaml"
PUBLISHED = REPO / "experiments" / "published" / "residency-oct-2026.yaml"
NO_MODULES = (
    "host {h} lacks /dev/pseudo_lock (pseudo-lock driver not loaded: kernel without module support)"
)


def entry(spec, devices: dict[str, bool] | None, fixture: str = "c8i-metal-48xl") -> dict:
    snap = dict(snapshot(fixture))
    if devices is not None:
        snap["devices"] = devices
    return host_entry(topology_from_snapshot(snap), spec)


# --- the device facts ----------------------------------------------------------------------


def test_host_facts_reports_the_device_set_of_a_tree(tmp_path):
    hf = host_facts_module()
    snap = dict(snapshot("two-socket"))
    want = {
        d: d in ("/dev/pseudo_lock", "/proc/modules", "/sys/fs/resctrl") for d in hf.DEVICE_PATHS
    }
    snap["devices"] = want
    hf.write_tree(snap, str(tmp_path))
    assert hf.snapshot(str(tmp_path))["devices"] == want
    assert read_topology(tmp_path).devices == (
        "/dev/pseudo_lock",
        "/proc/modules",
        "/sys/fs/resctrl",
    )
    assert read_topology(tmp_path).facts()["devices"] == sorted(d for d, p in want.items() if p)


def test_resctrl_counts_only_when_mounted(tmp_path):
    # the directory exists on any kernel built with resctrl; only a mount makes it usable
    (tmp_path / "sys" / "fs" / "resctrl").mkdir(parents=True)
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "mounts").write_text("proc /proc proc rw 0 0\n")
    assert host_facts_module().snapshot(str(tmp_path))["devices"]["/sys/fs/resctrl"] is False
    (tmp_path / "proc" / "mounts").write_text("resctrl /sys/fs/resctrl resctrl rw 0 0\n")
    assert host_facts_module().snapshot(str(tmp_path))["devices"]["/sys/fs/resctrl"] is True


def test_spec_schema_names_exactly_the_collected_paths():
    schema = json.loads((SCHEMAS / "spec.schema.json").read_text())
    listed = schema["$defs"]["requires"]["properties"]["devices"]["items"]["enum"]
    assert tuple(listed) == host_facts_module().DEVICE_PATHS


def test_snapshot_with_a_bad_device_map_is_one_line():
    from socketlab.errors import HostError

    snap = dict(snapshot("two-socket"), devices={"/dev/pseudo_lock": "yes"})
    with pytest.raises(HostError, match=r"devices\./dev/pseudo_lock: expected true or false"):
        topology_from_snapshot(snap)


# --- requires: devices in the plan ---------------------------------------------------------


def _spec(tmp_path, on_unmet="skip"):
    path = tmp_path / "s.yaml"
    path.write_text(
        "schema_version: 1\ncampaign: t\nexperiments:\n"
        f"  - {{name: locked, command: 'true', requires: {{devices: [/dev/pseudo_lock], "
        f"on_unmet: {on_unmet}}}}}\n"
        "  - {name: plain, command: 'true'}\n"
    )
    return load_spec(path)


@pytest.mark.parametrize(
    "devices, reason",
    [
        ({}, NO_MODULES),
        (None, NO_MODULES),  # a snapshot recorded before the field: nothing reported present
        (
            {"/proc/modules": True},
            "host {h} lacks /dev/pseudo_lock (pseudo-lock driver not loaded; "
            "playbooks/sram_driver.yml loads it)",
        ),
    ],
)
def test_missing_device_skips_with_the_precise_reason(tmp_path, devices, reason):
    spec = _spec(tmp_path)
    plan = expand_points(spec, {"xeon": entry(spec, devices)})
    assert [p.experiment for p in plan.points] == ["plain"]
    assert [(s.experiment, s.reason) for s in plan.skipped] == [("locked", reason.format(h="xeon"))]


def test_present_device_plans_the_points(tmp_path):
    spec = _spec(tmp_path)
    plan = expand_points(spec, {"xeon": entry(spec, {"/dev/pseudo_lock": True})})
    assert sorted(p.experiment for p in plan.points) == ["locked", "plain"]
    assert plan.skipped == []


def test_missing_device_with_on_unmet_fail_refuses_the_plan(tmp_path):
    spec = _spec(tmp_path, on_unmet="fail")
    with pytest.raises(PlanError, match="lacks /dev/pseudo_lock .*on_unmet is 'fail'"):
        expand_points(spec, {"xeon": entry(spec, {})})


# --- experiments/residency.yaml and the published cells ----------------------------------


def test_residency_locked_points_need_the_device():
    for profile in (None, "quick"):
        spec = load_spec(RESIDENCY, profile=profile)
        assert spec.experiment("residency-locked").requires.devices == ("/dev/pseudo_lock",)
    quick = load_spec(RESIDENCY, profile="quick")
    plan = expand_points(quick, {"c8i": entry(quick, {})})
    reasons = {s.experiment: s.reason for s in plan.skipped}
    assert reasons["residency-locked"] == NO_MODULES.format(h="c8i")
    loaded = entry(quick, {"/dev/pseudo_lock": True, "/proc/modules": True})
    assert "residency-locked" in {
        p.experiment for p in expand_points(quick, {"c8i": loaded}).points
    }
    # the full profile on an AMD host: both the missing flags and the missing device, each said
    full = load_spec(RESIDENCY)
    plan = expand_points(full, {"genoa": entry(full, {}, "genoa-1s-nps1")})
    reasons = {s.experiment: s.reason for s in plan.skipped}
    assert reasons["residency-locked"] == (
        "host genoa lacks CPU flags amx_tile, amx_bf16, cat_l2 and "
        "/dev/pseudo_lock (pseudo-lock driver not loaded: kernel without module support)"
    )
    assert reasons["residency-plain"] == "host genoa lacks CPU flags amx_tile, amx_bf16"


def test_published_p1_cells_join_the_residency_sweeps():
    pub = load_published(PUBLISHED)
    assert pub.campaign == load_spec(RESIDENCY).campaign == "residency"
    counts = {t.id: len(t.cells) for t in pub.tables}
    assert counts == {
        "p1-residency": 63,
        "p1-residency-avx": 14,
        "p1-kv-step": 5,
        "p1-gap": 6,
        "p1-long": 9,
    }
    spec = load_spec(RESIDENCY)
    sweeps = {e.name: (set(e.sweep.names), sweep_points(e.sweep)) for e in spec.experiments}
    unmatched = set()
    for cell in pub.cells:
        if cell.unmeasured:
            continue
        names, points = sweeps[cell.experiment]
        assert set(cell.join_params()) <= names, (cell.id, cell.join_params(), names)
        if not any(all(p[k] == v for k, v in cell.join_params().items()) for p in points):
            unmatched.add(cell.id.rsplit("/", 1)[0] + "/" + cell.experiment)
    # every cell has a point: the locked AVX-512 cells join residency-avx-locked, the locked
    # long run residency-long-locked
    assert unmatched == set()


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Path:
    """residency-avx, residency-locked and residency-avx-locked of the quick profile through
    `orchestrate run`."""
    root = tmp_path_factory.mktemp("residency-run")
    doc = yaml.safe_load(RESIDENCY.read_text())
    keep = {"residency-avx", "residency-locked", "residency-avx-locked"}
    doc["experiments"] = [e for e in doc["experiments"] if e["name"] in keep]
    doc["profiles"]["quick"]["experiments"] = {
        k: v for k, v in doc["profiles"]["quick"]["experiments"].items() if k in keep
    }
    return run_quick(doc, root, "residency.yaml", timeout=600)


@pytest.mark.parametrize("host", hostclass.HOSTS)
def test_real_run_report_says_measured_and_why_locked_did_not_run(real_run, host, tmp_path):
    """Host-dependent, every branch on any machine (tests/support/hostclass.py): this machine's
    stored runs judged under its own facts and each recorded host's. Plain AVX-512 cells are
    measured where the machine has AVX-512 and not comparable on 2 cores, with the reason the
    host class gives (another core: the host differs; the published core: the socket's cores
    it needs); locked cells are not run with the reason the plan gives for those facts."""
    spec = load_spec(real_run / "residency.yaml", profile="quick")
    results = hostclass.judged_as(real_run, "residency", host, spec, tmp_path)
    rep = build_report("residency", results=results, spec_path=real_run / "residency.yaml")
    rows = {r.cell.id: r for r in rep.rows}
    topo = hostclass.host_topology(results, "residency")
    devices, flags = set(topo["devices"]), set(topo["flags"])
    klass = hostclass.classify(topo, rep.published[0].host)
    ran = stored(real_run, "residency")
    measured_here = any(r.experiment == "residency-avx" and r.status == "ok" for r in ran.values())
    plain = rows["p1-residency-avx/w12-1344-avx512-c/plain_bw"]
    print(
        f"branch: facts of {host} ({topo['cpu_model']}, {topo['cores']} cores, devices "
        f"{sorted(devices)}): {klass}; residency-avx ran here: {measured_here}: "
        f"{plain.verdict}"
    )
    if not {"avx512f", "avx512bw"} <= flags:
        assert plain.kind == NOT_RUN and "lacks CPU flags" in plain.verdict
    elif not measured_here:  # this machine lacks AVX-512: nothing stored to judge
        assert plain.kind == NOT_RUN and plain.measured is None
    else:
        assert plain.measured is not None and plain.measured.n == 1
        assert plain.kind == NOT_COMPARABLE
        want = {
            hostclass.OTHER_CORE: "not comparable: host is ",
            hostclass.PUBLISHED_CORE: f"not comparable: needs 96 cores (host has {topo['cores']})",
            hostclass.PUBLISHED_HOST: "not comparable: profile quick: ",
        }[klass]
        assert plain.verdict.startswith(want), plain.verdict
        if klass == hostclass.OTHER_CORE:
            assert (
                f"({topo['cores']} cores), published host is Xeon 6975P-C (96 cores)"
                in plain.verdict
            )
        if klass == hostclass.PUBLISHED_HOST:  # the host, but not the published conditions
            assert "conditions differ: workers 1 vs 90" in plain.verdict
    locked = [
        r for r in rep.rows if r.cell.experiment in ("residency-locked", "residency-avx-locked")
    ]
    assert len(locked) == 44  # 11 rows x locked GB/s, slowest core, p99, held after
    if "/dev/pseudo_lock" not in devices:
        # without AVX-512 the avx-locked rows lack the flags too, and say both
        who = "localhost"
        why = re.compile(
            rf"not run: host {who} lacks (CPU flags [a-z0-9_, ]+ and )?"
            r"/dev/pseudo_lock \(pseudo-lock driver not loaded"
        )
        assert all(r.kind == NOT_RUN and why.match(r.verdict) for r in locked), {
            r.verdict for r in locked
        }
        if "/proc/modules" not in devices:
            assert all(r.verdict.endswith("kernel without module support)") for r in locked)
