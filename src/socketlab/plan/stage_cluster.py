"""The multi-socket projection from a stage plan (pure; docs/planner.md): hop and all-reduce
costs are flags (nothing multi-socket is measured), stage times are the planner's on-socket
predictions times an optional measured/predicted calibration ratio.

TPOT at B = 1 is the token latency (every stage in turn, a hop between each); at saturation
every stage holds one microbatch, so a sequence's TPOT is stages x (bottleneck + hop) and the
pipeline makes B tokens per (bottleneck + hop).
"""

from __future__ import annotations

from dataclasses import dataclass

from socketlab.plan.stage import Plan

SENSITIVITY = ((5.0, 10.0), (10.0, 10.0), (5.0, 25.0), (10.0, 25.0))


@dataclass(frozen=True)
class Projection:
    hop_us: float
    allreduce_us: float
    stages: int
    sockets: int
    bottleneck_us: float
    token_latency_us: float  #: TPOT of one sequence alone in the pipeline
    tpot_saturated_us: float
    tokens_per_s: float
    tokens_per_s_per_socket: float


def project(p: Plan, hop_us: float, allreduce_us: float, calibration: float = 1.0) -> Projection:
    times = [s.pred.onsocket_us * calibration + s.load.allreduces * allreduce_us
             for s in p.stages]
    n = len(times)
    bn = max(times, default=0.0)
    tps = p.budget.batch * 1e6 / (bn + hop_us) if bn > 0 else 0.0
    return Projection(
        hop_us=hop_us, allreduce_us=allreduce_us, stages=n, sockets=p.summary.sockets,
        bottleneck_us=bn, token_latency_us=sum(times) + hop_us * max(n - 1, 0),
        tpot_saturated_us=n * (bn + hop_us), tokens_per_s=tps,
        tokens_per_s_per_socket=tps / max(p.summary.sockets, 1))


def sensitivity(p: Plan, calibration: float = 1.0,
                rows: tuple[tuple[float, float], ...] = SENSITIVITY) -> list[Projection]:
    return [project(p, h, a, calibration) for h, a in rows]
