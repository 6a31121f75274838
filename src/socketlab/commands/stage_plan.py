"""`orchestrate stage-plan MODEL`: how many sockets, which partition, what time per token, from
measured constants (docs/planner.md).

MODEL is a shipped model (gemma4-e2b, gemma4-e4b, gemma4-12b, gemma4-26b-a4b, gemma4-31b), a
model file, a Hugging Face config.json or a checkpoint directory. Constants come from the
host's measured runs in the store (--host, with the run keys printed) or a constants file
(--constants; default: the seed's published constants).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from socketlab.commands._options import add_results_argument
from socketlab.errors import PlanError


def _positive(kind):
    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
        if v <= 0:
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
        return v

    return parse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "stage-plan",
        help="plan a model onto sockets from measured constants",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", metavar="MODEL", nargs="?")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--host", metavar="H", help="constants from H's measured runs in the store")
    src.add_argument(
        "--constants",
        metavar="FILE",
        help="constants file (default: experiments/models/constants/seed-oct-2026.yaml)",
    )
    p.add_argument(
        "--budget-kib",
        type=_positive(int),
        default=1344,
        metavar="K",
        help="L2 weight KiB per core (1344 = 12 lock ways, 1568 = 14; default 1344)",
    )
    p.add_argument(
        "--l2-kib",
        type=_positive(int),
        default=2048,
        metavar="K",
        help="the whole L2 KiB per core (2048); a stage whose weights per core pass it streams "
        "them past its KV, which is then read at the class's cold rate",
    )
    p.add_argument("--cores", type=_positive(int), default=90, help="cores per socket (90)")
    p.add_argument("--batch", type=_positive(int), default=1, metavar="B")
    p.add_argument("--context", type=_positive(int), default=2048, metavar="C")
    p.add_argument("--split", choices=("tp", "pipe"), default="tp")
    p.add_argument(
        "--experts",
        choices=("l2", "l3"),
        default="l2",
        help="MoE experts in L2 only, or L2 + L3 (--l3-kib per core)",
    )
    p.add_argument(
        "--l3-kib",
        type=_positive(int),
        default=480 * 1024 // 90,
        metavar="K",
        help="L3 KiB per core experts may use with --experts l3 (default 480 MiB / 90)",
    )
    p.add_argument(
        "--min-rows",
        type=_positive(int),
        default=16,
        help="smallest row piece per core (16 = an AMX tile; 4 for AVX-512)",
    )
    p.add_argument("--kernel", default="avx2", help="GEMV kernel of the measured runs (--host)")
    p.add_argument(
        "--project",
        action="store_true",
        help="the cluster projection: hop / all-reduce sensitivity, TPOT, tok/s/socket",
    )
    p.add_argument("--hop-us", type=_positive(float), help="pipeline hop µs (default: constants)")
    p.add_argument(
        "--allreduce-us",
        type=_positive(float),
        help="cross-socket all-reduce µs (default: constants)",
    )
    p.add_argument(
        "--calibration",
        type=_positive(float),
        default=1.0,
        help="--project: measured / predicted on-socket ratio (default 1)",
    )
    p.add_argument("--stages", action="store_true", help="list every stage with its terms")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.add_argument(
        "--jsonl",
        action="store_true",
        help="JSON-lines metric records (the runner's jsonl parser: a campaign "
        "experiment stores the plan like any run)",
    )
    p.add_argument(
        "--layer",
        type=int,
        metavar="N",
        help="predict layer N alone on one socket (the real-layer stage) instead of a plan",
    )
    p.add_argument(
        "--gather-output",
        choices=("yes", "no"),
        default="no",
        help="--layer: the stage also gathers the layer's output, as a pipeline "
        "stage does (default no: the real-layer stage does not)",
    )
    p.add_argument(
        "--points",
        metavar="NAME|FILE",
        help="plan every point of a points file (experiments/models/points/NAME.yaml "
        "or a path) in one run, with --jsonl: each record carries its point's "
        "keys as dimensions",
    )
    add_results_argument(p)
    p.set_defaults(func=run)


def _points(args: argparse.Namespace) -> int:
    """Every point of the points file planned as if its keys were given as flags, each as
    JSON-lines records carrying the point's keys as dimensions."""
    from socketlab.spec.plan_points import load_points

    for point in load_points(args.points):
        one = argparse.Namespace(**{**vars(args), "points": None, "jsonl": True, "json": False})
        for k, v in point.items():
            setattr(one, k, ("yes" if v else "no") if k == "gather_output" else v)
        _plan(one, point)
    return 0


def run(args: argparse.Namespace) -> int:
    if args.points:
        return _points(args)
    if not args.model:
        from socketlab.errors import SpecError

        raise SpecError("stage-plan: MODEL is required (or --points FILE)")
    return _plan(args, {})


def _plan(args: argparse.Namespace, dims: dict) -> int:
    """One plan (or one layer's prediction); ``dims`` go on every metric record."""
    from socketlab.plan.plan_run import plan_constants, plan_projection
    from socketlab.plan.stage import Budget, plan
    from socketlab.plan.stage_model import load_model, units

    model = load_model(args.model)
    c = plan_constants(
        host=args.host,
        kernel=args.kernel,
        batch=args.batch,
        results=args.results,
        constants=args.constants,
        hop_us=args.hop_us,
        allreduce_us=args.allreduce_us,
    )
    budget = Budget(
        cores=args.cores,
        bytes_per_core=args.budget_kib * 1024,
        l2_bytes_per_core=args.l2_kib * 1024,
        batch=args.batch,
        context=args.context,
        min_rows_per_core=args.min_rows,
        split=args.split,
        expert_tier=args.experts,
        l3_bytes_per_core=args.l3_kib * 1024,
    )
    us = units(model)
    if args.layer is not None:
        return _layer(args, model, us, budget, c, dims)
    pl = plan(us, budget, c)
    proj = []
    if args.project:
        proj = plan_projection(
            pl,
            us,
            budget,
            c,
            calibration=args.calibration,
            links_given=bool(args.hop_us or args.allreduce_us),
        )
    if args.jsonl:
        _emit_plan(args, model, budget, c, pl, proj, dims)
    elif args.json:
        _print_plan_json(model, budget, c, pl, proj)
    else:
        _print_plan_text(args, model, budget, c, pl, proj)
    return 0


def _print_plan_json(model, budget, c, pl, proj: list[dict]) -> None:
    """The plan as one JSON document: inputs, summary, every stage's terms, the projection."""
    doc = {
        "model": model.name,
        "model_file": model.where,
        "budget": dataclasses.asdict(budget),
        "constants": dataclasses.asdict(c),
        "summary": dataclasses.asdict(pl.summary),
        "stages": [
            {
                "index": st.index,
                "label": st.label,
                "sockets": st.sockets,
                "bytes_per_core": st.bytes_per_core,
                "fill": st.fill,
                "exchanges": st.load.exchanges,
                "allreduces": st.load.allreduces,
                "kv_bytes": st.load.kv_bytes,
                "act_bytes": st.load.act_bytes,
                "kv_replicas_of": list(st.kv_replicas_of),
                **st.pred.terms(),
            }
            for st in pl.stages
        ],
        "projection": proj,
    }
    json.dump(doc, sys.stdout, indent=1)
    sys.stdout.write("\n")


def _print_plan_text(args: argparse.Namespace, model, budget, c, pl, proj: list[dict]) -> None:
    """The plan for a person: inputs, constants with provenance, tables."""
    s = pl.summary
    print(
        f"{model.name} ({model.where}): {s.layers} layers, {s.weight_bytes / 2**30:.2f} GiB "
        f"BF16; {budget.cores} cores x {args.budget_kib:,} KiB, B={budget.batch}, "
        f"ctx {budget.context}, split {budget.split}, experts {budget.expert_tier}"
    )
    print(
        f"constants ({c.host or 'file'}; kernel {c.kernel or '-'}): GEMV "
        f"{c.gemv_gbps_per_core:.4g} GB/s/core, exchange {c.exchange_us:.4g} µs, KV "
        f"{c.kv_gbps:.4g} GB/s, all-gather {c.act_gbps:.4g} GB/s/core, hop {c.hop_us:g} µs, "
        f"all-reduce {c.allreduce_us:g} µs"
        + (
            f", elements {c.elem_ns:.3g} ns, gelu {c.gelu_ns:.3g} ns"
            if c.elem_ns or c.gelu_ns
            else ""
        )
    )
    for k, v in c.provenance.items():
        print(f"  {k}: {v}")
    if args.stages:
        _print_stages_table(pl)
    print(
        "| model | B | ctx | stages | sockets | layers/stage | bottleneck µs | token latency ms "
        "| tok/s (seqs in flight) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    print(
        f"| {model.name} | {budget.batch} | {budget.context // 1024}K | {s.stages} | "
        f"{s.sockets} | {s.layers_per_stage:.2f} | {s.bottleneck_us:.1f} | "
        f"{s.token_latency_us / 1e3:.1f} | {s.tokens_per_s:,.0f} ({s.sequences_in_flight}) |"
    )
    print(f"bottleneck stage: {s.bottleneck_stage}")
    if proj:
        _print_projection_table(args.calibration, proj)


def _print_stages_table(pl) -> None:
    """Every stage with its terms (--stages)."""
    print(
        "| stage | sockets | KiB/core | fill | gemv | sync | kv | act | allreduce | elem | "
        "total µs |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for st in pl.stages:
        t = st.pred
        print(
            f"| {st.label} | {st.sockets} | {st.bytes_per_core / 1024:,.0f} | "
            f"{st.fill:.2f} | {t.gemv_us:.1f} | {t.sync_us:.1f} | {t.kv_us:.1f} | "
            f"{t.act_us:.1f} | {t.allreduce_us:.1f} | {t.elem_us:.1f} | "
            f"{t.total_us:.1f} |"
        )


def _print_projection_table(calibration: float, proj: list[dict]) -> None:
    """The cluster projection (--project), by batch, hop and all-reduce."""
    print(f"projection (calibration {calibration:g}; hop and all-reduce assumed, not measured):")
    print(
        "| B | hop µs | all-reduce µs | sockets | TPOT B=1 ms | TPOT at saturation ms | "
        "tok/s | tok/s per socket |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for x in sorted(proj, key=lambda x: (x["batch"], x["hop_us"], x["allreduce_us"])):
        print(
            f"| {x['batch']} | {x['hop_us']:g} | {x['allreduce_us']:g} | {x['sockets']} | "
            f"{x['token_latency_us'] / 1e3:.2f} | {x['tpot_saturated_us'] / 1e3:.1f} | "
            f"{x['tokens_per_s']:,.0f} | {x['tokens_per_s_per_socket']:.1f} |"
        )


def _metric(name: str, value: float, unit: str, dims: dict, **more) -> None:
    print(
        json.dumps({"type": "metric", "name": name, "value": value, "unit": unit, **dims, **more})
    )


def _meta(args, model, budget, c) -> None:
    print(
        json.dumps(
            {
                "type": "meta",
                "tool": "stage-plan",
                "model": model.name,
                "model_file": str(model.where),
                "budget_kib": args.budget_kib,
                "batch": budget.batch,
                "context": budget.context,
                "split": budget.split,
                "experts": budget.expert_tier,
                "constants_host": c.host or "file",
                "constants": {
                    k: getattr(c, k)
                    for k in (
                        "gemv_gbps_per_core",
                        "exchange_us",
                        "kv_gbps",
                        "act_gbps",
                        "hop_us",
                        "allreduce_us",
                    )
                },
                "provenance": c.provenance,
            }
        )
    )


def _emit_plan(args, model, budget, c, pl, proj, dims: dict) -> None:
    """The plan as metric records: the §5.10 plan-table columns, and with --project one record
    per (batch, hop, all-reduce) row (dims say which)."""
    s = pl.summary
    _meta(args, model, budget, c)
    _metric("stages", s.stages, "count", dims)
    _metric("sockets", s.sockets, "count", dims)
    _metric("layers_per_stage", s.layers_per_stage, "ratio", dims)
    _metric("bottleneck_us", s.bottleneck_us, "us", dims)
    _metric("token_latency_ms", s.token_latency_us / 1e3, "ms", dims)
    _metric("tokens_per_s", s.tokens_per_s, "tok/s", dims)
    _metric("sequences_in_flight", s.sequences_in_flight, "count", dims)
    _metric(
        "expert_sockets",
        sum(st.sockets for st in pl.stages if ".experts" in st.label),
        "count",
        dims,
    )
    for x in proj:
        if x["batch"] != budget.batch:  # one batch per record set: a run is one point
            continue
        d = {"hop_us": x["hop_us"], "allreduce_us": x["allreduce_us"]}
        _metric("tpot_b1_ms", x["token_latency_us"] / 1e3, "ms", dims, **d)
        _metric("tpot_saturated_ms", x["tpot_saturated_us"] / 1e3, "ms", dims, **d)
        _metric("cluster_tokens_per_s", x["tokens_per_s"], "tok/s", dims, **d)
        _metric("tokens_per_s_per_socket", x["tokens_per_s_per_socket"], "tok/s", dims, **d)
    if proj:
        # against the published base links (hop 5 µs, all-reduce 10 µs): the §5.10 sensitivity
        # ("B=1 TPOT +4-41%, B=16 throughput -3-7%" with hop 10 / all-reduce 25)
        from socketlab.plan.stage_cluster import SENSITIVITY, project

        base = project(pl, *SENSITIVITY[0], args.calibration)
        here = project(pl, c.hop_us, c.allreduce_us, args.calibration)
        _metric("tpot_rise", here.tpot_saturated_us / base.tpot_saturated_us - 1, "fraction", dims)
        _metric("throughput_drop", 1 - here.tokens_per_s / base.tokens_per_s, "fraction", dims)


def _layer(args, model, us, budget, c, dims: dict) -> int:
    """One layer alone on one socket (`layer_stage`): the prediction by term, and the published
    check's form (§5.10: the B=1 prediction + (B - 1) x gathered bytes / all-gather rate, which
    leaves out the extra rows' KV)."""
    from socketlab.plan.stage import layer_stage

    pred = layer_stage(us, args.layer, budget, c, gather_output=args.gather_output == "yes")
    one = layer_stage(
        us,
        args.layer,
        dataclasses.replace(budget, batch=1),
        c,
        gather_output=args.gather_output == "yes",
    )
    check = pred.total_us - (pred.kv_us - one.kv_us)
    if args.jsonl or args.json:
        if args.json:
            json.dump(
                {
                    "model": model.name,
                    "layer": args.layer,
                    "budget": dataclasses.asdict(budget),
                    "constants": dataclasses.asdict(c),
                    "prediction": pred.terms(),
                    "check_us": check,
                },
                sys.stdout,
                indent=1,
            )
            sys.stdout.write("\n")
            return 0
        _meta(args, model, budget, c)
        for k, v in pred.terms().items():
            _metric("layer_us" if k == "total_us" else f"layer_{k}", v, "us", dims)
        _metric("layer_check_us", check, "us", dims)
        return 0
    print(
        f"{model.name} layer {args.layer} alone on {budget.cores} cores, B={budget.batch}, "
        f"ctx {budget.context}: {pred.total_us:.1f} µs (gemv {pred.gemv_us:.1f}, sync "
        f"{pred.sync_us:.1f}, kv {pred.kv_us:.1f}, act {pred.act_us:.1f}, elem "
        f"{pred.elem_us:.1f}); the published "
        f"check's form (B=1 KV): {check:.1f} µs"
    )
    return 0


__all__ = ["register", "run", "PlanError"]
