"""Plan expansion speed: time `expand_points` for 10,000 run points (target < 1 s).

    .venv/bin/python bench/plan_expansion.py [--fixture c8i-metal-48xl] [--repeat 5]

Two shapes, both 10,000 points on one host with the recorded c8i.metal-48xl facts (192 CPUs):
"distinct" is a 100 x 100 matrix with one repetition, so every point renders its own argv,
env and CPU list (the worst case); "repeated" is 2,500 combinations x 4 repetitions. Each
template uses a parameter and a host fact. Prints the median and min of --repeat runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from socketlab.spec.expand import expand_points  # noqa: E402
from socketlab.spec.hosts import host_entry  # noqa: E402
from socketlab.spec.load import load_spec  # noqa: E402
from socketlab.topology import topology_from_snapshot  # noqa: E402

SPEC = """\
schema_version: 1
campaign: bench-expansion
experiments:
  - name: stage
    command: >-
      ./sram_stage --size {{{{ a }}}}K --threads {{{{ b }}}}
      --cpus {{{{ facts.workers_list }}}} --tag "a={{{{ a }}}} b={{{{ b }}}}"
    env: {{OMP_NUM_THREADS: "{{{{ b }}}}", HK: "{{{{ facts.housekeeping_list }}}}"}}
    cpus: "{{{{ facts.workers[b % 90] }}}}"
    sweep: {{matrix: {{a: {a}, b: {b}}}}}
    repetitions: {reps}
    order: shuffled
"""


def measure(spec_text: str, entry: dict, repeat: int) -> tuple[list[float], int, float]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "spec.yaml"
        path.write_text(spec_text)
        start = time.perf_counter()
        spec = load_spec(path)
        load_s = time.perf_counter() - start
    times = []
    npoints = 0
    for _ in range(repeat):
        start = time.perf_counter()
        plan = expand_points(spec, {"c8i": entry})
        times.append(time.perf_counter() - start)
        npoints = len(plan.points)
    return times, npoints, load_s


SHAPES = {
    "distinct (100 x 100 matrix, 1 repetition)": (list(range(100)), list(range(100)), 1),
    "repeated (50 x 50 matrix, 4 repetitions)": (list(range(50)), list(range(50)), 4),
}


def expansion_figures(fixture: str = "c8i-metal-48xl", repeat: int = 5) -> list[dict]:
    """Per shape: label, points, median and min expansion seconds, load_spec seconds."""
    snapshot = json.loads(
        (REPO / "tests" / "fixtures" / "topology" / f"{fixture}.json").read_text()
    )
    figures = []
    for label, (a, b, reps) in SHAPES.items():
        text = SPEC.format(a=json.dumps(a), b=json.dumps(b), reps=reps)
        entry = host_entry(topology_from_snapshot(snapshot), load_spec_for_entry(text))
        times, npoints, load_s = measure(text, entry, repeat)
        figures.append(
            {
                "label": label,
                "points": npoints,
                "median": statistics.median(times),
                "min": min(times),
                "load_s": load_s,
                "repeat": repeat,
            }
        )
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixture", default="c8i-metal-48xl")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"plan expansion, host facts from tests/fixtures/topology/{args.fixture}.json")
    figures = expansion_figures(args.fixture, args.repeat)
    for f in figures:
        print(
            f"  {f['label']}: {f['points']} points, expansion median {f['median']:.3f} s "
            f"(min {f['min']:.3f} s, {f['repeat']} runs); load_spec {f['load_s'] * 1000:.0f} ms"
        )
    worst = max(f["median"] for f in figures)
    verdict = "meets" if worst < 1.0 else "MISSES"
    print(f"10,000-point expansion: {worst:.3f} s (target < 1 s: {verdict})")
    return 0


def load_spec_for_entry(text: str):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "spec.yaml"
        path.write_text(text)
        return load_spec(path)


if __name__ == "__main__":
    sys.exit(main())
