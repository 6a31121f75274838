"""Predicted vs measured real-layer stages on this host (docs/planner.md).

Every run is stored in the toolkit's store (results/planner-host/store.sqlite, host HOST, run
key = sha256 of host + argv + repetition); the constants are read back from it by
`socketlab.plan.stage_constants` exactly as `orchestrate stage-plan --host` and the report's
planner section read them.

1. Constants, on the same CPUS as the stages:
   - GEMV: `layer --slice 0/W` of every dump at B = 1 and 16: the stage's own kernel on the W
     workers' shares at once, exchanges as local copies, no barriers; rate = weight bytes per
     worker / (step p50 - attention p50);
   - KV: `layer --slice --ctx N` of the 16K dump at 1K and 4K (experiment kv-attn): attention's
     own arithmetic, extrapolated to the 16K stage;
   - exchange and all-gather: `exchange --mode diss` at 2,560 B and 37,376 B (W >= 2 only; one
     worker has no peer to wait for or gather from, both terms are 0).
2. Stages: `layer --dump D --batch B --cpus CPUS --xchg direct` for every dump at B = 1 and 16.
   Slice and stage runs alternate, REPS times, so a change in the machine's load hits both; the
   measured figure is the median of the stage's step p50s, the constants medians of theirs.
3. Predictions: `socketlab.plan.stage.layer_stage` of each dump's shape, and the table:
   predicted, measured, error, by term (measured terms: p50s of the stage's phases).

usage: stage_plan_host.py BUILD_DIR [--cpus 0,1] [--host localhost] [--steps N] [--reps N]
       [--results DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from socketlab.parse import Metric  # noqa: E402
from socketlab.parse.jsonl import parse_jsonl  # noqa: E402
from socketlab.plan.stage import Budget, Constants, layer_stage  # noqa: E402
from socketlab.plan.stage_constants import (  # noqa: E402
    constants_from_store,
    measured_constants,
    stored_runs,
)
from socketlab.plan.stage_model import layer_model, units  # noqa: E402
from socketlab.store import RunRecord, Store  # noqa: E402

STAGES = [("tiny", 100), ("gemma4-e2b-l0", 2048), ("tiny-full", 16384)]
CAMPAIGN = "planner-host"


def run_stored(store: Store, host: str, experiment: str, argv: list[str], params: dict,
               rep: int = 0) -> dict:
    key = hashlib.sha256(json.dumps([host, argv, rep]).encode()).hexdigest()
    t0 = time.time()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv)}: exit {proc.returncode}: {proc.stderr.strip()[-500:]}")
    metrics, _, _ = parse_jsonl(proc.stdout)
    store.add_run(RunRecord(run_key=key, campaign=CAMPAIGN, experiment=experiment, host=host,
                            repetition=rep, params=params, status="ok", exit_code=0, started=t0,
                            finished=time.time(), duration_s=time.time() - t0, argv=argv),
                  [Metric(m["name"], m["value"], m["unit"], m["dims"], "jsonl/1")
                   for m in metrics])
    return {"key": key, "metrics": metrics}


def m(recs: list[dict], name: str, **dims) -> float:
    return sum(r["value"] for r in recs
               if r["name"] == name and all(r["dims"].get(k) == v for k, v in dims.items()))


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--cpus", default="0,1")
    ap.add_argument("--host", default="localhost")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--results", default=str(REPO / "results"))
    ap.add_argument("--table-only", action="store_true",
                    help="run nothing: the table from the runs already in the store")
    a = ap.parse_args()
    build = Path(a.build)
    workers = len(a.cpus.split(","))
    results = Path(a.results)
    (results / CAMPAIGN).mkdir(parents=True, exist_ok=True)
    if a.table_only:
        stage_runs: dict[tuple, list[dict]] = {}
        for r in stored_runs(results, a.host):
            if r["campaign"] == CAMPAIGN and r["experiment"] == "layer":
                p = r["params"]
                stage_runs.setdefault((p["shape"], p["context"], p["batch"]), []).append(
                    {"key": r["key"], "metrics": [{"name": n, "value": v, "dims": d}
                                                  for n, v, d in r["metrics"]]})
        return table(a, results, workers, stage_runs)  # --cpus as in the run
    store = Store(results / CAMPAIGN / "store.sqlite")
    tmp = Path(tempfile.mkdtemp(prefix="stage-plan-host-"))
    orch = str(Path(sys.executable).parent / "orchestrate")
    print(f"{time.strftime('%H:%M:%S', time.gmtime())} UTC, load {load()}: dumps")
    dumps = {}
    for shape, ctx in STAGES:
        d = tmp / f"{shape}.c{ctx}"
        subprocess.run([orch, "layer-dump", shape, "--context", str(ctx), "--batch", "16",
                        "--seed", "1", "--out", str(d), "--quiet"], check=True, timeout=900)
        dumps[shape, ctx] = d
    layer = [str(build / "layer"), "--cpus", a.cpus, "--gemv", "avx2", "--steps", str(a.steps)]
    full = dumps["tiny-full", 16384]
    stage_runs: dict[tuple, list[dict]] = {}
    loads = []
    for rep in range(a.reps):
        loads.append(load())
        print(f"{time.strftime('%H:%M:%S', time.gmtime())} UTC, load {loads[-1]}: rep {rep}")
        for nbytes in (2560, 37376) if workers > 1 else ():
            run_stored(store, a.host, "exchange",
                       [str(build / "exchange"), "--mode", "diss", "--cpus", a.cpus, "--bytes",
                        str(nbytes), "--iters", "5000", "--warmup", "500"], {"bytes": nbytes},
                       rep)
        for b in (1, 16):
            for n in (1024, 4096):
                run_stored(store, a.host, "kv-attn",
                           [*layer, "--dump", str(full), "--slice", f"0/{workers}", "--batch",
                            str(b), "--ctx", str(n)], {"context": n, "batch": b}, rep)
        for (shape, ctx), d in dumps.items():
            for b in (1, 16):
                p = {"shape": shape, "context": ctx, "batch": b}
                run_stored(store, a.host, "gemv-slice",
                           [*layer, "--dump", str(d), "--slice", f"0/{workers}", "--batch",
                            str(b)], p, rep)
                stage_runs.setdefault((shape, ctx, b), []).append(run_stored(
                    store, a.host, "layer", [*layer, "--dump", str(d), "--batch", str(b),
                                             "--xchg", "direct"], p, rep))
    store.close()
    print(f"load average (1 min) at each rep: {', '.join(loads)}; after: {load()}")
    table(a, results, workers, stage_runs)


def table(a: argparse.Namespace, results: Path, workers: int,
          stage_runs: dict[tuple, list[dict]]) -> None:
    if workers > 1:
        found = measured_constants(a.host, results=results)
        base = constants_from_store(a.host, results=results)
        for k in ("exchange_us", "act_gbps"):
            v = found[k]
            print(f"  {k} = {v.value:.4g}: {v.detail}; runs "
                  f"{', '.join(x[:12] for x in v.run_keys)}")
    else:
        base = Constants(gemv_gbps_per_core=1, exchange_us=0.0, kv_gbps=1, act_gbps=float("inf"))
        print("one worker: sync and all-gather terms are 0 (no peer)")
    rows = []
    for (shape, ctx, b), runs in stage_runs.items():
        us = units(layer_model(shape))
        nbytes = sum(x.bytes for x in us if x.kind != "head") // workers
        g = measured_constants(a.host, results=results, bytes_per_core=nbytes, batch=b)
        if (shape, ctx, b) == ("tiny-full", 16384, b):
            print(f"  kv_gbps at B={b} = {g['kv_gbps'].value:.4g}: {g['kv_gbps'].detail}")
        cc = dataclasses.replace(base, gemv_gbps_per_core=g["gemv_gbps_per_core"].value,
                                 kv_gbps=g["kv_gbps"].value)
        pred = layer_stage(us, 0, Budget(cores=workers, batch=b, context=ctx), cc)
        steps = sorted(m(r["metrics"], "step_p50") for r in runs)
        meas = statistics.median(steps)
        rec = min(runs, key=lambda r: abs(m(r["metrics"], "step_p50") - meas))["metrics"]
        weight_p50 = sum(r["value"] for r in rec if r["name"] == "phase_gemv_p50"
                         and r["dims"].get("phase") != "attention")
        att = m(rec, "phase_gemv_p50", phase="attention")
        row = {"stage": f"{shape} {ctx // 1024 or ctx}{'K' if ctx >= 1024 else ''}", "batch": b,
               "predicted_us": pred.total_us, "measured_us": meas,
               "measured_reps_us": [round(x, 1) for x in steps],
               "error": pred.total_us / meas - 1, "runs": [r["key"][:12] for r in runs],
               "gemv_runs": [k[:12] for k in g["gemv_gbps_per_core"].run_keys],
               "gemv_gbps": cc.gemv_gbps_per_core, "kv_gbps": cc.kv_gbps,
               "pred": {k: round(v, 1) for k, v in pred.terms().items()},
               # measured terms of the median run: p50 per phase
               "meas": {"gemv_us": round(weight_p50, 1), "attention_us": round(att, 1),
                        "rest_us": round(meas - weight_p50 - att, 1)}}
        rows.append(row)
        print(json.dumps(row))
    print("\n| stage | B | predicted µs | measured p50 µs | error | predicted gemv / sync / kv / "
          "act | measured gemv / attention / rest |")
    print("|---|---:|---:|---:|---:|---|---|")
    for r in rows:
        p, q = r["pred"], r["meas"]
        print(f"| {r['stage']} | {r['batch']} | {r['predicted_us']:.1f} | {r['measured_us']:.1f}"
              f" | {r['error']:+.0%} | {p['gemv_us']} / {p['sync_us']} / {p['kv_us']} / "
              f"{p['act_us']} | {q['gemv_us']} / {q['attention_us']} / {q['rest_us']} |")


if __name__ == "__main__":
    main()
