"""Units have one table (socketlab.units): the published schema's enum is that table, and every
metric the serving path stores carries a unit from it, named by the metric's definition."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from socketlab import units
from socketlab.paths import SCHEMAS
from socketlab.serve import metrics, vllm_import
from socketlab.serve.records import RequestRecord

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "serve"
MS = 1_000_000


def test_the_published_schemas_unit_enum_is_the_table():
    schema = json.loads((SCHEMAS / "published.schema.json").read_text())
    enum = schema["$defs"]["unit"]["enum"]
    assert len(enum) == len(set(enum))
    assert set(enum) == set(units.UNITS)


def _records() -> list[RequestRecord]:
    out = []
    for i in range(6):
        send = i * 50 * MS
        events = [[send + 20 * MS + k * 5 * MS, 1] for k in range(4)]
        ok = i != 5
        out.append(
            RequestRecord(
                index=i,
                phase="measured",
                n_in=10,
                t_sched=send,
                t_send=send,
                events=events if ok else [],
                t_done=events[-1][0],
                n_out=4 if ok else 0,
                status="ok" if ok else "error",
                error=None if ok else "boom",
            )
        )
    return out


def test_every_number_of_a_serving_summary_has_a_defined_unit():
    summary = metrics.compute(_records(), metrics.Slo(ttft_ms=30, tpot_ms=10))
    numbers = {
        k for k, v in summary.items() if isinstance(v, int | float) and not isinstance(v, bool)
    }
    stored = {name: unit for name, _, unit in metrics.scalar_metrics(summary)}
    assert numbers - set(stored) == set()  # none is dropped for want of a unit
    assert set(stored.values()) <= set(units.UNITS)
    assert (
        stored["mean_ttft_ms"],
        stored["request_throughput"],
        stored["completed"],
        stored["slo_attainment"],
        stored["p99_tpot_ms"],
    ) == ("ms", "req/s", "count", "fraction", "ms")


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.glob("vllm-*-c4.json")))
def test_an_imported_vllm_file_stores_only_table_units(name):
    doc = json.loads((FIXTURES / name).read_text())
    try:
        result = vllm_import.import_vllm(FIXTURES / name)
    except Exception as exc:  # noqa: BLE001 - a fixture of another layout is not this test's
        pytest.skip(f"{name}: {exc}")
    assert {m.unit for m in result["metrics"]} <= set(units.UNITS)
    theirs = {m.name: m.unit for m in result["metrics"] if m.dims.get("source") == "vllm"}
    assert theirs["mean_ttft_ms"] == "ms" and theirs["request_throughput"] == "req/s"
    # vLLM's numbers all reach the store (percentiles by their pattern: vLLM's are the user's)
    assert {k.rstrip(":") for k, v in doc.items() if isinstance(v, int | float)} <= set(theirs)


def test_units_convert_within_a_dimension_only():
    assert units.convert(1500, "GB/s", "TB/s") == pytest.approx(1.5)
    assert units.convert(1, "W", "C") is None and units.convert(1, "W", "W") == 1
    assert units.convert(1, "furlongs/s", "GB/s") is None


def test_cas_counts_become_bytes_by_perfs_unit():
    assert units.cas_bytes(2.0, "MiB") == 2 * 1024**2
    assert units.cas_bytes(3.0, "") == 3 * 64  # a raw count of 64-byte lines
    assert units.cas_bytes(3.0, " B ") == 3.0


def test_guidellms_latencies_have_their_unit_too():
    from socketlab.serve.guidellm_import import MAPPED

    summary = {f"{stat}_{ours}_ms": 1.0 for ours, _ in MAPPED.values() for stat in ("mean", "p95")}
    assert {(n, u) for n, _, u in metrics.scalar_metrics(summary)} == {(k, "ms") for k in summary}
