"""CPU-set planning speed: `plan_jobs` for 20 jobs on a 384-CPU host (target < 0.5 s).

    .venv/bin/python bench/cpuset_speed.py [--fixture genoa-2s-nps4] [--repeat 5]

The host is the genoa-2s-nps4 fixture (2 x AMD EPYC 9654, 384 CPUs, 8 NUMA nodes, 24 CCDs,
so the LLC level is in use), 2 housekeeping cores per node. Mixes, 20 jobs each, whole cores,
both policies: "two-cpu" (20 jobs of one core, the old worst case), "mixed" (sizes drawn from
1-16 cores, seeded, filling the 176 worker cores), "ccd-sized" (3 jobs of 4, 5 and 6 CCDs'
worth, where the LLC search has the most sets, and 17 one-core jobs). Prints per mix the median and
min of --repeat runs and the share of
placements whose search was bounded.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))

from socketlab.placement.cpuset import Job, node_distances, plan_jobs  # noqa: E402
from socketlab.placement.isolation import plan_isolation  # noqa: E402
from socketlab.topology import topology_from_snapshot  # noqa: E402
from tests.fixtures.topology import snapshot  # noqa: E402


def mixes(cores: int) -> dict[str, list[Job]]:
    rng = random.Random(18)
    mixed, budget = [], cores
    for i in range(20):
        size = min(rng.randint(1, 16), budget - (19 - i))
        mixed.append(Job(f"m{i:02d}", 2 * size))
        budget -= size
    ccd = [Job(f"c{i:02d}", 16 * n) for i, n in enumerate([4, 5, 6])]
    ccd += [Job(f"s{i:02d}", 2) for i in range(17)]
    return {
        "two-cpu": [Job(f"j{i:02d}", 2) for i in range(20)],
        "mixed": mixed,
        "ccd-sized": ccd,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixture", default="genoa-2s-nps4")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    snap = snapshot(args.fixture)
    t = topology_from_snapshot(snap)
    distances = node_distances(snap)
    iso = plan_isolation(t)
    print(
        f"{args.fixture}: {len(t.cpus)} CPUs, {len(t.nodes)} nodes, {len(t.llcs)} LLCs, "
        f"{len(iso.workers)} worker cores; 20 jobs per mix, median of {args.repeat}"
    )
    for name, jobs in mixes(len(iso.workers)).items():
        assert len(jobs) == 20
        for policy in ("pack", "isolate"):
            times = []
            for _ in range(args.repeat):
                start = time.perf_counter()
                plan = plan_jobs(jobs, t, iso, policy, distances=distances)
                times.append(time.perf_counter() - start)
            bounded = sum(p.search == "bounded" for p in plan.placements)
            print(
                f"  {name:10s} {policy:8s} {sum(j.cpus for j in jobs):4d} CPUs  "
                f"median {statistics.median(times):.3f} s  min {min(times):.3f} s  "
                f"bounded {bounded}/20"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
