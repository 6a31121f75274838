"""Predicted vs measured real-layer stages on this host (docs/planner.md).

Every run is stored in the toolkit's store (results/planner-host/store.sqlite, host HOST, run
key = sha256 of host + argv + repetition); the constants are read back from it by
`socketlab.plan.stage_constants` exactly as `orchestrate stage-plan --host` and the report's
planner section read them.

1. Constants, on the same CPUS as the stages:
   - GEMV: `layer --slice 0/W` of every dump at B = 1 and 16: the stage's own kernel on the W
     workers' shares at once, exchanges as local copies, no barriers; rate = weight bytes per
     worker / the weight phases' GEMV p50s (the kernel alone);
   - elements (norms, RoPE, residuals, combine, gelu): the same slice runs' per-phase timers
     (phase_compute - phase_gemv), of the *other* shapes only (the calibration shapes CALIB and
     the other stages), never of the stage predicted;
   - KV: `layer --slice --ctx N` (experiment kv-attn) of the 16K dump at 1K, 4K, 8K, 12K and
     of one synthetic dump per attention class (head_dim, GQA group) in ATTN_CLASSES at
     CLASS_CTX: attention's own arithmetic per class and batch; the stage's attention takes
     its own class's rate at its batch, the pair of contexts nearest its KV bytes per step
     (`Constants.kv_classes`; --one-kv-rate: the 16K dump's for every stage, as before);
   - exchange and all-gather: `exchange --mode diss` at 2,560 B and 37,376 B (W >= 2 only; one
     worker has no peer to wait for or gather from, both terms are 0).
2. Stages: `layer --dump D --batch B --cpus CPUS --xchg direct` for every dump at B = 1 and 16.
   Slice and stage runs alternate, REPS times, so a change in the machine's load hits both; the
   measured figure is the median of the stage's step p50s, the constants medians of theirs.
3. Predictions: `socketlab.plan.stage.layer_stage` of each dump's shape, and the table:
   predicted, measured, error, by term (measured terms: p50s of the stage's phases).

usage: stage_plan_host.py BUILD_DIR [--cpus 0,1] [--host localhost] [--steps N] [--reps N]
       [--gemv avx512|avx2] [--results DIR] [--table-only [--one-kv-rate | --warm-only]]
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import math
import os
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
from socketlab.plan.stage import (  # noqa: E402
    TERMS,
    Budget,
    Constants,
    Prediction,
    kv_evicted,
    layer_load,
    predict,
)
from socketlab.plan.stage_constants import (  # noqa: E402
    Measured,
    measured_constants,
    measured_kv_classes,
    stored_runs,
)
from socketlab.plan.stage_model import layer_model, units  # noqa: E402
from socketlab.store import RunRecord, Store  # noqa: E402
from socketlab.topology.read import read_topology  # noqa: E402

STAGES = [("tiny", 100), ("gemma4-e2b-l0", 2048), ("tiny-full", 16384)]
#: kv-attn contexts of the 16K dump: adjacent pairs give the attention rate per KV tier
KV_CTX = (1024, 4096, 8192, 12288)
#: shapes run as slices only: more element-cost samples, none of them a predicted stage (tiny-full
#: at 32 positions: tiny's few hundred KiB of KV per step at B=16, where 512 positions stream
#: 8 MB, which evicts what the element work reads)
CALIB = [("gemma4-e2b-l4", 512), ("tiny-full", 512), ("tiny-full", 32)]
#: attention classes (head_dim, GQA group): one synthetic full-attention dump each (hidden 256,
#: one KV head), run as kv-attn at CLASS_CTX: every shipped shape's (head_dim, group) is one of
#: them or tiny-full's (128, 2) (the 16K dump above); the stage's attention rate is its class's
#: at the context nearest its KV bytes per step (512: E2B L0 / E4B L0's window)
ATTN_CLASSES = ((64, 2), (256, 2), (256, 4), (256, 8), (512, 4), (512, 8))
CLASS_CTX = (64, 256, 512, 1024, 2048)
#: each class dump is also run cold: KV copies rotated over COLD_MIB (--kv-cold-mib), so every
#: step reads KV that other reads have evicted, as a stage whose weights stream past its KV
#: does (`stage.kv_evicted`; E2B L0 at one core: 73 MB of weights per step). 64 MiB: the
#: (256, 8) class at 8 MiB per step read 1.4 GB/s rotated over 64 MiB, as the E2B stage's
#: attention did (1.55), against 3.9 warm on the Granite Rapids guest
COLD_MIB = 64
#: every stage and slice run lasts about MIN_RUN_S or more (its bytes per step at EST_GBPS), at
#: most STEPS_CAP x --steps: 100 steps of the tiny layer last 3 ms, less than one neighbour's
#: timeslice (4 ms at HZ=250), and its repetitions spread 26-42 µs (kv-attn runs keep --steps)
MIN_RUN_S, EST_GBPS, STEPS_CAP = 0.25, 50.0, 20
CAMPAIGN = "planner-host"


def run_stored(
    store: Store, host: str, experiment: str, argv: list[str], params: dict, rep: int = 0
) -> dict:
    key = hashlib.sha256(json.dumps([host, argv, rep]).encode()).hexdigest()
    t0 = time.time()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    gate = "gate failed" in proc.stderr
    if proc.returncode != 0 and not (proc.returncode == 1 and gate):
        sys.exit(f"{' '.join(argv)}: exit {proc.returncode}: {proc.stderr.strip()[-500:]}")
    if gate:  # the numerics gate, not the timing: the steps ran; kept, and said so
        params = {**params, "gate": proc.stderr.strip().splitlines()[-1][:300]}
        print(f"  note: {' '.join(argv[-6:])}: {params['gate']}")
    metrics, _, _ = parse_jsonl(proc.stdout)
    store.add_run(
        RunRecord(
            run_key=key,
            campaign=CAMPAIGN,
            experiment=experiment,
            host=host,
            repetition=rep,
            params=params,
            status="ok",
            exit_code=0,
            started=t0,
            finished=time.time(),
            duration_s=time.time() - t0,
            argv=argv,
        ),
        [Metric(m["name"], m["value"], m["unit"], m["dims"], "jsonl/1") for m in metrics],
    )
    return {"key": key, "metrics": metrics, "rep": rep}


def m(recs: list[dict], name: str, **dims) -> float:
    return sum(
        r["value"]
        for r in recs
        if r["name"] == name and all(r["dims"].get(k) == v for k, v in dims.items())
    )


def steps_for(steps: int, nbytes: float) -> list[str]:
    """`--steps` for a run that moves `nbytes` per step (see MIN_RUN_S)."""
    want = math.ceil(MIN_RUN_S * EST_GBPS * 1e9 / max(nbytes, 1.0))
    return ["--steps", str(min(max(steps, want), steps * STEPS_CAP))]


@functools.cache
def host_l2() -> int:
    """This host's L2 per core (its topology facts), else the Budget default (Granite Rapids'
    2 MiB)."""
    l2 = next((c.size_bytes for c in read_topology().caches if c.name == "L2"), 0)
    return l2 or Budget().l2_bytes_per_core


def stage_bytes(shape: str, ctx: int, batch: int, workers: int) -> float:
    """One worker's weight and KV bytes per step of a stage (or its slice)."""
    bud = Budget(cores=workers, batch=batch, context=ctx)
    ld = layer_load(units(layer_model(shape)), 0, bud)
    return (ld.bytes + ld.kv_bytes) / workers


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def _avx512_bf16() -> bool:
    try:
        return "avx512_bf16" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def layer_dump(shape: str, ctx: int, out: Path) -> None:
    """`orchestrate layer-dump` (as a module) of a shape at B = 16, unless `out` holds one."""
    if (out / "manifest.txt").is_file():
        return
    argv = ["layer-dump", shape, "--context", str(ctx), "--batch", "16", "--seed", "1"]
    subprocess.run(
        [sys.executable, "-m", "socketlab.cli", *argv, "--out", str(out), "--quiet"],
        check=True,
        timeout=900,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--cpus", default="0,1")
    ap.add_argument("--host", default="localhost")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--results", default=str(REPO / "results"))
    ap.add_argument(
        "--gemv",
        default="avx512" if _avx512_bf16() else "avx2",
        help="the stage's kernel (default avx512 where the CPU has AVX512_BF16)",
    )
    ap.add_argument("--dumps", help="keep the dumps here (reused when present)")
    ap.add_argument(
        "--table-only",
        action="store_true",
        help="run nothing: the table from the runs already in the store",
    )
    ap.add_argument(
        "--one-kv-rate",
        action="store_true",
        help="the model before attention classes: every stage's attention at the "
        "16K dump's kv-attn rate (for a before / after on the same runs)",
    )
    ap.add_argument(
        "--warm-only",
        action="store_true",
        help="the model before the warm/cold key: the classes' warm points only",
    )
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
                    {
                        "key": r["key"],
                        "rep": r["repetition"],
                        "metrics": [{"name": n, "value": v, "dims": d} for n, v, d in r["metrics"]],
                    }
                )
        return table(a, results, workers, stage_runs)  # --cpus as in the run
    store = Store(results / CAMPAIGN / "store.sqlite")
    tmp = Path(a.dumps) if a.dumps else Path(tempfile.mkdtemp(prefix="stage-plan-host-"))
    print(f"{time.strftime('%H:%M:%S', time.gmtime())} UTC, load {load()}: dumps in {tmp}")
    dumps = {}
    for shape, ctx in STAGES + CALIB:
        d = tmp / f"{shape}.c{ctx}"
        layer_dump(shape, ctx, d)
        dumps[shape, ctx] = d
    classes = {}
    for hd, grp in ATTN_CLASSES:
        name = f"attn-h{hd}-g{grp}"
        shape_file = tmp / f"{name}.yaml"
        shape_file.write_text(
            f"version: 1\nmodel: {name}\nlayer: 0\nattention: full\nhidden: 256\n"
            f"heads: {grp}\nkv_heads: 1\nhead_dim: {hd}\ninter: 256\nple: 64\n"
            "rope_theta: 10000.0\nrope_type: default\neps: 1.0e-6\n"
        )
        d = tmp / f"{name}.c{CLASS_CTX[-1]}"
        layer_dump(str(shape_file), CLASS_CTX[-1], d)
        classes[hd, grp] = d
    layer = [str(build / "layer"), "--cpus", a.cpus, "--gemv", a.gemv]
    kv_steps = ["--steps", str(a.steps)]
    full = dumps["tiny-full", 16384]
    stage_runs: dict[tuple, list[dict]] = {}
    loads = []

    def kv_attn(dump: Path, b: int, n: int, params: dict, cold: bool = False) -> None:
        """One kv-attn run: the dump's attention over its last n positions at batch b (cold:
        KV copies rotated over COLD_MIB)."""
        extra = ["--kv-cold-mib", str(COLD_MIB)] if cold else []
        argv = [*layer, *kv_steps, "--dump", str(dump), "--slice", f"0/{workers}"]
        argv += ["--batch", str(b), "--ctx", str(n), *extra]
        params = {"context": n, "batch": b, **params}
        run_stored(
            store,
            a.host,
            "kv-attn",
            argv,
            params | ({"kv_cold_mib": COLD_MIB} if cold else {}),
            rep,
        )

    for rep in range(a.reps):
        loads.append(load())
        print(f"{time.strftime('%H:%M:%S', time.gmtime())} UTC, load {loads[-1]}: rep {rep}")
        for nbytes in (2560, 37376) if workers > 1 else ():
            run_stored(
                store,
                a.host,
                "exchange",
                [
                    str(build / "exchange"),
                    "--mode",
                    "diss",
                    "--cpus",
                    a.cpus,
                    "--bytes",
                    str(nbytes),
                    "--iters",
                    "5000",
                    "--warmup",
                    "500",
                ],
                {"bytes": nbytes},
                rep,
            )
        for b in (1, 16):
            for n in KV_CTX:
                kv_attn(full, b, n, {})
            for (hd, grp), d in classes.items():
                for n in CLASS_CTX:
                    kv_attn(d, b, n, {"head_dim": hd, "group": grp})
                    kv_attn(d, b, n, {"head_dim": hd, "group": grp}, cold=True)
        for (shape, ctx), d in dumps.items():
            for b in (1, 16):
                p = {"shape": shape, "context": ctx, "batch": b}
                steps = steps_for(a.steps, stage_bytes(shape, ctx, b, workers))
                run_stored(
                    store,
                    a.host,
                    "gemv-slice",
                    [*layer, *steps, "--dump", str(d), "--slice", f"0/{workers}"]
                    + ["--batch", str(b)],
                    p,
                    rep,
                )
                if (shape, ctx) in CALIB:
                    continue
                stage_runs.setdefault((shape, ctx, b), []).append(
                    run_stored(
                        store,
                        a.host,
                        "layer",
                        [*layer, *steps, "--dump", str(d), "--batch", str(b), "--xchg", "direct"],
                        p,
                        rep,
                    )
                )
    store.close()
    print(f"load average (1 min) at each rep: {', '.join(loads)}; after: {load()}")
    table(a, results, workers, stage_runs)


def predict_rep(
    a: argparse.Namespace,
    results: Path,
    workers: int,
    shape: str,
    ctx: int,
    b: int,
    rep: int | None,
) -> tuple[Prediction, dict]:
    """One stage's prediction from the constants of repetition `rep` (the runs next to it)."""
    us = units(layer_model(shape))
    nbytes = sum(x.bytes for x in us if x.kind != "head") // workers
    # the stage's KV bytes and elements per row (unit rates) pick the runs of the nearest tier
    # and shape; every constant comes from runs other than the stage's, the element costs from
    # other shapes
    bud = Budget(cores=workers, batch=b, context=ctx, l2_bytes_per_core=host_l2())
    stage = layer_load(us, 0, bud)  # what `layer_stage` times
    probe = predict(
        stage,
        bud,
        Constants(gemv_gbps_per_core=1, exchange_us=0, kv_gbps=1, act_gbps=1, elem_ns=1, gelu_ns=1),
    )[1]
    att = next(x for x in us if x.kind == "attn")
    group = att.heads // max(att.kv_heads, 1)
    kw = {
        "kernel": a.gemv,
        "bytes_per_core": nbytes,
        "batch": b,
        "exclude_shape": shape,
        "elems": probe.elem_us * 1e3 / b,
        "kv_bytes": probe.kv_us * 1e3,
        "head_dim": att.head_dim,
        "group": group,
    }
    if a.one_kv_rate:
        del kw["head_dim"], kw["group"]
    # GEMV and KV rates (DRAM / L3 bandwidth, which drifts with the neighbours' load) from the
    # runs next to the stage; the element costs (CPU-bound, noisy per run) over all repetitions
    g = measured_constants(a.host, results=results, repetition=rep, **kw)
    g.update(
        {
            k: v
            for k, v in measured_constants(a.host, results=results, **kw).items()
            if k in ("elem_ns", "gelu_ns")
        }
    )
    # the attention rate per class (head_dim, group, batch, KV bytes) of the same repetition:
    # the stage's attention takes its own class's (Constants.kv_rate)
    classes, detail = measured_kv_classes(a.host, results=results, kernel=a.gemv, repetition=rep)
    if a.one_kv_rate:
        classes = ()
    if a.warm_only:
        classes = tuple(k for k in classes if not k.cold)
    cc = Constants(
        gemv_gbps_per_core=g["gemv_gbps_per_core"].value,
        exchange_us=0.0,
        kv_gbps=g["kv_gbps"].value,
        act_gbps=float("inf"),
        elem_ns=g["elem_ns"].value if "elem_ns" in g else 0.0,
        gelu_ns=g["gelu_ns"].value if "gelu_ns" in g else 0.0,
        kv_classes=classes,
    )
    cold = kv_evicted(stage, bud)
    rate, cls = cc.kv_rate(att.head_dim, group, b, probe.kv_us * 1e3, cold)
    if cls is not None:
        tier = f"cold: {cls.footprint:,.0f} B rotated" if cls.footprint else "warm"
        g["kv_class_gbps"] = Measured(
            rate,
            (),
            f"class (head_dim {cls.head_dim}, group "
            f"{cls.group}) at B={cls.batch}, {cls.kv_bytes:,.0f} B per step, {tier}"
            f" (stage: head_dim {att.head_dim}, group {group}, B={b}, "
            f"{'weights overflow the L2: cold' if cold else 'warm'}); {detail[:60]}...",
        )
    if workers > 1:  # one worker has no peer to wait for or gather from
        cc = cc.replace(exchange_us=g["exchange_us"].value, act_gbps=g["act_gbps"].value)
    return predict(stage, bud, cc)[1], {k: g[k] for k in g}


def table(
    a: argparse.Namespace, results: Path, workers: int, stage_runs: dict[tuple, list[dict]]
) -> None:
    """Per repetition, the stage's prediction from that repetition's constants next to its
    measured step p50; the table: medians over repetitions, and each repetition's error."""
    if workers == 1:
        print("one worker: sync and all-gather terms are 0 (no peer)")
    rows = []
    for (shape, ctx, b), runs in stage_runs.items():
        preds, meas, errs = [], [], []
        for r in sorted(runs, key=lambda r: r["rep"]):
            pred, g = predict_rep(a, results, workers, shape, ctx, b, r["rep"])
            step = m(r["metrics"], "step_p50")
            preds.append(pred)
            meas.append(step)
            errs.append(pred.total_us / step - 1)
            # the step's time beyond its phases' GEMV p50s and elements: a neighbour's
            # timeslice (4 ms at HZ=250) when it is most steps' lot
            gap = step - m(r["metrics"], "phase_gemv_p50") - pred.elem_us
            print(
                f"  {shape} {ctx} B={b} rep {r['rep']}: predicted {pred.total_us:.1f}, "
                f"measured {step:.1f} ({errs[-1]:+.1%}), unexplained {gap:.0f}; "
                + "; ".join(f"{k} {v.value:.4g}" for k, v in g.items())
            )
        last = g
        med = statistics.median(meas)
        rec = min(runs, key=lambda r: abs(m(r["metrics"], "step_p50") - med))["metrics"]
        weight_p50 = sum(
            r["value"]
            for r in rec
            if r["name"] == "phase_gemv_p50"
            and r["dims"].get("phase") not in ("attention", "combine")
        )
        att = m(rec, "phase_gemv_p50", phase="attention")
        # outside the kernels: the phase means' or the step p50 less the phases' GEMV p50s,
        # the smaller (preemption adds to both; the binary gives no per-phase compute p50)
        elem = min(m(rec, "phase_compute") - m(rec, "phase_gemv"), med - m(rec, "phase_gemv_p50"))
        terms = {t: statistics.median(getattr(p, t) for p in preds) for t in TERMS}
        total = statistics.median(p.total_us for p in preds)
        row = {
            "stage": f"{shape} {ctx // 1024 or ctx}{'K' if ctx >= 1024 else ''}",
            "batch": b,
            "predicted_us": total,
            "measured_us": med,
            "measured_reps_us": [round(x, 1) for x in meas],
            "predicted_reps_us": [round(p.total_us, 1) for p in preds],
            "error": total / med - 1,
            "rep_errors": [round(e, 3) for e in errs],
            "median_rep_error": statistics.median(errs),
            "error_without_elem": (total - terms["elem_us"]) / med - 1,
            "runs": [r["key"][:12] for r in runs],
            "constants_last_rep": {k: [round(v.value, 4), v.detail] for k, v in last.items()},
            "pred": {k: round(v, 1) for k, v in terms.items()},
            # measured terms of the median run
            "meas": {
                "gemv_us": round(weight_p50, 1),
                "attention_us": round(att, 1),
                "elem_us": round(elem, 1),
                "rest_us": round(med - weight_p50 - att - elem, 1),
            },
        }
        rows.append(row)
        print(json.dumps(row))
    # "paired": the median of the repetitions' errors, each prediction from the constants
    # measured next to its stage run (a neighbour's load hits both): the ratio of one run
    print(
        "\n| stage | B | predicted µs | measured p50 µs (range) | error | paired error | "
        "per-rep errors | without elem | predicted gemv / kv / elem / sync / act | measured "
        "gemv / attention / elem / rest |"
    )
    print("|---|---:|---:|---:|---:|---:|---|---:|---|---|")
    for r in rows:
        p, q = r["pred"], r["meas"]
        lo, hi = min(r["measured_reps_us"]), max(r["measured_reps_us"])
        print(
            f"| {r['stage']} | {r['batch']} | {r['predicted_us']:.1f} | {r['measured_us']:.1f}"
            f" ({lo:.0f}-{hi:.0f}) | {r['error']:+.1%} | {r['median_rep_error']:+.1%} | "
            f"{' '.join(f'{e:+.0%}' for e in r['rep_errors'])} | "
            f"{r['error_without_elem']:+.1%} | {p['gemv_us']} / {p['kv_us']} / {p['elem_us']}"
            f" / {p['sync_us']} / {p['act_us']} | {q['gemv_us']} / {q['attention_us']} / "
            f"{q['elem_us']} / {q['rest_us']} |"
        )


if __name__ == "__main__":
    main()
