"""The multi-socket projection from a stage plan (pure; docs/planner.md): hop and all-reduce
costs either fixed microseconds (the seed's assumptions, flags) or bytes over a link
(`socketlab.plan.stage.Link`: latency + bytes / GB/s); stage times are the planner's on-socket
predictions times an optional measured/predicted calibration ratio.

With a link, a hop carries the stage's output vectors (B x hidden x 4 B: 6 KiB for E2B, 21 KiB
for 31B at B=1, as the seed quotes) and a tensor-parallel all-reduce moves 2 (S - 1) / S of
B x hidden x 4 B per socket (a ring: 588 KiB for 31B TP8 at B=16), with one latency.

TPOT at B = 1 is the token latency (every stage in turn, a hop between each); at saturation
every stage holds one microbatch, so a sequence's TPOT is stages x (bottleneck + hop) and the
pipeline makes B tokens per (bottleneck + hop).
"""

from __future__ import annotations

from dataclasses import dataclass

from socketlab.plan.stage import Link, Plan

SENSITIVITY = ((5.0, 10.0), (10.0, 10.0), (5.0, 25.0), (10.0, 25.0))
#: the link under which the seed's fixed costs are its quoted bytes exactly: a 21 KiB hop (31B,
#: B=1) in 5 µs and a 588 KiB all-reduce (31B TP8, B=16) in 10 µs: latency + bytes / rate
SEED_HOP = (21_504, 5.0)
SEED_ALLREDUCE = (602_112, 10.0)


def link_through(a: tuple[int, float], b: tuple[int, float]) -> Link:
    """The link (latency, GB/s) whose cost is a[1] µs at a[0] bytes and b[1] µs at b[0]."""
    (n0, t0), (n1, t1) = sorted((a, b))
    if n1 == n0 or t1 <= t0:
        raise ValueError("link_through: expected a larger message to cost more")
    per_byte = (t1 - t0) / (n1 - n0)  # µs per byte
    latency = t0 - n0 * per_byte
    if latency < 0:
        raise ValueError("link_through: the two costs give a negative latency")
    return Link(latency_us=latency, gbps=1e-3 / per_byte)


SEED_LINK = link_through(SEED_HOP, SEED_ALLREDUCE)  # 4.81 µs, 116 GB/s


@dataclass(frozen=True)
class Projection:
    hop_us: float  #: the largest hop of the pipeline
    allreduce_us: float  #: the largest single all-reduce
    stages: int
    sockets: int
    bottleneck_us: float
    token_latency_us: float  #: TPOT of one sequence alone in the pipeline
    tpot_saturated_us: float
    tokens_per_s: float
    tokens_per_s_per_socket: float
    link_latency_us: float | None = None  #: with a link: its latency and rate
    link_gbps: float | None = None
    hop_bytes: int = 0  #: with a link: the largest hop's bytes
    allreduce_bytes: int = 0  #: with a link: the largest all-reduce's bytes per socket


def project(
    p: Plan, hop_us: float, allreduce_us: float, calibration: float = 1.0, link: Link | None = None
) -> Projection:
    """With `link`, hop and all-reduce costs are bytes over it (hop_us / allreduce_us unused);
    without, the fixed microseconds."""
    b = p.budget.batch
    hops, ars, hop_b, ar_b = [], [], [0], [0]
    for s in p.stages:
        if link is None:
            hops.append(hop_us)
            ars.append(allreduce_us if s.load.allreduces else 0.0)
            continue
        row = s.load.out_bytes
        hops.append(link.hop_us(row, b))
        hop_b.append(b * row)
        if s.load.allreduces:
            ars.append(link.allreduce_us(row, b, max(s.load.sockets, 2)))
            ar_b.append(int(2 * (s.load.sockets - 1) / max(s.load.sockets, 1) * b * row))
        else:
            ars.append(0.0)
    times = [
        s.pred.onsocket_us * calibration + s.load.allreduces * a
        for s, a in zip(p.stages, ars, strict=True)
    ]
    n = len(times)
    bn = max(times, default=0.0)
    hop = max(hops, default=hop_us)
    tps = b * 1e6 / (bn + hop) if bn > 0 else 0.0
    return Projection(
        hop_us=hop,
        allreduce_us=max(ars, default=0.0),
        stages=n,
        sockets=p.summary.sockets,
        bottleneck_us=bn,
        token_latency_us=sum(times) + sum(hops[:-1]),
        tpot_saturated_us=n * (bn + hop),
        tokens_per_s=tps,
        tokens_per_s_per_socket=tps / max(p.summary.sockets, 1),
        link_latency_us=link.latency_us if link else None,
        link_gbps=link.gbps if link else None,
        hop_bytes=max(hop_b),
        allreduce_bytes=max(ar_b),
    )


def sensitivity(
    p: Plan, calibration: float = 1.0, rows: tuple[tuple[float, float], ...] = SENSITIVITY
) -> list[Projection]:
    return [project(p, h, a, calibration) for h, a in rows]
