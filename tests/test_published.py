"""Published-values files: the real file loads, and files that break the schema fail clearly."""

from __future__ import annotations

from pathlib import Path

import pytest

from socketlab.errors import SpecError
from socketlab.report.published import load_published, published_for_campaign

HERE = Path(__file__).resolve().parent
BAD = sorted((HERE / "published" / "bad").glob("*.yaml"))
REAL = HERE.parent / "experiments" / "published" / "sram-oct-2026.yaml"


def test_real_file_has_the_issue_tables():
    pub = load_published(REAL)
    ids = {t.id for t in pub.tables}
    for needed in (
        "ladder",
        "per-core-l2",
        "compute",
        "clocks",
        "exchange",
        "exchange-floor",
        "batching",
        "kv-stream",
        "noise",
    ):
        assert needed in ids
    cells = {c.id: c for c in pub.cells}
    # The issue's anchor numbers are data, with units and sources.
    assert cells["per-core-l2/avx512-read/bw_per_core_mean"].value == 171
    assert cells["per-core-l2/amx-bf16-stream/bw_per_core_mean"].value == 139
    assert cells["per-core-l2/avx512-bf16-gemv/bw_per_core_mean"].value == 101
    assert cells["exchange-floor/full-socket/exchange_best"].value == 1.81
    assert cells["exchange-floor/die-local/exchange_best"].value == 0.58
    assert cells["exchange/n32-diss/exchange_p50"].samples == (1.11, 1.08, 1.09)
    amx = cells["batching/e2b-l0-2k-b16-amx/us_per_token"]
    assert (amx.value, amx.unit, amx.better) == (13.3, "us", "lower")
    assert amx.requires == ("amx_bf16",)
    assert cells["kv-stream/e4b-l5-128k/kv_read_bandwidth"].range == (566, 626)
    assert all(c.source for c in pub.cells)
    # 27 ladder cells: 3 tiers' sizes x 4 KiB/THP x the three kernels.
    assert len(pub.table("ladder").cells) == 27
    assert {c.conditions["kernel"] for c in pub.table("ladder").cells} == {
        "avx512-read",
        "amx-bf16-stream",
        "avx512-bf16-gemv",
    }
    # Every measured cell's join keys are present; every unmeasured one says why.
    for c in pub.cells:
        assert c.experiment or c.unmeasured, c.id
        assert set(c.join) <= set(c.conditions), c.id


def test_minimal_file_loads_and_finds_its_campaign(tmp_path):
    good = HERE / "published" / "good-minimal.yaml"
    (tmp_path / "tiny.yaml").write_text(good.read_text())
    pub = load_published(good)
    assert pub.cells[0].tolerance.rel == 0.05  # the default
    assert [p.id for p in published_for_campaign("tiny-campaign", tmp_path)] == ["tiny"]
    assert published_for_campaign("other", tmp_path) == []


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_bad_file_fails_with_one_clear_line(path):
    expected = path.read_text().splitlines()[0].removeprefix("# expect: ").split("|")
    with pytest.raises(SpecError) as info:
        load_published(path)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(str(path))
    for part in expected:
        assert part in msg, f"{part!r} not in {msg!r}"


def test_bad_corpus_covers_the_issue_cases():
    names = {p.stem for p in BAD}
    assert {"missing-source", "unknown-unit", "unknown-condition"} <= names
    assert len(names) >= 10


def test_missing_file_is_a_user_error(tmp_path):
    with pytest.raises(SpecError, match="cannot read"):
        load_published(tmp_path / "nope.yaml")
