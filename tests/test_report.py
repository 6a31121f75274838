"""The comparison report: built from a results folder, rendered as markdown and HTML with plots,
and the HTML opened in headless Chromium."""

from __future__ import annotations

import importlib.util
import json
import re
import struct
import zlib
from pathlib import Path

import pytest

from socketlab.placement.isolation import plan_isolation
from socketlab.report.gather import build_report, write_report
from socketlab.report.published import PUBLISHED_DIR, load_published
from socketlab.store import Store, store_path
from socketlab.topology import topology_from_snapshot
from tests.published.c8i_fixture import fill_store, topology_facts

REPO = Path(__file__).resolve().parents[1]
CAMPAIGN = "campaign-oct"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """A results folder as the runner leaves it: store + host facts, c8i-shaped values."""
    root = tmp_path_factory.mktemp("results")
    pub = load_published(PUBLISHED_DIR / "sram-oct-2026.yaml")
    with Store(store_path(CAMPAIGN, root)) as store:
        fill_store(
            store,
            pub,
            CAMPAIGN,
            host="c8i",
            shift={"exchange/n32-diss/exchange_p50": 1.2},
            raw_root=root / CAMPAIGN,
        )
    hosts = root / CAMPAIGN / "hosts"
    hosts.mkdir(parents=True)
    plan = c8i_plan()
    (hosts / "c8i.json").write_text(
        json.dumps(
            {
                "topology": topology_facts("c8i-metal-48xl"),
                "isolation": plan,
                "isolation_applied": True,
                "isolation_verify": verify_record(plan),
            }
        )
    )
    return root


def c8i_plan() -> dict:
    snapshot = json.loads(
        (REPO / "tests" / "fixtures" / "topology" / "c8i-metal-48xl.json").read_text()
    )
    return plan_isolation(topology_from_snapshot(snapshot), housekeeping_per_node=2).facts()


def verify_record(plan: dict, **change) -> dict:
    """A record as playbooks/verify.yml writes it (tests/test_isolation_playbooks.py checks the
    real one), with the published idle noise on the workers."""

    def noise(mean: float) -> dict:
        return {"mean": mean, "max": mean}

    record = {
        "format": "socketlab-isolation-verify/1",
        "host": "c8i",
        "time": "2026-10-08T09:14:03Z",
        "passed": True,
        "drifted": [],
        "error": "",
        "checked": ["state file", "workqueue cpumask"],
        "unavailable": [],
        "state_file": "/var/lib/socketlab/isolation-c8i.json",
        "plan": plan,
        "noise": {
            "source": "proc_noise",
            "seconds": 10,
            "groups": {
                "workers": {
                    "cpus": plan["workers_list"],
                    "count": 90,
                    "device_irqs_per_s": noise(0.0),
                    "local_timer_irqs_per_s": noise(100.2),
                    "other_irqs_per_s": noise(2.1),
                    "ctx_switches_per_s": noise(1.8),
                }
            },
            "table": ["noise over 10 s, mean per CPU (max in brackets)"],
        },
    }
    return {**record, **change}


@pytest.fixture(scope="module")
def report(results):
    rep = build_report(CAMPAIGN, results=results, spec_path=results / "no-spec.yaml")
    assert rep is not None
    return rep


def test_no_published_file_means_no_report(results):
    assert build_report("quickstart", results=results) is None


def test_markdown_has_a_row_for_every_published_cell(report):
    md = report_md = write_report(
        report, report.provenance and Path(report.provenance["store"]).parent / "report", ("md",)
    )["md"].read_text()
    ncells = sum(len(p.cells) for p in report.published)
    # every cell once: a judged cell as a table row, the others in one line per reason that
    # counts them (socketlab.report.view)
    verdict_lines = [
        ln
        for ln in md.splitlines()
        if ln.startswith("| ")
        and (
            "reproduced within" in ln
            or "deviates" in ln
            or "published figure disputed:" in ln
            or "inconclusive:" in ln
            or "recomputed from published constants:" in ln
        )
    ]
    grouped = [
        re.match(r"- (not run|not comparable): .*? \((\d+)\): ", ln)
        for ln in md.splitlines()
        if ln.startswith(("- not run: ", "- not comparable: "))
    ]
    assert all(grouped)
    assert len(verdict_lines) + sum(int(m.group(2)) for m in grouped) == ncells
    reasons = [m.group(0) for m in grouped]
    assert len(reasons) < ncells / 4  # a reason is written once per table, not once per cell
    assert "| 32 (one node), dissemination | 1.09 |" in md
    assert "deviates: 1.2" in md
    assert f"- {ncells} published cells.\n- Measured on c8i (" in report_md
    # the lock rows are experiments now (layer-*-lock*, layer-*-locked): on the c8i's runs they
    # are compared like any cell, and no cell waits for "the pseudo-lock driver" any more
    assert "needs the pseudo-lock driver" not in md and "a later issue" not in md
    lock_lines = [
        ln
        for ln in md.splitlines()
        if ln.startswith("| 32K path C |") or ln.startswith("| E2B L4 16K, 14 ways, B=16 |")
    ]
    assert len(lock_lines) == 8 and all("reproduced within" in ln for ln in lock_lines), lock_lines
    assert "needs the real-layer stage" not in md
    # provenance: host facts, isolation state and verify result
    assert "INTEL(R) XEON(R) 6975P-C" in md and "isolation applied: yes" in md
    # the CPU sets the runs were placed on (the published placement on the c8i topology) and
    # what verify.yml found
    assert (
        "isolation on c8i**: applied; plan: housekeeping 0-1,32-33,64-65,96-97,128-129,"
        "160-161, workers 2-31,34-63,66-95; verified 2026-10-08T09:14:03Z: 0 drifted knobs; "
        "worker noise: device IRQs 0.0/s, timer 100.2/s, ctx 1.8/s (mean per CPU over 10 s)"
    ) in md


@pytest.mark.parametrize("case", ["passed", "failed", "none", "stale", "other-plan", "unsampled"])
def test_provenance_says_what_verify_found(case):
    """Each state of verify.yml's record reads differently, and none reads as verified unless the
    record passed for the plan the runs used on a host that still runs it."""
    from socketlab.report.isolation import isolation_text

    plan = c8i_plan()
    entry = {"isolation": plan, "isolation_applied": True}
    record = verify_record(plan)
    if case == "failed":
        record = verify_record(
            plan,
            passed=False,
            noise=None,
            drifted=[
                "workqueue cpumask: expected 00000003,..., found ffffffff,... (/sys/...)",
                "irqbalance stopped: runs again (PIDs [812])",
            ],
        )
    elif case == "stale":
        entry["isolation_applied"] = False
    elif case == "other-plan":
        record = verify_record({**plan, "workers_list": "2-31"})
    elif case == "unsampled":
        record = verify_record(plan, noise=None)
    if case != "none":
        entry["isolation_verify"] = record
    text = isolation_text(entry).split("; ", 1)[1]
    verified = "verified 2026-10-08T09:14:03Z: 0 drifted knobs; worker noise: "
    expected = {
        "passed": verified + "device IRQs 0.0/s, timer 100.2/s, ctx 1.8/s (mean per CPU over 10 s)",
        "failed": "verify failed: workqueue cpumask: expected 00000003,..., found ffffffff,... "
        "(/sys/...); irqbalance stopped: runs again (PIDs [812]) (2026-10-08T09:14:03Z)",
        "none": "not verified",
        "stale": "verified 2026-10-08T09:14:03Z: 0 drifted knobs; worker noise: device IRQs "
        "0.0/s, timer 100.2/s, ctx 1.8/s (mean per CPU over 10 s); but isolation is not "
        "applied any more",
        "other-plan": "but it checked workers 2-31, the runs used 2-31,34-63,66-95",
        "unsampled": verified + "not sampled",
    }[case]
    if case == "stale":
        assert (
            isolation_text(entry) == "not applied; plan: housekeeping 0-1,32-33,64-65,96-97,"
            "128-129,160-161, workers 2-31,34-63,66-95; " + expected
        )
    elif case == "other-plan":
        assert text.endswith(expected), text
    else:
        assert text.endswith("; " + expected) or text == expected, text


def test_html_is_standalone_with_plots(report, tmp_path):
    html = write_report(report, tmp_path, ("html",))["html"].read_text()
    assert html.count("data:image/png;base64,") >= 4  # ladder, exchange, batch, KV, fast tier
    assert "http://" not in html and "https://" not in html  # nothing fetched from anywhere
    assert html.count('<tr class="reproduced">') > 100
    assert html.count('<tr class="deviates">') == 1


def _png_size_and_colours(path: Path) -> tuple[int, int, int]:
    """(width, height, distinct byte values in the first rows): enough to tell a blank page."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    idat = b""
    pos = 8
    while pos < len(data):
        length = struct.unpack(">I", data[pos : pos + 4])[0]
        kind = data[pos + 4 : pos + 8]
        if kind == b"IDAT":
            idat += data[pos + 8 : pos + 8 + length]
        pos += 12 + length
    raw = zlib.decompress(idat)
    return width, height, len(set(raw[: width * 4 * 400]))


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="matplotlib missing")
def test_html_opens_in_headless_chromium(report, tmp_path):
    spec = importlib.util.spec_from_file_location("shot", REPO / "bench" / "screenshot_report.py")
    shot = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shot)
    if shot.chromium() is None:
        pytest.skip("chromium is not installed (scripts/system-deps.sh installs it)")
    html = write_report(report, tmp_path, ("html",))["html"]
    png = tmp_path / "shot.png"
    shot.screenshot(html, png, "1000,1400")
    width, height, colours = _png_size_and_colours(png)
    assert (width, height) == (1000, 1400)
    assert colours > 20  # text, table shading and a plot, not a blank page


def test_cli_report_writes_markdown_and_html(results, capsys):
    from socketlab.cli import main

    assert main(["report", CAMPAIGN, "--results", str(results), "--format", "html"]) == 0
    out = capsys.readouterr().out
    assert out.strip().endswith(f"(also {results / CAMPAIGN / 'report.md'})")
    html = (results / CAMPAIGN / "report.html").read_text()
    md = (results / CAMPAIGN / "report.md").read_text()
    assert "data:image/png" in html and "## Measured tables" not in md
    # the plain tables of every metric go beside, named by the report
    assert "`measured.md` beside this file" in md and "<code>measured.md</code>" in html
    assert "\n## ladder\n" in (results / CAMPAIGN / "measured.md").read_text()
    assert main(["report", CAMPAIGN, "--results", str(results)]) == 0
    assert "| 32 (one node), dissemination | 1.09 |" in capsys.readouterr().out


def test_not_run_reasons_from_the_results_folder(tmp_path):
    """A failed run, an unsupported collector and a profile's left-out point each say why."""
    from socketlab.parse import Metric
    from socketlab.store import RunRecord

    campaign_dir = tmp_path / CAMPAIGN
    raw = campaign_dir / "runs" / "k-clocks" / "collectors"
    raw.mkdir(parents=True)
    (raw / "clock_freq.jsonl").write_text(
        json.dumps(
            {"ts": 1.0, "source": "clock_freq", "unsupported": "no clock source: no cpufreq"}
        )
        + "\n"
    )
    with Store(store_path(CAMPAIGN, tmp_path)) as store:
        store.add_run(
            RunRecord(
                "k-clocks",
                CAMPAIGN,
                "clocks",
                "vm",
                0,
                {"kernel": "avx512-bf16-gemv", "mib_per_core": 1.0},
                "ok",
                raw_dir=str(raw.parent),
            ),
            [],
        )
        store.add_run(
            RunRecord(
                "k-ladder",
                CAMPAIGN,
                "ladder",
                "vm",
                0,
                {"kernel": "avx512-read", "pages": "thp", "mib_per_core": 1.0},
                "failed",
                reason="exit code 3: no AVX-512",
            ),
            [],
        )
        store.add_run(
            RunRecord(
                "k-ok",
                CAMPAIGN,
                "ladder",
                "vm",
                0,
                {"kernel": "avx512-read", "pages": "4k", "mib_per_core": 1.0},
                "ok",
            ),
            [Metric("bw_total", 50.0, "GB/s", {"stat": "rep"})],
        )
    (campaign_dir / "hosts").mkdir()
    (campaign_dir / "hosts" / "vm.json").write_text(
        json.dumps({"topology": topology_facts("this-machine"), "isolation": None})
    )
    # the campaign as it was before it ran hierarchical exchanges: a cell with no point
    spec = (REPO / "experiments" / "campaign-oct.yaml").read_text()
    old = spec
    spec = spec.replace(", rep, hier]", ", rep]")
    spec = spec.replace(
        "      exclude:\n        - {scope: [one-node, two-nodes], mode: hier}\n", ""
    )
    spec = spec.replace("          exclude: [{scope: one-node, mode: hier}]\n", "")
    assert spec.count("hier]") == 0 and spec != old
    (tmp_path / "spec").mkdir()
    (tmp_path / "spec" / "campaign-oct.yaml").write_text(spec)
    (campaign_dir / "last-run.json").write_text(
        json.dumps({"spec": str(tmp_path / "spec" / "campaign-oct.yaml"), "profile": "quick"})
    )
    rep = build_report(CAMPAIGN, results=tmp_path)
    verdict = {r.cell.id: r.verdict for r in rep.rows}
    assert verdict["clocks/avx512-bf16-gemv/busy_mhz_mean"] == (
        "not run: collector clock_freq unsupported here: no clock source: no cpufreq"
    )
    assert verdict["ladder/l2-1.0-thp-read/bw_total"] == (
        "not run: failed: exit code 3: no AVX-512"
    )
    assert verdict["ladder/l3-3-thp-read/bw_total"] == "not run: left out by profile quick"
    assert verdict["exchange/n96-hier/exchange_p50"] == (
        "not run: campaign-oct.yaml runs no exchange point with scope=all-nodes, mode=hier"
    )
    # the host differs, and the profile ran one rep where three were published
    # an AMD host: the per-core cell's core class differs (the quick profile's single rep is
    # beside the point then); a socket-level cell names the host and the profile's shortening
    assert verdict["ladder/l2-1.0-4k-read/bw_total"] == (
        "not comparable: core class differs (AMD EPYC vs Intel Xeon 6975P-C)"
    )
    assert verdict["ladder/l2-1.0-4k-amx/bw_total"] == "not run: host lacks amx_bf16"
    assert rep.provenance["profile"] == "quick"


def test_conditions_come_from_the_runs_meta_records(tmp_path):
    """Through the results folder: the binaries' meta.json (0.2 s per rep) and the profile the
    campaign ran with (last-run.json) make the c8i's ladder cells not comparable, by name."""
    pub = load_published(PUBLISHED_DIR / "sram-oct-2026.yaml")
    with Store(store_path(CAMPAIGN, tmp_path)) as store:
        fill_store(
            store,
            pub,
            CAMPAIGN,
            host="c8i",
            recorded={"seconds": 0.2},
            raw_root=tmp_path / CAMPAIGN,
        )
    (tmp_path / CAMPAIGN / "hosts").mkdir()
    (tmp_path / CAMPAIGN / "hosts" / "c8i.json").write_text(
        json.dumps(
            {
                "topology": topology_facts("c8i-metal-48xl"),
                "isolation": c8i_plan(),
                "isolation_applied": True,
            }
        )
    )
    (tmp_path / CAMPAIGN / "last-run.json").write_text(json.dumps({"profile": "quick"}))
    rep = build_report(CAMPAIGN, results=tmp_path, spec_path=tmp_path / "no-spec.yaml")
    verdict = {r.cell.id: r.verdict for r in rep.rows}
    assert verdict["ladder/l2-1.0-4k-read/bw_total"] == (
        "not comparable: profile quick: 0.2 s per rep vs 2 s published"
    )
    assert verdict["exchange/n32-fid/exchange_p50"].startswith("reproduced")
    assert rep.provenance["isolation"]["c8i"].endswith("; not verified")


def test_host_facts_carry_this_hosts_verify_record(tmp_path):
    """What `orchestrate run` stores as a host's facts (hosts/<host>.json, each run's facts.json)
    includes verify.yml's record for that inventory name, read by collectors/host_facts.py from
    the playbooks' default state folder; other hosts' records (network-namespace hosts share the
    filesystem) are not mixed in."""
    import os

    from socketlab.inventory import InventoryHost, default_remote_python
    from socketlab.spec.hosts import gather_host_facts
    from socketlab.spec.load import load_spec

    state_dir = Path("/var/lib/socketlab")
    name = f"report-test-{os.getpid()}"
    made = [d for d in (state_dir.parent, state_dir) if not d.exists()]
    if not os.access(state_dir if state_dir.exists() else state_dir.parent, os.W_OK):
        pytest.skip(f"{state_dir} is not writable here")
    mine, other = state_dir / f"verify-{name}.json", state_dir / f"verify-{name}-other.json"
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        mine.write_text(json.dumps({"host": name, "passed": True, "time": "2026-11-29T20:00:00Z"}))
        other.write_text(json.dumps({"host": f"{name}-other", "passed": False}))
        host = InventoryHost(
            name, "local", "localhost", 22, None, None, "", default_remote_python()
        )
        spec = load_spec(REPO / "experiments" / "campaign-oct.yaml", profile="quick")
        entry = gather_host_facts(spec, [host])[name]
        assert entry["isolation_verify"] == {
            "host": name,
            "passed": True,
            "time": "2026-11-29T20:00:00Z",
        }
        other.unlink()
        mine.unlink()
        assert "isolation_verify" not in gather_host_facts(spec, [host])[name]
    finally:
        for path in (mine, other):
            path.unlink(missing_ok=True)
        for folder in reversed(made):
            folder.rmdir()
