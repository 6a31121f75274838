"""Predicted vs measured real-layer stages on this host (docs/planner.md).

1. Constants: short runs of the native binaries on CPUS, each stored in the toolkit's store
   (results/planner-host/store.sqlite, host HOST, run key = sha256 of host + argv):
   `layer --slice 0/W` on every dump (the GEMV kernel on one worker's share, no exchanges),
   `exchange --mode diss` at 2,560 B and at a larger vector (exchange and all-gather rate),
   `ladder --kernel avx2-read` at the 16K dump's KV bytes per worker (KV rate; kvstream
   needs AVX-512).
2. Stages: `layer --dump D --batch B --cpus CPUS --xchg direct` for every dump at B = 1 and 16,
   stored the same way.
3. Predictions: `socketlab.plan.stage.layer_stage` of each dump's shape with the constants read
   back from the store (`constants_from_store`, GEMV rate from the slice run of that dump), and
   the table: predicted, measured, error, by term (measured terms from the stage's phases).

usage: stage_plan_host.py BUILD_DIR [--cpus 0,1] [--host localhost] [--steps N] [--results DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from socketlab.layer.shapes import load_shape  # noqa: E402
from socketlab.parse import Metric  # noqa: E402
from socketlab.parse.jsonl import parse_jsonl  # noqa: E402
from socketlab.plan.stage import Budget, layer_stage  # noqa: E402
from socketlab.plan.stage_constants import constants_from_store, measured_constants  # noqa: E402
from socketlab.plan.stage_model import Model, units  # noqa: E402
from socketlab.store import RunRecord, Store  # noqa: E402

STAGES = [("tiny", 100), ("gemma4-e2b-l0", 2048), ("tiny-full", 16384)]
CAMPAIGN = "planner-host"


def run_stored(store: Store, host: str, experiment: str, argv: list[str], params: dict) -> dict:
    key = hashlib.sha256(json.dumps([host, argv]).encode()).hexdigest()
    t0 = time.time()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv)}: exit {proc.returncode}: {proc.stderr.strip()[-500:]}")
    metrics, _, _ = parse_jsonl(proc.stdout)
    store.add_run(RunRecord(run_key=key, campaign=CAMPAIGN, experiment=experiment, host=host,
                            repetition=0, params=params, status="ok", exit_code=0, started=t0,
                            finished=time.time(), duration_s=time.time() - t0, argv=argv),
                  [Metric(m["name"], m["value"], m["unit"], m["dims"], "jsonl/1")
                   for m in metrics])
    return {"key": key, "metrics": metrics}


def model_of(shape_name: str) -> Model:
    """One layer of the shape file as a one-layer model (the stage runs exactly that layer)."""
    s = load_shape(shape_name)
    tc = {"hidden_size": s.hidden, "num_hidden_layers": 1, "num_attention_heads": s.heads,
          "num_key_value_heads": s.kv_heads, "head_dim": s.head_dim,
          "intermediate_size": s.inter, "layer_types": [s.layer_type], "vocab_size": 16,
          "hidden_size_per_layer_input": s.ple, "attention_k_eq_v": s.kv_eq}
    if s.window:
        tc["sliding_window"] = s.window - 1  # the stage attends window - 1 cached rows
    return Model(shape_name, tc, s.source or shape_name, {})


def m(recs: list[dict], name: str, **dims) -> float:
    return sum(r["value"] for r in recs
               if r["name"] == name and all(r["dims"].get(k) == v for k, v in dims.items()))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--cpus", default="0,1")
    ap.add_argument("--host", default="localhost")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--results", default=str(REPO / "results"))
    a = ap.parse_args()
    build = Path(a.build)
    workers = len(a.cpus.split(","))
    results = Path(a.results)
    (results / CAMPAIGN).mkdir(parents=True, exist_ok=True)
    store = Store(results / CAMPAIGN / "store.sqlite")
    tmp = Path(tempfile.mkdtemp(prefix="stage-plan-host-"))
    orch = str(Path(sys.executable).parent / "orchestrate")
    dumps = {}
    for shape, ctx in STAGES:
        d = tmp / f"{shape}.c{ctx}"
        subprocess.run([orch, "layer-dump", shape, "--context", str(ctx), "--batch", "16",
                        "--seed", "1", "--out", str(d), "--quiet"], check=True, timeout=900)
        dumps[shape, ctx] = d
    # constants
    first = a.cpus.split(",")[0]
    for (shape, ctx), d in dumps.items():
        for b in (1, 16):  # the portable GEMV is compute-bound: its rate depends on the batch
            run_stored(store, a.host, "gemv-slice",
                       [str(build / "layer"), "--dump", str(d), "--slice", f"0/{workers}",
                        "--cpus", first, "--gemv", "avx2", "--batch", str(b), "--steps",
                        str(a.steps)], {"shape": shape, "context": ctx, "batch": b})
    for nbytes in (2560, 37376):
        run_stored(store, a.host, "exchange",
                   [str(build / "exchange"), "--mode", "diss", "--cpus", a.cpus, "--bytes",
                    str(nbytes), "--iters", "5000", "--warmup", "500"], {"bytes": nbytes})
    full = load_shape("tiny-full")
    # kvstream needs AVX-512; on an AVX2-only host the KV rate is the ladder's avx2-read of the
    # 16K dump's KV bytes per worker (the stream without the attention arithmetic)
    kv_bytes = 2 * full.kv_heads * full.head_dim * 2 * 16384
    run_stored(store, a.host, "kv-read",
               [str(build / "ladder"), "--kernel", "avx2-read", "--size", str(kv_bytes // workers),
                "--cpus", a.cpus, "--seconds", "0.5", "--reps", "3"], {"context": 16384})
    # stages
    measured = {}
    for (shape, ctx), d in dumps.items():
        for b in (1, 16):
            measured[shape, ctx, b] = run_stored(
                store, a.host, "layer",
                [str(build / "layer"), "--dump", str(d), "--batch", str(b), "--cpus", a.cpus,
                 "--xchg", "direct", "--gemv", "avx2", "--steps", str(a.steps)],
                {"shape": shape, "context": ctx, "batch": b})
    store.close()
    # predictions from the store
    c = constants_from_store(a.host, results=results)
    found = measured_constants(a.host, results=results)
    print(f"constants for {a.host} from {results}/{CAMPAIGN}/store.sqlite:")
    for k, v in found.items():
        print(f"  {k} = {v.value:.4g}: {v.detail}; runs {', '.join(x[:12] for x in v.run_keys)}")
    rows = []
    for (shape, ctx, b), run in measured.items():
        model = model_of(shape)
        us = units(model)
        nbytes = sum(x.bytes for x in us if x.kind != "head") // workers
        g = measured_constants(a.host, results=results, bytes_per_core=nbytes, batch=b)
        cc = dataclasses.replace(c, gemv_gbps_per_core=g["gemv_gbps_per_core"].value)
        pred = layer_stage(us, 0, Budget(cores=workers, batch=b, context=ctx), cc)
        rec = run["metrics"]
        meas = m(rec, "step_p50")
        row = {"stage": f"{shape} {ctx // 1024 or ctx}{'K' if ctx >= 1024 else ''}", "batch": b,
               "predicted_us": pred.total_us, "measured_us": meas,
               "error": pred.total_us / meas - 1, "run": run["key"][:12],
               "gemv_gbps": cc.gemv_gbps_per_core,
               "pred": {k: round(v, 1) for k, v in pred.terms().items()},
               "meas": {"gemv_us": round(m(rec, "phase_gemv"), 1),
                        "compute_us": round(m(rec, "phase_compute"), 1),
                        "barrier_us": round(m(rec, "phase_barrier"), 1),
                        "attention_us": round(m(rec, "phase_compute", phase="attention")
                                              + m(rec, "phase_compute", phase="combine")
                                              - m(rec, "phase_gemv", phase="attention"), 1)}}
        rows.append(row)
        print(json.dumps(row))
    print("\n| stage | B | predicted µs | measured p50 µs | error | predicted gemv / sync / kv / "
          "act | measured gemv / barrier / attention |")
    print("|---|---:|---:|---:|---:|---|---|")
    for r in rows:
        p, q = r["pred"], r["meas"]
        print(f"| {r['stage']} | {r['batch']} | {r['predicted_us']:.1f} | {r['measured_us']:.1f}"
              f" | {r['error']:+.0%} | {p['gemv_us']} / {p['sync_us']} / {p['kv_us']} / "
              f"{p['act_us']} | {q['gemv_us']} / {q['barrier_us']} / {q['attention_us']} |")


if __name__ == "__main__":
    main()
