"""Recorded outputs shaped like the c8i host, generated from the published values with noise.

Every measured cell of a published file becomes stored runs (3 repetitions) with the cell's join
parameters, so the report can be checked end to end through the real store: on the c8i topology
every measured cell must read "reproduced", and a value moved 20% must read "deviates".

The runs carry what the native binaries record beside their values, as campaign-oct.yaml's full
profile runs them on the c8i's 90 workers: metric dimensions (threads, participants, page,
bytes_per_core, tile_kib, ...) and the meta record (seconds, iters, steps, kv_bytes, ...), so the
published conditions can be checked too. ``recorded`` overrides any of those fields (93 workers,
0.2 s per rep) to make a run that did not record the published conditions.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

from socketlab.parse import Metric
from socketlab.parse.collectors import METRIC_SOURCES
from socketlab.report.published import Published
from socketlab.store import RunRecord, Store
from socketlab.topology import topology_from_snapshot

TOPOLOGY = Path(__file__).resolve().parents[1] / "fixtures" / "topology"


def topology_facts(name: str) -> dict:
    """Topology.facts() of a recorded host (c8i-metal-48xl, this-machine, ...)."""
    snap = json.loads((TOPOLOGY / f"{name}.json").read_text())
    return topology_from_snapshot(snap).facts()


#: the c8i's workers: 96 cores less 2 housekeeping cores per SNC node (campaign-oct.yaml)
WORKERS = 90
MIB = 1048576

#: meta fields per experiment as campaign-oct.yaml's full profile runs it (--seconds, --reps,
#: --iters, --steps); None: no binary (noise-idle runs sleep under the noise collector)
RUN_AS: dict[str, dict[str, Any] | None] = {
    **dict.fromkeys(
        ("ladder", "ladder-amx", "dram-imc", "compute", "compute-amx"),
        {"binary": "ladder", "seconds": 2, "reps": 3},
    ),
    **dict.fromkeys(("clocks", "clocks-amx"), {"binary": "ladder", "seconds": 10, "reps": 1}),
    "noise-load": {"binary": "ladder", "seconds": 20, "reps": 1},
    **dict.fromkeys(
        ("exchange", "exchange-umwait"),
        {"binary": "exchange", "iters": 20000, "warmup": 2000, "bytes": 2560},
    ),
    "latency": {"binary": "exchange", "mode": "pingpong", "iters": 300, "pairs": 1},
    **dict.fromkeys(("gemv-batch", "gemv-batch-amx"), {"binary": "gemv", "steps": 2000}),
    "tile-balance": {"binary": "gemv", "row_unit": 4},
    "tile-balance-moe": {"binary": "gemv", "row_unit": 16},
    "kvstream": {"binary": "kvstream", "steps": 200, "tile_tokens": 1024},
    "noise-idle": None,
    # native/layer: the steps are a sweep parameter (5,000 published; P3 long runs 200,000)
    **dict.fromkeys(
        (
            "layer-p2",
            "layer-p2-amx",
            "layer-p3",
            "layer-p4",
            "layer-p4-amx",
            "layer-p5",
            "layer-p5-amx",
            "layer-resident",
            "layer-slice",
        ),
        {"binary": "layer", "steps": 5000},
    ),
    "layer-p3-long": {"binary": "layer", "steps": 200000},
    # the KV policies (P4 selection, footprint, paths, attention only, sliding layers)
    **dict.fromkeys(
        (
            "layer-kv-select",
            "layer-kv-footprint",
            "layer-kv-paths",
            "layer-kv-attn-only",
            "layer-p4-sliding",
        ),
        {"binary": "layer", "steps": 5000},
    ),
    "layer-moe-routing": {"binary": "layer", "steps": 200},
    **dict.fromkeys(("layer-tp", "layer-tp-amx"), {"binary": "layer", "steps": 2000}),
    # the lock experiments (native/layer --lock); the stability chain runs 20,000 steps
    **dict.fromkeys(
        (
            "layer-p4-lock12",
            "layer-p4-lock14",
            "layer-p5-amx-locked",
            "layer-e4b-locked",
            "layer-resident-locked",
        ),
        {"binary": "layer", "steps": 5000},
    ),
    "layer-stability-locked": {"binary": "layer", "steps": 20000},
    "layer-tp-stability-locked": {"binary": "layer", "steps": 100000},
}
#: device paths of the published host beyond the recorded topology snapshot: the campaign ran
#: with pseudo_lock_sram loaded on a kernel with module support (plow-campaign.md §4), so its
#: lock experiments (requires: devices) are planned there, not skipped
PUBLISHED_DEVICES = {"/dev/pseudo_lock": True, "/proc/modules": True}
#: the stage kernel each published `gemv` value means (campaign-oct.yaml)
LAYER_KERNEL = {"avx": "avx512", "amx": "amx"}


def recorded_shape(experiment: str, cond: dict[str, Any]) -> tuple[dict, dict, dict]:
    """(meta record, the binary's metric dimensions, collector metric dimensions) of a run with
    these conditions, in the shape each native binary prints them."""
    run_as = RUN_AS[experiment]
    if run_as is None:
        return {}, {}, {"cpus": WORKERS}
    meta = dict(run_as)
    binary = meta["binary"]
    dims: dict[str, Any] = {}
    if binary == "ladder":
        kernel = cond.get("kernel") or cond.get("load")
        meta.update(threads=WORKERS, kernel=kernel)
        dims.update(threads=WORKERS, kernel=kernel)
        if "pages" in cond:
            meta["page_mode"] = dims["page"] = cond["pages"]
        if "mib_per_core" in cond:
            meta["bytes_per_core"] = dims["bytes_per_core"] = int(cond["mib_per_core"] * MIB)
    elif binary == "exchange":
        n = cond.get("participants", 2)
        meta.update(threads=n)
        dims.update(participants=n, bytes=meta.get("bytes", 64))
    elif binary == "gemv":
        meta.update(threads=WORKERS)
        dims.update(workers=WORKERS, kernel=cond.get("kernel"))
        if "batch" in cond:
            meta["batch"] = dims["batch"] = cond["batch"]
    elif binary == "layer":  # the kernel and workers it ran with, as its meta and metrics say
        stage_kernel = LAYER_KERNEL[cond.get("gemv", "avx")]
        meta.update(
            workers=WORKERS,
            gemv=stage_kernel,
            batch=cond.get("batch", 1),
            steps=cond.get("steps", meta["steps"]),
        )
        dims.update(workers=WORKERS, gemv=stage_kernel, batch=cond.get("batch", 1))
    else:  # kvstream
        meta.update(threads=WORKERS, tokens=cond["context"], kv_bytes=cond["kv_mib"] * MIB)
        dims.update(workers=WORKERS, tokens=cond["context"], tile_kib=256, prefetch_kib=2)
    return meta, dims, {"cpus": WORKERS}


#: runs of a chain (a group with a first / last / drift cell): enough for its quarters and extremes
CHAIN_REPS = 8


def chain_values(stats: dict[str, float], n: int = CHAIN_REPS) -> list[float]:
    """A chain of n values (repetition order) whose first, last, min, max and drift (mean of
    the last quarter over the first's, socketlab.report.compare) are the published ones given;
    the others are free. No noise: a drift's tolerance is 0.02."""
    q = max(1, n // 4)
    first = stats.get("first", stats.get("mean", stats.get("min")))
    last = stats.get("last", first * stats.get("drift", 1.0))
    lo = stats.get("min", min(first, last) * 0.9)
    hi = stats.get("max", max(first, last) * 1.1)
    drift = stats.get("drift", 1.0)
    for i in range(201):  # the first quarter's other runs at v, the last quarter's at w
        v = lo + (hi - lo) * i / 200
        w = (drift * (first + (q - 1) * v) - last) / (q - 1) if q > 1 else last
        if lo <= w <= hi and (q > 1 or abs(last / first - drift) < 1e-9):
            break
    else:
        raise ValueError(f"no chain of {n} runs has {stats}")
    mid = [lo, hi] + [(lo + hi) / 2] * (n - 2 * q - 2)
    return [first] + [v] * (q - 1) + mid + [w] * (q - 1) + [last]


def fill_store(
    store: Store,
    published: Published,
    campaign: str,
    host: str = "c8i",
    noise: float = 0.01,
    shift: dict[str, float] | None = None,
    seed: int = 7,
    repetitions: int = 3,
    recorded: dict[str, Any] | None = None,
    raw_root: Path | None = None,
) -> list[dict[str, Any]]:
    """Store runs for every measured cell; ``shift`` multiplies chosen cells (by cell id);
    ``recorded`` replaces recorded fields (meta and dimensions) of every run that has them.
    With ``raw_root``, each run's meta record goes to raw_root/runs/<key>/meta.json, as the
    runner leaves it. Returns the runs as ``socketlab.report.compare.compare`` takes them.
    """
    rng = random.Random(seed)
    shift = shift or {}
    recorded = recorded or {}
    groups: dict[tuple, dict] = {}
    conditions: dict[tuple, dict] = {}
    chains: dict[tuple, dict[str, dict[str, float]]] = {}  # group -> metric -> statistic -> value
    for cell in published.cells:
        if cell.unmeasured or not cell.experiment:
            continue
        params = cell.join_params()
        key = (cell.experiment, json.dumps(params, sort_keys=True))
        merged = conditions.setdefault(key, {})
        for k, v in cell.conditions.items():
            merged.setdefault(k, v)
        metrics = groups.setdefault(key, {})
        if cell.statistic in ("first", "last", "drift", "min", "max", "mean"):
            chains.setdefault(key, {}).setdefault(cell.metric, {})[cell.statistic] = cell.reference
        if cell.metric in metrics:  # the same measurement published twice: first one wins
            continue
        value = cell.reference * (float(cell.conditions[cell.divide_by]) if cell.divide_by else 1)
        metrics[cell.metric] = (value * shift.get(cell.id, 1.0), cell.unit)
    runs: list[dict[str, Any]] = []

    def add(
        experiment: str,
        key: str,
        rep: int,
        status: str,
        reason: str,
        rows: list[Metric],
        params: dict,
        meta: dict,
    ) -> None:
        raw = ""
        if raw_root is not None and meta:
            folder = raw_root / "runs" / hashlib.sha256(key.encode()).hexdigest()[:16]
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "meta.json").write_text(json.dumps([{"type": "meta", **meta}], indent=1))
            raw = str(folder)
        store.add_run(
            RunRecord(
                run_key=key,
                campaign=campaign,
                experiment=experiment,
                host=host,
                repetition=rep,
                params=params,
                status=status,
                reason=reason,
                raw_dir=raw,
            ),
            rows,
        )
        runs.append(
            {
                "run_key": key,
                "experiment": experiment,
                "host": host,
                "params": params,
                "status": status,
                "reason": reason,
                "meta": meta,
            }
        )

    def swap(fields: dict[str, Any]) -> dict[str, Any]:
        return {k: recorded.get(k, v) for k, v in fields.items()}

    for (experiment, params_json), metrics in groups.items():
        params = json.loads(params_json)
        meta, dims, collector_dims = (
            swap(x) for x in recorded_shape(experiment, conditions[(experiment, params_json)])
        )
        shape = {name: dict(collector_dims if name in METRIC_SOURCES else dims) for name in metrics}
        chain = {
            m: chain_values(st)
            for m, st in chains.get((experiment, params_json), {}).items()
            if {"first", "last", "drift"} & set(st)
        }
        for rep in range(CHAIN_REPS if chain else repetitions):
            rows = [
                Metric(
                    name,
                    chain[name][rep] if name in chain else value * (1 + rng.uniform(-noise, noise)),
                    unit,
                    {**shape[name], "rep": rep},
                    "jsonl/1",
                )
                for name, (value, unit) in metrics.items()
            ]
            # a summary record, as the native binaries print after the reps: never counted
            rows += [
                Metric(name, value * 10, unit, {**shape[name], "stat": "best"}, "jsonl/1")
                for name, (value, unit) in metrics.items()
            ]
            add(experiment, f"{experiment}:{params_json}:{rep}", rep, "ok", "", rows, params, meta)
        # a warm-up and a failed run with wild values: both must be ignored
        wild = [
            Metric(name, value * 5, unit, shape[name]) for name, (value, unit) in metrics.items()
        ]
        add(experiment, f"{experiment}:{params_json}:warm", -1, "ok", "", wild, params, meta)
        add(
            experiment,
            f"{experiment}:{params_json}:fail",
            CHAIN_REPS if chain else repetitions,
            "failed",
            "exit 1",
            wild,
            params,
            meta,
        )
    return runs
