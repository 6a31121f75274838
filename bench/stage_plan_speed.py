"""How fast the stage planner is: the 31B model (and the others) at every budget and batch.

Plans gemma4-31b (tp split) at budgets 1,024..4,096 KiB per core in 32 KiB steps (including the
1,344 / 1,568 KiB lock-way budgets) x batch 1, 4, 8, 16 x context 2K / 16K, with the seed's
constants, and prints the wall time of the whole sweep and per plan (docs/performance.md).

usage: stage_plan_speed.py [--model NAME] [--reps N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from socketlab.errors import PlanError  # noqa: E402
from socketlab.plan.stage import Budget, plan  # noqa: E402
from socketlab.plan.stage_constants import SEED, load_constants  # noqa: E402
from socketlab.plan.stage_model import load_model, units  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gemma4-31b")
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    t0 = time.perf_counter()
    us = units(load_model(a.model))
    c = load_constants(SEED)
    t_load = time.perf_counter() - t0
    sweeps = {
        # the campaign's plans (plan/all.sh, pipe.sh): 12 / 14 lock ways x B 1/4/8/16, tp and
        # pipe, 2K and 16K
        "lock-way budgets": [
            (k, b, ctx, split)
            for k in (1344, 1568)
            for b in (1, 4, 8, 16)
            for ctx in (2048, 16384)
            for split in ("tp", "pipe")
        ],
        # any budget: 1,024..4,096 KiB in 32 KiB steps, tp
        "1,024-4,096 KiB every 32": [
            (k, b, ctx, "tp")
            for k in range(1024, 4097, 32)
            for b in (1, 4, 8, 16)
            for ctx in (2048, 16384)
        ],
    }
    print(f"{a.model}: {len(us)} units; model + constants load {t_load * 1e3:.1f} ms")
    for name, grid in sweeps.items():
        walls = []
        for _ in range(a.reps):
            t = time.perf_counter()
            failed = 0
            for k, b, ctx, split in grid:
                try:
                    plan(us, Budget(bytes_per_core=k * 1024, batch=b, context=ctx, split=split), c)
                except PlanError:
                    failed += 1
            walls.append(time.perf_counter() - t)
        med = statistics.median(walls)
        print(
            f"  {name}: {len(grid)} plans ({failed} infeasible: PlanError) in {med:.3f} s "
            f"median of {a.reps} (min {min(walls):.3f}, max {max(walls):.3f}); "
            f"{med / len(grid) * 1e3:.2f} ms per plan"
        )


if __name__ == "__main__":
    main()
