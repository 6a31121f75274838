"""SYNTHESIZED (not recorded): a native/layer slice run as a Granite Rapids core would print it.

No slice run of the real-layer stage has been recorded on a host with the published core yet
(tests/published/recorded/gnr-kvm-2vcpu/ predates native/layer). To test how the report puts
one worker's per-phase compute next to the published per-phase figures per core, this module
writes the stage's JSON-lines output in its exact format (meta record, step and per-phase
records as `layer --slice 0/90` prints them, checked against a real run in
tests/test_campaign_layer.py) with per-phase values chosen to equal the published E2B L0 2K
figures (gate/up 7.2 µs, down 3.1 µs, the 8 phases summing to 20 µs; plow-campaign.md §5.5).
The meta record says ``"synthesized": true``. It is stored beside the recorded Granite Rapids
guest's runs (tests/published/gnr_recorded.py), never called recorded.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from socketlab.parse import parse_output
from socketlab.spec.points import ParserSpec
from socketlab.store import COMPLETE, RunRecord, Store, store_path
from tests.published.gnr_recorded import CAMPAIGN, HOST

#: per-phase compute of worker 0 of 90 (µs per step): gate/up and down as published, the rest
#: chosen so the phases sum to the published ~20 µs compute without all-gather
PHASES = {
    "qkv": 3.0,
    "attention": 4.0,
    "combine": 0.5,
    "o": 1.2,
    "gateup": 7.2,
    "down": 3.1,
    "ple_gate": 0.6,
    "ple_proj": 0.4,
}
PARAMS = {"layer": "E2B L0", "context": 2048, "workers": 90, "gemv": "avx", "steps": 5000}


def slice_output(phases: dict[str, float] = PHASES, rep: int = 0) -> str:
    """The stage's stdout of one slice run with these per-phase compute times."""
    common = {
        "gemv": "avx512",
        "xchg": "repnt",
        "barrier": "diss",
        "nobcast": False,
        "batch": 1,
        "workers": 90,
        "shape": "gemma4-e2b-l0",
        "ctx": 511,
        "slice_worker": 0,
    }
    meta = {
        "type": "meta",
        "binary": "layer",
        "version": "0.1.0",
        "synthesized": True,
        "cpu_model": "Intel(R) Xeon(R) Processor",
        "cpus": "0",
        "threads": 1,
        **common,
        "steps": 5000,
        "slice": True,
        "slice_of": 90,
        "numerics_checked": False,
        "numerics": "not checked: slice mode (exchanges are local copies)",
    }
    total = sum(phases.values())
    lines = [meta]
    for name, value in (
        ("step_p50", total * 1.05),
        ("step_p95", total * 1.2),
        ("step_p99", total * 1.4),
        ("step_max", total * 3),
    ):
        lines.append({"type": "metric", "name": name, "value": value, "unit": "us", **common})
    for phase, value in phases.items():
        v = value * (1 + 0.002 * rep)  # three repetitions a little apart
        lines.append(
            {
                "type": "metric",
                "name": "phase_compute",
                "value": v,
                "unit": "us",
                **common,
                "phase": phase,
                "mean": v,
            }
        )
        lines.append(
            {
                "type": "metric",
                "name": "phase_gemv",
                "value": 0.8 * v,
                "unit": "us",
                **common,
                "phase": phase,
                "mean": 0.8 * v,
            }
        )
        lines.append(
            {
                "type": "metric",
                "name": "phase_barrier",
                "value": 0.0,
                "unit": "us",
                **common,
                "phase": phase,
            }
        )
    return "\n".join(json.dumps(x) for x in lines) + "\n"


def add_slice_runs(
    results: Path,
    phases: dict[str, float] = PHASES,
    host: str = HOST,
    repetitions: int = 3,
    probe: bool = True,
) -> None:
    """Store ``repetitions`` synthesized slice runs as campaign-oct's layer-slice point, each
    with the recorded quiet probe readings around it (gnr_recorded.probe_record) unless
    ``probe`` is False."""
    from tests.published.gnr_recorded import probe_record

    campaign_dir = results / CAMPAIGN
    with Store(store_path(CAMPAIGN, results)) as store:
        for rep in range(repetitions):
            stdout = slice_output(phases, rep)
            parsed = parse_output([ParserSpec("jsonl")], stdout)
            assert not parsed.errors, parsed.errors
            key = hashlib.sha256(f"layer-slice:synthesized:{rep}".encode()).hexdigest()[:16]
            raw = campaign_dir / "runs" / key
            raw.mkdir(parents=True, exist_ok=True)
            (raw / "stdout").write_text(stdout)
            (raw / "meta.json").write_text(json.dumps(parsed.meta, indent=1))
            store.add_run(
                RunRecord(
                    run_key=key,
                    campaign=CAMPAIGN,
                    experiment="layer-slice",
                    host=host,
                    repetition=rep,
                    params=dict(PARAMS),
                    status=COMPLETE,
                    cpus="0",
                    raw_dir=str(raw),
                    extra={"probe": probe_record(False)} if probe else {},
                ),
                parsed.metrics,
            )
