"""Recorded outputs shaped like the c8i host, generated from the published values with noise.

Every measured cell of a published file becomes stored runs (3 repetitions) with the cell's join
parameters, so the report can be checked end to end through the real store: on the c8i topology
every measured cell must read "reproduced", and a value moved 20% must read "deviates".
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from socketlab.parse import Metric
from socketlab.report.published import Published
from socketlab.store import RunRecord, Store
from socketlab.topology import topology_from_snapshot

TOPOLOGY = Path(__file__).resolve().parents[1] / "fixtures" / "topology"


def topology_facts(name: str) -> dict:
    """Topology.facts() of a recorded host (c8i-metal-48xl, this-machine, ...)."""
    snap = json.loads((TOPOLOGY / f"{name}.json").read_text())
    return topology_from_snapshot(snap).facts()


def fill_store(store: Store, published: Published, campaign: str, host: str = "c8i",
               noise: float = 0.01, shift: dict[str, float] | None = None, seed: int = 7) -> int:
    """Store runs for every measured cell; ``shift`` multiplies chosen cells (by cell id).

    Returns the number of runs stored.
    """
    rng = random.Random(seed)
    shift = shift or {}
    groups: dict[tuple, dict] = {}
    for cell in published.cells:
        if cell.unmeasured or not cell.experiment:
            continue
        params = cell.join_params()
        key = (cell.experiment, json.dumps(params, sort_keys=True))
        metrics = groups.setdefault(key, {})
        if cell.metric in metrics:  # the same measurement published twice: first one wins
            continue
        value = cell.reference * (float(cell.conditions[cell.divide_by]) if cell.divide_by else 1)
        metrics[cell.metric] = (value * shift.get(cell.id, 1.0), cell.unit)
    n = 0
    for (experiment, params_json), metrics in groups.items():
        params = json.loads(params_json)
        for rep in range(3):
            key = f"{experiment}:{params_json}:{rep}"
            rows = [
                Metric(name, value * (1 + rng.uniform(-noise, noise)), unit, {"rep": rep}, "jsonl/1")
                for name, (value, unit) in metrics.items()
            ]
            # a summary record, as the native binaries print after the reps: never counted
            rows += [Metric(name, value * 10, unit, {"stat": "best"}, "jsonl/1")
                     for name, (value, unit) in metrics.items()]
            store.add_run(RunRecord(run_key=key, campaign=campaign, experiment=experiment,
                                    host=host, repetition=rep, params=params, status="ok"), rows)
            n += 1
        # a warm-up and a failed run with wild values: both must be ignored
        wild = [Metric(name, value * 5, unit) for name, (value, unit) in metrics.items()]
        store.add_run(RunRecord(run_key=f"{experiment}:{params_json}:warm", campaign=campaign,
                                experiment=experiment, host=host, repetition=-1, params=params,
                                status="ok"), wild)
        store.add_run(RunRecord(run_key=f"{experiment}:{params_json}:fail", campaign=campaign,
                                experiment=experiment, host=host, repetition=3, params=params,
                                status="failed", reason="exit 1"), wild)
    return n
