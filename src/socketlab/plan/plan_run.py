"""The library side of `orchestrate stage-plan`: where the constants come from and the cluster
projection over batches (the command parses its options and prints)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from socketlab.plan.stage import Budget, Constants, Plan, Unit, plan
from socketlab.plan.stage_cluster import SENSITIVITY, project, sensitivity
from socketlab.plan.stage_constants import SEED, constants_from_store, load_constants


def plan_constants(
    *,
    host: str | None,
    kernel: str,
    batch: int,
    results: str | None,
    constants: str | None,
    hop_us: float | None,
    allreduce_us: float | None,
) -> Constants:
    """``host``'s measured runs in the store, else a constants file (default: the seed's), with
    the hop and all-reduce given in place of the constants' own."""
    if host:
        c = constants_from_store(
            host, kernel=kernel, batch=batch, results=Path(results) if results else None
        )
    else:
        c = load_constants(constants or SEED)
    if hop_us:
        c = c.replace(hop_us=hop_us)
    if allreduce_us:
        c = c.replace(allreduce_us=allreduce_us)
    return c


def plan_projection(
    pl: Plan,
    us: list[Unit],
    budget: Budget,
    c: Constants,
    *,
    calibration: float,
    links_given: bool,
) -> list[dict[str, Any]]:
    """The cluster projection, one dict per (batch, hop, all-reduce): the plan's own batch and
    B=1 and B=16; at the constants' links when ``links_given``, else the sensitivity rows."""
    rows = SENSITIVITY if not links_given else ((c.hop_us, c.allreduce_us),)
    proj = [dataclasses.asdict(x) for x in sensitivity(pl, calibration, rows)]
    for b in (1, 16):
        if b != budget.batch:
            other = plan(us, dataclasses.replace(budget, batch=b), c)
            proj += [
                dict(dataclasses.asdict(project(other, h, a, calibration)), batch=b)
                for h, a in rows
            ]
    for x in proj:
        x.setdefault("batch", budget.batch)
    return proj
