"""Verdicts as a frame and as CI gates, on the recorded Granite Rapids guest: the real
ladder-noisy store (tests/published/recorded/gnr-kvm-2vcpu-2026-12-03/, unprobed, as `orchestrate
run` left it) and the recorded runs of tests/published/gnr_recorded.py with the recorded quiet
probe readings, one value moved. Plus the readers' one-line errors on a missing, a file or a
read-only results folder, and the compare verdict's rules.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from socketlab import results
from socketlab.cli import main
from socketlab.report.gather import build_report
from socketlab.results.comparison import (
    FASTER,
    HIGHER,
    INCONCLUSIVE,
    LOWER,
    SAME,
    SLOWER,
    Settings,
    judge,
)
from tests.published.gnr_recorded import CAMPAIGN, fill_results, noisy_results

#: the recorded L2 read at 1 MiB THP, and the two cells it is measured by
MOVED_FILE = "ladder.avx512-read.1M.thp.jsonl"
MOVED_CELLS = ("ladder/l2-1.0-thp-read/bw_total", "per-core-l2/avx512-read/bw_per_core_mean")


def _cli(capsys, *argv) -> tuple[int, str, str]:
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse's own refusal (one line, exit 2)
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(scope="module")
def noisy(tmp_path_factory):
    return noisy_results(tmp_path_factory.mktemp("noisy"))


def test_verdicts_frame_is_the_reports_cells(noisy, capsys):
    report = build_report(CAMPAIGN, results=noisy)
    frame = results.load(CAMPAIGN, results=noisy).verdicts
    # one row per published cell and host (one host here): the published files' cell count
    cells = sum(len(pub.cells) for pub in report.published)
    assert len(frame) == len(report.rows) == cells > 800
    assert list(frame["cell"]) == [r.cell.id for r in report.rows]
    assert list(frame["kind"].astype(str)) == [r.kind for r in report.rows]
    assert list(frame["verdict"]) == [r.verdict for r in report.rows]
    measured = frame[frame["measured"].notna()]
    assert (measured["measured_min"] <= measured["measured"]).all()
    assert set(frame["published_file"].astype(str)) == {"sram-oct-2026.yaml", "plan-oct-2026.yaml"}
    # `report --json` prints the same frame, one line per cell
    rc, out, _ = _cli(capsys, "report", CAMPAIGN, "--results", noisy, "--json")
    lines = [json.loads(x) for x in out.splitlines()]
    assert rc == 0 and [x["cell"] for x in lines] == list(frame["cell"])
    assert [x["kind"] for x in lines] == list(frame["kind"].astype(str))


def test_report_fail_on_on_the_real_recorded_store(noisy, capsys):
    """Unprobed guest runs never read "deviates" (socketlab.report.compare): the gate on
    deviates passes, the one on inconclusive fails naming each such cell."""
    kinds = results.load(CAMPAIGN, results=noisy).verdicts["kind"].astype(str)
    rc, out, err = _cli(capsys, "report", CAMPAIGN, "--results", noisy, "--fail-on", "deviates")
    assert rc == 0 and "orchestrate: report:" not in err and "published vs measured" in out
    rc, _, err = _cli(
        capsys, "report", CAMPAIGN, "--results", noisy, "--fail-on", "inconclusive,not-run"
    )
    named = [x for x in err.splitlines() if x.startswith("orchestrate: report: ") and " on " in x]
    assert rc == 1 and len(named) == (kinds == "inconclusive").sum() + (kinds == "not run").sum()
    assert f"{len(named)} cell(s) fail --fail-on inconclusive,not-run" in err


def test_report_fail_on_deviates_catches_a_moved_value(tmp_path, capsys):
    plain, moved = tmp_path / "plain", tmp_path / "moved"
    fill_results(plain, probe="quiet")
    fill_results(moved, probe="quiet", scale={MOVED_FILE: 0.6})
    rc, _, err = _cli(capsys, "report", CAMPAIGN, "--results", moved)
    assert rc == 0 and not err  # without --fail-on a report exits 0 whatever its verdicts
    before = results.load(CAMPAIGN, results=plain).verdicts.set_index("cell")
    after = results.load(CAMPAIGN, results=moved).verdicts.set_index("cell")
    for cell in MOVED_CELLS:
        assert not str(before.loc[cell, "kind"]).startswith("deviates")
        assert str(after.loc[cell, "kind"]) == "deviates per core"
        assert after.loc[cell, "ratio"] == pytest.approx(before.loc[cell, "ratio"] * 0.6)
    rc, _, err = _cli(capsys, "report", CAMPAIGN, "--results", moved, "--fail-on", "deviates")
    assert rc == 1
    for cell in MOVED_CELLS:
        (line,) = [x for x in err.splitlines() if f": {cell} on gnr-kvm: deviates per core" in x]
        assert f"{after.loc[cell, 'ratio']:.2f}x" in line
    deviating = after["kind"].astype(str).str.startswith("deviates").sum()
    assert f"{deviating} cell(s) fail --fail-on deviates" in err
    rc, _, err = _cli(capsys, "report", CAMPAIGN, "--results", moved, "--fail-on", "deviated")
    assert rc == 2 and err.count("\n") == 1 and "expected one or more of deviates" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["status"],
        ["status", "c"],
        ["report", "c"],
        ["export", "c"],
        ["serving-report", "c"],
        ["compare", "c", "d"],
        ["report", "c", "--fail-on", "deviates"],
    ],
)
def test_readers_refuse_a_missing_or_file_results_folder(argv, tmp_path, capsys):
    file = tmp_path / "results.txt"
    file.write_text("not a folder")
    for where, said in (
        (tmp_path / "missing", "no such results folder"),
        (file, "is a file, not a folder"),
    ):
        rc, out, err = _cli(capsys, *argv, "--results", where)
        assert (
            rc == 2
            and err
            == f"orchestrate: error: {where}: {said} (expected the results "
            "folder `orchestrate run` wrote; --results DIR)\n"
        ), err
        assert not out and not (tmp_path / "missing").exists()


def _read_only_mount_works() -> str:
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, text=True)
    return "" if probe.returncode == 0 else f"no mount namespace here: {probe.stderr.strip()}"


@pytest.mark.skipif(bool(_read_only_mount_works()), reason=_read_only_mount_works() or "-")
def test_export_of_a_read_only_results_folder(tmp_path):
    """A read-only bind mount (a private mount namespace, so root's bypass doesn't hide it):
    export without -o says in one line where it can't write; with -o elsewhere it writes."""
    res = tmp_path / "results"
    fill_results(res)
    out = tmp_path / "out"
    out.mkdir()
    cli = f"{sys.executable} -m socketlab.cli"
    script = (
        f"mount --bind -o ro {res} {res} && "
        f"{{ {cli} export {CAMPAIGN} --results {res}; echo rc=$?; }} && "
        f"{cli} export {CAMPAIGN} --results {res} --format parquet -o {out}/m.parquet && "
        f"{cli} serving-report {CAMPAIGN} --results {res} --format html"
    )
    proc = subprocess.run(
        ["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "rc=2" in proc.stdout
    default = res / CAMPAIGN / "metrics.csv"
    assert (
        f"orchestrate: error: {default} (the default, beside the store): folder "
        f"{default.parent} is not writable; give a file elsewhere with -o FILE"
    ) in proc.stderr
    assert not default.exists() and (out / "m.parquet").stat().st_size > 0
    assert "serving report not written to" in proc.stderr


def test_compare_verdict_follows_the_interval_and_the_direction():
    """The rules on runs drawn here (seeded): B = A x factor, plus each side's own spread."""
    rng = np.random.default_rng(7)
    a = 100 * (1 + rng.normal(0, 0.005, 6))
    s, r = Settings(), np.random.default_rng(0)

    def verdict(factor, unit="GB/s", parser="jsonl/1", b=None):
        b = a * factor * (1 + rng.normal(0, 0.005, 6)) if b is None else b
        return judge(a, b, unit, parser, s, r)

    assert verdict(1.0)["verdict"] == SAME
    assert verdict(0.5)["verdict"] == SLOWER and verdict(2.0)["verdict"] == FASTER
    assert verdict(0.5, unit="ms")["verdict"] == FASTER  # a time: lower is faster
    assert verdict(2.0, unit="ms")["verdict"] == SLOWER
    assert verdict(2.0, unit="KiB", parser="collector:proc_peakmem/1")["verdict"] == HIGHER
    assert verdict(0.5, unit="1/s", parser="collector:proc_noise/1")["verdict"] == LOWER
    got = verdict(1.04)  # near the band's edge with this spread: can't say
    assert got["verdict"] in (INCONCLUSIVE, SAME)
    assert (got["verdict"] == SAME) == (got["ci_low"] >= 0.95 and got["ci_high"] <= 1.05)
    wide = verdict(1.0, b=a * np.array([0.6, 1.5, 0.7, 1.4, 1.0, 1.2]))
    assert wide["verdict"] == INCONCLUSIVE and wide["ci_low"] < 0.95 < 1.05 < wide["ci_high"]
    one = judge(a[:1], a[:1] * 0.5, "GB/s", "jsonl/1", s, r)
    assert one["verdict"] == INCONCLUSIVE and "needs 2" in one["why"]


def test_docs_list_every_column_with_its_type():
    """docs/results.md's schema tables are socketlab.results.schema's: each frame's section
    lists exactly its columns, in order, with their types and units."""
    from pathlib import Path

    from socketlab.results.schema import FRAMES

    text = (Path(__file__).resolve().parents[1] / "docs" / "results.md").read_text()
    for name, columns in FRAMES.items():
        section = text.split(f"\n### {name}\n", 1)[1].split("\n##", 1)[0]
        rows = [
            [c.strip() for c in line.strip("|").split("|")]
            for line in section.splitlines()
            if line.startswith("| `")
        ]
        assert [(r[0].strip("`"), r[1], r[2]) for r in rows] == [
            (c.name, c.dtype, c.unit) for c in columns
        ], name
