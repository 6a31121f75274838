"""Per-core reproduction: a 2-vCPU Granite Rapids guest's recorded output through the store.

The guest has the published core (GenuineIntel family 6, L1d 48 KiB, L2 2 MiB; the hypervisor
masks the model name), not the published socket. Its recorded runs (tests/published/gnr_recorded.py)
go into a results folder exactly as `orchestrate run` leaves one, and the report built from it
must compare the per-core cells per core and keep the socket-level cells not comparable, saying
what is missing. Every test uses recorded host facts, never the facts of the CPU running it.
"""

from __future__ import annotations

import json
import statistics

import pytest

from socketlab.report.compare import (
    DEVIATES,
    DEVIATES_PER_CORE,
    DISPUTED,
    INCONCLUSIVE,
    NOT_COMPARABLE,
    NOT_RUN,
    REPRODUCED,
    REPRODUCED_PER_CORE,
    compare,
)
from socketlab.report.coreclass import core_class
from socketlab.report.gather import build_report, write_report
from socketlab.report.published import PUBLISHED_DIR, load_published
from tests.published.c8i_fixture import topology_facts
from tests.published.gnr_recorded import (
    CAMPAIGN,
    HOST,
    RECORDED,
    fill_results,
    host_entry,
    noisy_results,
    points,
)

PER_CORE = {REPRODUCED_PER_CORE, DEVIATES_PER_CORE}


def judged_per_core(r) -> bool:
    """Judged on per-core figures: reproduced or deviates per core, or inconclusive per core
    (the median's interval, the reps or the probe did not allow either)."""
    return r.kind in PER_CORE or (r.kind == INCONCLUSIVE and " per core " in r.verdict)


#: the cells the issue names: ladder L2 at 1.0 MiB (both page modes, three kernels), the compute
#: cells and the per-core L2 rates
NAMED = [
    f"ladder/l2-1.0-{page}-{k}/bw_total" for page in ("4k", "thp") for k in ("read", "amx", "gemv")
] + [
    "compute/amx-bf16-compute/flops_per_core",
    "compute/amx-bf16-compute/flops_total",
    "per-core-l2/avx512-read/bw_per_core_mean",
    "per-core-l2/amx-bf16-stream/bw_per_core_mean",
    "per-core-l2/avx512-bf16-gemv/bw_per_core_mean",
]


def _recorded_median(name: str, metric: str) -> float:
    """The median of a recorded file's per-rep values of ``metric``, read straight from it."""
    values = [
        r["value"]
        for r in map(json.loads, (RECORDED / name).read_text().splitlines())
        if r.get("type") == "metric" and r["name"] == metric and r.get("stat") == "rep"
    ]
    assert len(values) == 3
    return statistics.median(values)


def _report(tmp_path, **kw):
    fill_results(tmp_path, **kw)
    return build_report(CAMPAIGN, results=tmp_path)


@pytest.fixture(scope="module")
def guest(tmp_path_factory):
    """The recorded runs, each bracketed by quiet probe readings (gnr_recorded.probe_record)."""
    return _report(tmp_path_factory.mktemp("gnr"), probe="quiet")


def _by_id(report):
    return {r.cell.id: r for r in report.rows}


def test_recorded_guest_matches_the_published_core_class():
    """The masked model name does not match; vendor, family and the private caches do."""
    pub = load_published(PUBLISHED_DIR / "sram-oct-2026.yaml")
    topo = host_entry()["topology"]
    assert topo["cpu_model"] == "Intel(R) Xeon(R) Processor"
    match = core_class(pub.host, topo)
    assert match.matches
    assert match.basis == "vendor GenuineIntel, family 6, L1d 48 KiB, L2 2 MiB"
    assert (
        "model name 'Intel(R) Xeon(R) Processor', model 167 (published 173) not part of"
        in match.detail
    )
    # another Granite Rapids SKU matches on the same basis; the c8i by its model name
    assert core_class(pub.host, topology_facts("xeon-6543p-b")).matches
    assert core_class(pub.host, topology_facts("c8i-metal-48xl")).basis == "model name Xeon 6975P-C"
    # a different L2 (or vendor) is another core; a matching model name wins over the caches
    other = {**topo, "caches": {**topo["caches"], "L2": {"size_bytes": 1048576}}}
    miss = core_class(pub.host, other)
    assert not miss.matches and "L2 1 MiB vs 2 MiB" in miss.detail
    named = {**other, "cpu_model": "Intel(R) Xeon(R) 6975P-C"}
    assert core_class(pub.host, named).matches
    amd = core_class(pub.host, topology_facts("this-machine"))
    assert (amd.matches, amd.differs) == (False, "AMD EPYC vs Intel Xeon 6975P-C")


def test_named_cells_are_compared_per_core_with_ratios(guest):
    by_id = _by_id(guest)
    for cell_id in NAMED:
        r = by_id[cell_id]
        assert judged_per_core(r), (cell_id, r.verdict)
        assert r.ratio is not None and r.per_core_measured is not None
        assert r.ratio == pytest.approx(r.per_core_measured.median / r.per_core_published)
        assert "core class: vendor GenuineIntel, family 6, L1d 48 KiB, L2 2 MiB" in r.verdict
    # the numbers are the recorded ones over the published total / 90 workers
    read = by_id["ladder/l2-1.0-thp-read/bw_total"]
    assert read.per_core_published == pytest.approx(15445 / 90)
    assert read.per_core_measured.median == pytest.approx(
        _recorded_median("ladder.avx512-read.1M.thp.jsonl", "bw_total")
    )
    assert read.kind == REPRODUCED_PER_CORE and read.ratio == pytest.approx(1.013, abs=0.002)
    assert read.per_core_text == "171.6 (15,445 / 90, derived) → 173.9"
    amx = by_id["compute/amx-bf16-compute/flops_per_core"]
    assert amx.per_core_measured.median == pytest.approx(
        1000 * _recorded_median("ladder.amx-bf16-compute.1core.jsonl", "tflops_per_core_mean")
    )
    assert amx.kind == REPRODUCED_PER_CORE
    # the 1.5 MiB THP cells of the guest deviate (its pages are the hypervisor's: README)
    gemv = by_id["ladder/l2-1.5-thp-gemv/bw_total"]
    assert gemv.kind == DEVIATES_PER_CORE and gemv.verdict.startswith(
        "deviates per core: 0.76x of published (±5%, worse)"
    )
    # the AMX stream's 3 reps straddle the band's lower edge: neither reproduced nor deviates
    amx = by_id["ladder/l2-1.0-thp-amx/bw_total"]
    assert (
        amx.kind == INCONCLUSIVE
        and "; spread: the median's interval 0.92–0.95x of "
        "published (75%, 3 reps) crosses the edge of the band (±5%)"
        in amx.verdict
    )
    # the other L2 ladder cells are per core too; the guest's one-way latency of its two cores
    per_core = [r for r in guest.rows if judged_per_core(r)]
    assert {r.cell.table for r in per_core} == {"ladder", "per-core-l2", "compute", "latency"}
    assert len([r for r in per_core if r.cell.table == "ladder"]) == 18


def test_socket_level_cells_say_what_is_missing(guest):
    by_id = _by_id(guest)
    measured = [r for r in guest.rows if r.measured is not None]
    socket = [r for r in measured if not judged_per_core(r) and not r.cell.disputed]
    assert socket and all(r.kind == NOT_COMPARABLE for r in socket)
    assert all(r.verdict.startswith("not comparable: needs ") for r in socket)
    assert by_id["ladder/l3-3-thp-read/bw_total"].verdict == (
        "not comparable: needs 96 cores (host has 2); conditions differ: duration_s 1 vs 2"
    )
    assert (
        by_id["fast-tier/mib-3/bw_total"].verdict == "not comparable: needs 96 cores (host has 2)"
    )
    assert by_id["exchange/n32-diss/exchange_p50"].verdict == (
        "not comparable: needs 32 participants (host has 2 cores); conditions differ: reps 1 vs 3"
    )
    assert by_id["exchange/n96-hier/exchange_p50"].verdict.startswith(
        "not comparable: needs 3 NUMA nodes (host has 1), 96 participants (host has 2 cores)"
    )
    assert by_id["exchange-floor/die-local/exchange_best"].verdict == (
        "not comparable: needs 32 participants (host has 2 cores)"
    )
    # the slowest of 90 cores is a socket statistic even on the L2 tier
    assert by_id["ladder-slowest-core/l2-1.0-thp/bw_per_core_min"].kind == NOT_COMPARABLE
    # per-core cells that need the published node layout: no run on this host, and they would
    # not be per core (needs)
    assert by_id["latency/core-32/one_way_latency"].kind == NOT_RUN
    assert judged_per_core(by_id["latency/core-1/one_way_latency"])


def test_one_value_moved_10_percent_turns_only_its_cell(tmp_path, guest):
    """Scaling one recorded metric by 1.1 (quiet probes around every run) turns its
    reproduced-per-core cell into deviates per core, and no other verdict changes."""
    target = "compute/amx-bf16-compute/flops_per_core"
    before = {r.cell.id: r.verdict for r in guest.rows}
    assert _by_id(guest)[target].kind == REPRODUCED_PER_CORE
    moved = _report(
        tmp_path,
        probe="quiet",
        scale={"ladder.amx-bf16-compute.1core.jsonl:tflops_per_core_mean": 1.1},
    )
    after = {r.cell.id: r.verdict for r in moved.rows}
    changed = {k for k in before if before[k] != after[k]}
    assert changed == {target}
    r = _by_id(moved)[target]
    assert r.kind == DEVIATES_PER_CORE
    assert r.verdict.startswith(f"deviates per core: {r.ratio:.2f}x of published (±5%, better)")
    assert r.ratio == pytest.approx(1.1 * _by_id(guest)[target].ratio)
    # the same on a ladder cell (its bw_total only: the per-core-l2 cell reads bw_per_core_mean)
    moved = _report(
        tmp_path / "b", probe="quiet", scale={"ladder.avx512-read.1M.thp.jsonl:bw_total": 1.1}
    )
    after = {r.cell.id: r.verdict for r in moved.rows}
    assert {k for k in before if before[k] != after[k]} == {"ladder/l2-1.0-thp-read/bw_total"}


AMX_FILE = "ladder.amx-bf16-compute.1core.jsonl"
AMX_CELL = "compute/amx-bf16-compute/flops_per_core"


def test_a_disturbed_probe_makes_the_same_values_inconclusive(tmp_path, guest):
    """The recorded quiet values with a disturbed probe before their run (the noise series'
    round 9: AMX stream 95.9 GB/s against the campaign's best 132.9) read "inconclusive: ...
    disturbed ..." with both numbers; nothing else changes."""
    assert _by_id(guest)[AMX_CELL].kind == REPRODUCED_PER_CORE
    rep = _report(tmp_path, probe="quiet", disturbed=(AMX_FILE,))
    r = _by_id(rep)[AMX_CELL]
    assert r.kind == INCONCLUSIVE
    assert r.verdict.startswith(f"inconclusive: per core {r.ratio:.2f}x of published (±5%")
    assert (
        "disturbed: 1 of 1 runs (probe amx-stream 95.89 vs quiet 132.9 GB/s (0.72x, below "
        "0.8x) before the run on cpu 0)" in r.verdict
    ), r.verdict
    before = {x.cell.id: x.verdict for x in guest.rows}
    assert {x.cell.id for x in rep.rows if before[x.cell.id] != x.verdict} == {
        AMX_CELL,
        "compute/amx-bf16-compute/flops_total",
    }  # the same run's total


@pytest.mark.parametrize("scale", [1.0, 1.1, 0.5])
def test_no_disturbed_run_can_deviate(tmp_path, scale):
    """Every run disturbed, its values as recorded or moved 10 % or halved: no verdict of the
    report is "deviates" or "deviates per core"; the measured cells are inconclusive."""
    files = tuple(p.name for p, _, _ in points())
    rep = _report(
        tmp_path,
        probe="quiet",
        disturbed=files,
        scale={f"{f}": scale for f in files} if scale != 1.0 else None,
    )
    kinds = {r.kind for r in rep.rows}
    assert not kinds & {DEVIATES, DEVIATES_PER_CORE, REPRODUCED, REPRODUCED_PER_CORE}, kinds
    judged = [r for r in rep.rows if r.kind == INCONCLUSIVE]
    assert len(judged) >= 20 and all("disturbed: 1 of 1 runs" in r.verdict for r in judged)


def test_runs_without_a_probe_on_a_guest_never_deviate(tmp_path, guest):
    """The recorded store has no probe records (stored before the probe): on this guest (its
    facts have the hypervisor flag) a cell outside the band is inconclusive, "not probed",
    and a cell inside it still reproduces; on the published bare-metal host's facts the same
    values deviate as before."""
    rep = _report(tmp_path, scale={f"{AMX_FILE}:tflops_per_core_mean": 1.1})
    r = _by_id(rep)[AMX_CELL]
    assert (
        r.kind == INCONCLUSIVE
        and "not probed for interference: 1 of 1 runs on this guest carry no probe record"
        in r.verdict
    )
    read = _by_id(rep)["ladder/l2-1.0-thp-read/bw_total"]
    assert read.kind == REPRODUCED_PER_CORE
    assert not [x for x in rep.rows if x.kind in (DEVIATES, DEVIATES_PER_CORE)]


def test_the_recorded_disturbed_window_reads_inconclusive(tmp_path):
    """The ladder and ladder-amx runs recorded at 08:51-08:55 UTC on 2026-12-03 during a
    neighbour's load (AMX stream 1 MiB THP 37-43 GB/s where minutes before and after read
    82-135; recorded/gnr-kvm-2vcpu-2026-12-03/README.md): they have no probe records, the guest
    is a guest, so none of their cells deviates; the cells they measured below the band say
    why not."""
    results = noisy_results(tmp_path)
    rep = build_report(CAMPAIGN, results=results, spec_path=tmp_path / "none.yaml")
    rows = [r for r in rep.rows if r.measured is not None]
    assert rows and not [r for r in rows if r.kind in (DEVIATES, DEVIATES_PER_CORE)]
    amx = _by_id(rep)["ladder/l2-1.0-thp-amx/bw_total"]
    print(f"recorded disturbed window: {amx.measured.text()}: {amx.verdict}")
    assert amx.kind == INCONCLUSIVE and "not probed for interference" in amx.verdict
    assert amx.measured.median < 0.5 * amx.per_core_published


def test_amd_host_facts_say_the_core_class_differs(tmp_path):
    """The same recorded runs under an AMD host's facts (the recorded Zen 5 snapshot)."""
    rep = _report(tmp_path, facts={"topology": topology_facts("this-machine")})
    by_id = _by_id(rep)
    for cell_id in NAMED:
        r = by_id[cell_id]
        if "amx_bf16" in r.cell.requires:  # an AMD core has no AMX: those runs never happen
            assert r.verdict == "not run: host lacks amx_bf16"
        else:
            assert r.verdict == (
                "not comparable: core class differs (AMD EPYC vs Intel Xeon 6975P-C)"
            ), cell_id
    assert not [r for r in rep.rows if r.kind in PER_CORE]
    assert by_id["ladder/l3-3-thp-read/bw_total"].verdict.startswith(
        "not comparable: host is AMD EPYC (2 cores), published host is Xeon 6975P-C (96 cores)"
    )


@pytest.mark.parametrize("host", ["gnr-guest", "c8i", "amd", "no-runs"])
def test_disputed_figure_reads_disputed_on_every_host(tmp_path, host):
    """218 GFLOP/s/core AVX-512 BF16 (l2r_bw mode 3's miscount): never reproduced or deviates."""
    pub = load_published(PUBLISHED_DIR / "sram-oct-2026.yaml")
    cell_id = "compute/avx512-bf16-compute/flops_per_core"
    if host in ("gnr-guest", "amd"):
        facts = None if host == "gnr-guest" else {"topology": topology_facts("this-machine")}
        row = _by_id(_report(tmp_path, facts=facts))[cell_id]
    else:
        from socketlab.store import Store
        from tests.published.c8i_fixture import fill_store

        with Store(tmp_path / "s.sqlite") as store:
            runs = fill_store(store, pub, CAMPAIGN) if host == "c8i" else []
            frame = store.metrics_frame(CAMPAIGN)
        row = next(
            r
            for r in compare(pub, frame, {"c8i": topology_facts("c8i-metal-48xl")}, runs=runs)
            if r.cell.id == cell_id
        )
    assert row.kind == DISPUTED
    assert row.verdict.startswith("published figure disputed: l2r_bw mode 3 counts 8 VDPBF16PS")
    assert row.verdict.endswith("a correct figure: " + row.cell.disputed.correct)
    measured = {
        "gnr-guest": 1000
        * _recorded_median("ladder.avx512-bf16-compute.1core.jsonl", "tflops_per_core_mean"),
        "amd": 1000
        * _recorded_median("ladder.avx512-bf16-compute.1core.jsonl", "tflops_per_core_mean"),
    }.get(host)
    if host == "no-runs":
        assert "published 218 Gflop/s per core; here: not run: no compute run" in row.verdict
    elif host == "c8i":
        assert "published 218 vs measured 2" in row.verdict and "(1.00x)" in row.verdict
    else:
        assert f"published 218 vs measured {measured:.4g} Gflop/s per core (0.54x)" in row.verdict
    if host == "amd":
        assert (
            "here: not comparable: core class differs (AMD EPYC vs Intel Xeon 6975P-C)"
            in row.verdict
        )


def test_runs_shorter_than_the_floor_stay_not_comparable(tmp_path):
    """min_duration_s: 1 s reps count as the published 2 s one-core measurement; the quick
    profile's 0.2 s reps do not, and the verdict names the profile."""
    rep = _report(tmp_path, meta={"seconds": 0.2}, profile="quick")
    r = _by_id(rep)["ladder/l2-1.0-thp-read/bw_total"]
    assert r.verdict == "not comparable: profile quick: 0.2 s per rep vs 2 s published"
    assert r.per_core_measured is not None  # the column still shows what was measured


def test_reports_show_the_per_core_column_and_count_per_core_verdicts(guest, tmp_path):
    from socketlab.report.compare import summary

    counts = summary(guest.rows)
    paths = write_report(guest, tmp_path, ("md", "html"))
    md, html = paths["md"].read_text(), paths["html"].read_text()
    assert (
        f"- {len(guest.rows)} published cells.\n- Measured on gnr-kvm (Intel(R) Xeon(R) "
        f"Processor, 2 cores; the core class of Intel Xeon 6975P-C): {counts[REPRODUCED_PER_CORE]} "
        f"reproduced per core, {counts[DEVIATES_PER_CORE]} deviate per core, "
        f"{counts[INCONCLUSIVE]} inconclusive.\n- 1 disputed, {counts[NOT_COMPARABLE]} not "
        f"comparable, {counts[NOT_RUN]} not run.\n" in md
    )
    assert counts[REPRODUCED_PER_CORE] >= 8 and counts[DEVIATES_PER_CORE] >= 4
    assert "| per core: published → measured |" in md
    assert (
        "| L2 1.0 MiB THP AVX-512 read | 15,445 | 173.9 (173.8–174.2, n=3; threads=1) | "
        "171.6 (15,445 / 90, derived) → 173.9 | 1.01x | reproduced per core" in md
    )
    assert (
        "**core class on gnr-kvm**: core class of Intel Xeon 6975P-C: matched on vendor "
        "GenuineIntel, family 6, L1d 48 KiB, L2 2 MiB" in md
    )
    assert "### Disputed published figures" in md and "A correct figure: 82-109 GFLOP/s" in md
    # cells of a socket-level table are listed under their one reason, with what was measured
    assert "- not comparable: needs 96 cores (host has 2) (" in md
    assert html.count('<tr class="reproduced-per-core">') == counts[REPRODUCED_PER_CORE]
    assert html.count('<tr class="deviates-per-core">') == counts[DEVIATES_PER_CORE]
    assert html.count('<tr class="published-figure-disputed">') == 1
    assert "<th>per core: published → measured</th>" in html


def test_cli_report_on_the_recorded_guest(tmp_path, capsys):
    from socketlab.cli import main

    fill_results(tmp_path)
    assert main(["report", CAMPAIGN, "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert (
        "| AVX-512 read | 171 | 173.9 (173.8–174.2, n=3; threads=1) | 171 → 173.9 | 1.02x | "
        "reproduced per core within tolerance (±5%; core class: vendor GenuineIntel" in out
    )
    assert f"**host {HOST}**: Intel(R) Xeon(R) Processor" in out
