"""The P6 cluster cells (experiments/published/plan-oct-2026.yaml, table plan-cluster) with hop
and all-reduce as fixed microseconds (the seed's 5 / 10 µs) and as bytes over a link
(docs/planner.md): the seed-equivalent link (`SEED_LINK`: the 5 / 10 µs at the seed's 21 KiB
hop and 588 KiB TP8 all-reduce) and any `--link LAT_US:GBPS`. Pure arithmetic on the seed's
constants; prints one markdown table, ours / published per cell.

usage: stage_plan_cluster.py [--link 2:50] [--calibration 1.0]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from socketlab.plan.stage import Budget, Link, plan  # noqa: E402
from socketlab.plan.stage_cluster import SEED_LINK, project  # noqa: E402
from socketlab.plan.stage_constants import SEED, load_constants  # noqa: E402
from socketlab.plan.stage_model import load_model, units  # noqa: E402

PUBLISHED = REPO / "experiments" / "published" / "plan-oct-2026.yaml"
TOL = 0.05
L3_KIB = 480 * 1024 // 90  #: `stage-plan --l3-kib`'s default, as the points file plans


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--link", action="append", default=[], help="LAT_US:GBPS (repeatable)")
    ap.add_argument("--calibration", type=float, default=1.0)
    a = ap.parse_args()
    links = [("seed-equivalent", SEED_LINK)] + [
        (x, Link(float(x.split(":")[0]), float(x.split(":")[1]))) for x in a.link
    ]
    doc = yaml.safe_load(PUBLISHED.read_text())
    table = next(t for t in doc["tables"] if t["id"] == "plan-cluster")
    c = load_constants(SEED)
    print(
        "links: fixed hop 5 / all-reduce 10 µs; "
        + "; ".join(f"{n}: {lk.latency_us:.2f} µs + bytes / {lk.gbps:.1f} GB/s" for n, lk in links)
    )
    head = " | ".join(f"{n} (hop B / all-reduce B)" for n, _ in links)
    print(f"\n| cell | metric | published | fixed 5/10 | {head} |")
    print("|---|---|---:|---:|" + "---:|" * len(links))
    n_dev = {"fixed": 0, **{n: 0 for n, _ in links}}
    n_cells = 0
    for row in table["rows"]:
        if row.get("unmeasured"):
            continue
        cond = {**table["conditions"], **row["conditions"]}
        bud = Budget(
            bytes_per_core=cond["budget_kib"] * 1024,
            batch=cond["batch"],
            context=cond["context"],
            split="tp",
            expert_tier=cond["experts"],
            l3_bytes_per_core=L3_KIB * 1024,
        )
        pl = plan(units(load_model(cond["model"])), bud, c)
        fixed = project(pl, 5.0, 10.0, a.calibration)
        linked = [project(pl, 5.0, 10.0, a.calibration, link=lk) for _, lk in links]
        for col, attr, scale in (
            ("tpot_ms", "tpot_saturated_us", 1e-3),
            ("tok_s_per_socket", "tokens_per_s_per_socket", 1.0),
            ("tok_s", "tokens_per_s", 1.0),
        ):
            pub = row["values"].get(col)
            if pub is None:
                continue
            n_cells += 1
            cells = []
            for name, p in (("fixed", fixed), *zip([n for n, _ in links], linked, strict=True)):
                r = getattr(p, attr) * scale / pub
                n_dev[name] += abs(r - 1) > TOL
                extra = (
                    f" ({p.hop_bytes / 1024:.0f} / {p.allreduce_bytes / 1024:.0f} KiB)"
                    if name != "fixed"
                    else ""
                )
                cells.append(f"{getattr(p, attr) * scale:,.4g} ({r:.2f}x){extra}")
            print(f"| {row['id']} | {col} | {pub:,} | " + " | ".join(cells) + " |")
    print(
        f"\ncells outside {TOL:.0%} of {n_cells}: "
        + ", ".join(f"{k} {v}" for k, v in n_dev.items())
    )


if __name__ == "__main__":
    main()
