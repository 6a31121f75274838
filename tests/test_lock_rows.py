"""The pseudo-lock rows of the published tables are experiments (issue 19, item 5).

Every published cell joined to a lock experiment (one that requires /dev/pseudo_lock in
campaign-oct.yaml or residency.yaml) reads "not run" with the plan's precise reason on a host
without the driver, and is planned with --lock --lock-ways N on a host that has it; the §5.7
and §5.8 lock tables hold the published figures; no published row waits for "a later issue".
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from socketlab.report.compare import NOT_RUN, compare
from socketlab.report.published import PUBLISHED_DIR, load_published
from socketlab.spec.expand import expand_points
from socketlab.spec.hosts import host_entry
from socketlab.spec.load import load_spec
from socketlab.topology import topology_from_snapshot
from tests.published.c8i_fixture import PUBLISHED_DEVICES

REPO = Path(__file__).resolve().parents[1]
TOPO = REPO / "tests" / "fixtures" / "topology"
#: spec -> its published file
CAMPAIGNS = {
    REPO / "experiments" / "campaign-oct.yaml": PUBLISHED_DIR / "sram-oct-2026.yaml",
    REPO / "experiments" / "residency.yaml": PUBLISHED_DIR / "residency-oct-2026.yaml",
}
DEVICE = "/dev/pseudo_lock"
NO_MODULES = f"{DEVICE} (pseudo-lock driver not loaded: kernel without module support)"
NOT_LOADED = f"{DEVICE} (pseudo-lock driver not loaded; playbooks/sram_driver.yml loads it)"
#: plow-campaign.md §5.7 and §5.8, verbatim
PUBLISHED_57 = (
    "32K C plain 193.5/211.5, lock12 206.0/220.9, lock14 220.4/239.4; 128K C "
    "631.3/697.6, 610.1/646.1, 630.8/680.3; 128K A 854.4/938.5, 807.4/842.4, "
    "795.7/831.3"
)
PUBLISHED_58 = (
    "E2B L0 2K 12 ways B1 49.2 → 52.4, B16 218.4 → 235.1; L0 16K B16 219.4 → 235.4; "
    "E2B L4 2K 14 ways B1 64.7 → 81.5, B16 397.9 → 425.8; L4 16K B1 111.6 → 134.9, "
    "B16 1255.9 → 1270.1"
)


def _entry(spec, name: str, devices: dict[str, bool] | None) -> dict:
    snap = json.loads((TOPO / f"{name}.json").read_text())
    if devices is not None:
        snap["devices"] = devices
    return host_entry(topology_from_snapshot(snap), spec)


def _lock_experiments(spec) -> set[str]:
    return {e.name for e in spec.experiments if DEVICE in e.requires.devices}


def _lock_cells(pub, locked: set[str]):
    return [c for c in pub.cells if c.experiment in locked and not c.unmeasured]


def test_no_published_row_waits_for_a_later_issue():
    files = sorted(PUBLISHED_DIR.glob("*.yaml"))
    assert len(files) >= 4
    for path in files:
        assert "later issue" not in path.read_text(), path.name
        for cell in load_published(path).cells:
            assert "pseudo-lock driver" not in (cell.unmeasured or ""), cell.id


def test_the_lock_tables_hold_the_published_figures():
    pub = load_published(PUBLISHED_DIR / "sram-oct-2026.yaml")
    kv = pub.table("kv-lock")
    got = [
        kv.cell(row, f"{arm}_{p}").value
        for row in ("32k-c", "128k-c", "128k-a")
        for arm in ("plain", "lock12", "lock14")
        for p in ("p50", "p99")
    ]
    assert got == [float(x) for x in re.findall(r"\d+\.\d", PUBLISHED_57)]
    res = pub.table("batching-residency")
    rows = (
        "e2b-l0-2k-b1",
        "e2b-l0-2k-b16",
        "e2b-l0-16k-b16",
        "e2b-l4-2k-b1",
        "e2b-l4-2k-b16",
        "e2b-l4-16k-b1",
        "e2b-l4-16k-b16",
    )
    got = [res.cell(r, col).value for r in rows for col in ("plain", "locked")]
    assert got == [float(x) for x in re.findall(r"\d+\.\d", PUBLISHED_58)]
    ways = {r: res.cell(r, "locked").conditions["ways"] for r in rows}
    assert ways == dict.fromkeys(rows[:3], 12) | dict.fromkeys(rows[3:], 14)
    # plain columns join the plain stages, locked ones the lock experiments; every row is
    # measured, path A (cold copies without prefetch) too since native/layer rotates KV copies
    assert not [c for c in kv.cells if c.unmeasured]
    assert {c.experiment for c in kv.cells} == {"layer-p4", "layer-p4-lock12", "layer-p4-lock14"}
    assert {c.experiment for c in res.cells} == {"layer-p5-amx", "layer-p5-amx-locked"}
    assert {c.row: c.join_params()["kv_path"] for c in kv.cells} == {
        "32k-c": "C",
        "128k-c": "C",
        "128k-a": "A",
    }


@pytest.mark.parametrize("spec_path", list(CAMPAIGNS), ids=lambda p: p.stem)
@pytest.mark.parametrize(
    "host, profile, devices, want",
    [
        ("this-machine", "quick", None, NO_MODULES),  # recorded facts: no driver, no modules
        ("c8i-metal-48xl", None, {}, NO_MODULES),  # the full profile needs the published cores
        ("c8i-metal-48xl", None, {"/proc/modules": True}, NOT_LOADED),
    ],
    ids=["this-machine-quick", "c8i-no-modules", "c8i-not-loaded"],
)
def test_lock_cells_without_the_driver_say_why(spec_path, host, profile, devices, want):
    """Every lock cell of the published tables reads "not run: <the plan's reason>", and that
    reason names the device and why it is missing."""
    spec = load_spec(spec_path, profile=profile)
    entry = _entry(spec, host, devices)
    plan = expand_points(spec, {"vm": entry})
    locked = _lock_experiments(spec)
    skips = {s.experiment: s.reason for s in plan.skipped}
    assert locked <= set(skips) and not [p for p in plan.points if p.experiment in locked]
    pub = load_published(CAMPAIGNS[spec_path])
    cells = _lock_cells(pub, locked)
    rows = compare(
        pub, [], {"vm": entry}, skips=[(s.host, s.experiment, s.reason) for s in plan.skipped]
    )
    verdicts = {r.cell.id: r.verdict for r in rows}
    for cell in cells:
        verdict = verdicts[cell.id]
        assert verdict == f"not run: {skips[cell.experiment]}", (cell.id, verdict)
        assert verdict.startswith("not run: host vm lacks ") and verdict.endswith(want)
    print(
        f"{spec_path.name} {profile or 'full'} on {host}: {len(cells)} lock cells: "
        f"{sorted({verdicts[c.id] for c in cells})}"
    )
    assert len(cells) == {"campaign-oct": 59, "residency": 47}[spec.campaign]


def test_lock_cells_on_this_host_say_why():
    """The same through this machine's own facts (collectors/host_facts.py on localhost): the
    reason follows what the host has (branch printed)."""
    from socketlab.inventory import InventoryHost, default_remote_python
    from socketlab.spec.hosts import gather_host_facts

    spec = load_spec(REPO / "experiments" / "campaign-oct.yaml", profile="quick")
    host = InventoryHost(
        "localhost", "local", "localhost", 22, None, None, "", default_remote_python()
    )
    entry = gather_host_facts(spec, [host])["localhost"]
    devices = set(entry["topology"].get("devices") or ())
    print(f"branch: devices {sorted(devices)}")
    plan = expand_points(spec, {"localhost": entry})
    locked = _lock_experiments(spec)
    skips = {s.experiment: s.reason for s in plan.skipped}
    if DEVICE in devices:
        assert not locked & set(skips), skips
        return
    want = NO_MODULES if "/proc/modules" not in devices else NOT_LOADED
    pub = load_published(CAMPAIGNS[REPO / "experiments" / "campaign-oct.yaml"])
    rows = compare(
        pub,
        [],
        {"localhost": entry},
        skips=[(s.host, s.experiment, s.reason) for s in plan.skipped],
    )
    lock_rows = [r for r in rows if r.cell.experiment in locked and not r.cell.unmeasured]
    assert len(lock_rows) == 59
    for r in lock_rows:
        assert r.kind == NOT_RUN and r.verdict.startswith("not run: host localhost lacks ")
        assert r.verdict.endswith(want), r.verdict
    print({r.verdict for r in lock_rows})


def _stage(argv) -> list[str]:
    argv = [str(a) for a in argv]
    return argv[argv.index("--") + 1 :] if "--" in argv else argv


@pytest.mark.parametrize("profile", [None, "quick"])
def test_lock_points_on_a_host_with_the_driver(profile):
    """The c8i with the driver loaded (as published): every lock experiment is planned, each
    point with --lock and --lock-ways = its ways, the E4B rows with the lockable 1,344 KiB
    resident, and (full profile) every published lock cell has its point."""
    spec = load_spec(REPO / "experiments" / "campaign-oct.yaml", profile=profile)
    plan = expand_points(spec, {"c8i": _entry(spec, "c8i-metal-48xl", PUBLISHED_DEVICES)})
    assert plan.skipped == []
    locked = _lock_experiments(spec)
    assert locked == {
        "layer-p4-lock12",
        "layer-p4-lock14",
        "layer-p5-amx-locked",
        "layer-e4b-locked",
        "layer-resident-locked",
        "layer-stability-locked",
        "layer-tp-stability-locked",
    }
    points = [p for p in plan.points if p.experiment in locked]
    assert {p.experiment for p in points} == locked
    for p in points:
        stage = _stage(p.argv)
        assert "--lock" in stage and f"--lock-ways={p.params['ways']}" in stage, stage
        assert f"--gemv={'amx' if p.params['gemv'] == 'amx' else 'avx512'}" in stage
        if p.experiment == "layer-e4b-locked":
            assert "--resident-kib=1344" in stage
        if p.experiment == "layer-resident-locked":
            assert f"--resident-kib={round(p.params['mib_per_core'] * 1024)}" in stage
    if profile:
        return
    ways = {
        (p.experiment, p.params.get("stage") or p.params.get("layer")): p.params["ways"]
        for p in points
    }
    assert ways[("layer-p5-amx-locked", "E2B L0 2K")] == 12
    assert ways[("layer-p5-amx-locked", "E2B L4 16K")] == 14
    assert ways[("layer-stability-locked", "E2B L4 16K")] == 14
    stab = [p for p in plan.points if p.experiment == "layer-stability-locked"]
    assert len(stab) == 80 and "--steps=20000" in _stage(stab[0].argv)
    pub = load_published(CAMPAIGNS[REPO / "experiments" / "campaign-oct.yaml"])
    for cell in _lock_cells(pub, locked):
        assert any(
            p.experiment == cell.experiment
            and all(str(p.params.get(k)) == str(v) for k, v in cell.join_params().items())
            for p in points
        ), cell.id


def test_residency_lock_points_on_a_host_with_the_driver():
    spec = load_spec(REPO / "experiments" / "residency.yaml", profile="quick")
    plan = expand_points(spec, {"c8i": _entry(spec, "c8i-metal-48xl", PUBLISHED_DEVICES)})
    locked = _lock_experiments(spec)
    assert locked == {"residency-locked", "residency-avx-locked", "residency-long-locked"}
    points = [p for p in plan.points if p.experiment in locked]
    assert {p.experiment for p in points} == locked
    for p in points:
        argv = [str(a) for a in p.argv]
        assert "--lock" in argv and argv[argv.index("--lock-ways") + 1] == str(p.params["ways"])
    avx = {
        (p.params["ways"], p.params["slice_kib"], p.params["scenario"])
        for p in points
        if p.experiment == "residency-avx-locked"
    }
    assert avx == {(12, 1344, "A"), (12, 1344, "C"), (14, 1568, "A"), (14, 1568, "C")}
