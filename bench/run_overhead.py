"""The orchestrator's speed, measured in one run: plan expansion, per-run executor overhead,
store inserts.

- plan: expanding 10,000 run points (bench/plan_expansion.py; target < 1 s);
- local: ``LocalExecutor.run(binary)`` against ``subprocess.run(binary)`` of the same binary,
  both waiting for it and capturing its output (target < 20 ms per run);
- SSH: ``SshExecutor.run(binary)`` on an sshd host in a network namespace of this machine,
  with the connection (and its agent) reused, against the same direct run (target < 60 ms);
- runner: a whole point through ``orchestrate run`` machinery on localhost (fingerprint
  before/after, run, store; ``--runner-only`` prints this figure alone; target < 20 ms);
- store: inserting 1,000,000 metric rows (bench/store_insert.py; target < 15 s).

The binary is native/build/<cc>/ladder --help when built (``make -C native``), else /bin/true.
Medians of ``--runs`` runs each. The SSH part needs root (namespaces) and is skipped without.

    .venv/bin/python bench/run_overhead.py [--runs 200] [--rows 1000000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.support.netns, bench.store_insert


def timed(fn, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def paired(direct, other, runs: int) -> tuple[list[float], list[float]]:
    """Time ``direct`` and ``other`` alternately, so that load from other work on this shared
    machine lands on both alike; the overhead is the median of the per-pair differences."""
    a, b = [], []
    for _ in range(runs):
        a += timed(direct, 1)
        b += timed(other, 1)
    return a, b


def overhead(base: list[float], other: list[float]) -> float:
    return statistics.median(o - d for d, o in zip(base, other, strict=True))


def ms(values: list[float]) -> str:
    values = sorted(values)
    p90 = values[int(0.9 * (len(values) - 1))]
    return f"median {statistics.median(values) * 1e3:.2f} ms (p90 {p90 * 1e3:.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--points", type=int, default=30, help="points for the runner figure")
    parser.add_argument("--runner-only", action="store_true", help="the runner figure alone")
    parser.add_argument("--repeat", type=int, default=1, help="runner figure: campaigns")
    args = parser.parse_args()
    if args.runner_only:
        for _ in range(args.repeat):
            runner_figure(args.points)
        return

    from bench.plan_expansion import expansion_figures

    worst = max(expansion_figures(repeat=3), key=lambda f: f["median"])
    print(
        f"plan expansion: {worst['points']:,} points in {worst['median']:.3f} s (median of 3, "
        f"{worst['label']}; target < 1 s)"
    )

    from socketlab.execute.local import LocalExecutor

    built = sorted((REPO / "native" / "build").glob("*/ladder"))
    argv = [str(built[0]), "--help"] if built else ["/bin/true"]
    print(f"binary: {' '.join(argv)}; {args.runs} runs each; load average {os.getloadavg()[0]:.2f}")

    def direct() -> None:
        subprocess.run(argv, capture_output=True, check=False)

    direct()
    with tempfile.TemporaryDirectory() as tmp:
        local = LocalExecutor("bench-local", workroot=tmp)
        local.connect()
        local.run(argv)
        base, loc = paired(direct, lambda: local.run(argv, timeout=60), args.runs)
        base_p, pinned = paired(direct, lambda: local.run(argv, timeout=60, cpus="0"), args.runs)
        local.close()
    print(f"direct subprocess.run: {ms(base)}")
    print(
        f"local executor: {ms(loc)}; overhead {overhead(base, loc) * 1e3:.2f} ms per run "
        f"(target < 20 ms); pinned (taskset): {ms(pinned)}, overhead "
        f"{overhead(base_p, pinned) * 1e3:.2f} ms"
    )

    from tests.support.netns import netns_available, ssh_hosts

    reason = netns_available()
    if reason:
        print(f"ssh executor: skipped ({reason})")
    else:
        from socketlab.execute.ssh import SshExecutor
        from socketlab.inventory import load_inventory

        with tempfile.TemporaryDirectory() as tmp, ssh_hosts(1, Path(tmp) / "ssh") as pool:
            (host,) = load_inventory(pool.inventory(Path(tmp) / "inv.yml"))
            ex = SshExecutor(host, workroot=f"{tmp}/work")
            ex.connect()
            ex.install_tools(Path(tmp) / "scratch")
            ex.lock({"campaign": "bench"})
            ex.run(argv)
            transport = ex._conn.client.get_transport()
            base_r, remote = paired(direct, lambda: ex.run(argv, timeout=60), args.runs)
            assert ex._conn.client.get_transport() is transport  # one connection throughout
            t0 = time.perf_counter()
            ex.call(["true"])
            call_s = time.perf_counter() - t0
            ex.close()
        print(
            f"ssh executor (connection + agent reused): {ms(remote)}; overhead "
            f"{overhead(base_r, remote) * 1e3:.2f} ms per run (target < 60 ms); one helper call "
            f"{call_s * 1e3:.1f} ms"
        )

    for _ in range(args.repeat):
        runner_figure(args.points)

    from bench.store_insert import insert_rows

    r = insert_rows(args.rows)
    print(
        f"store insert: {r['rows']:,} metric rows in {r['runs']:,} runs (one transaction "
        f"each): {r['seconds']:.2f} s, {r['rows_per_s']:,.0f} rows/s (target < 15 s)"
    )


def runner_figure(points: int) -> None:
    """A whole campaign of no-op points on localhost, as `orchestrate run` does it: its wall
    time per point, and the whole point (first point started to last point stored, over the
    points: fingerprints, run, collectors, record, store, and what lies between two points)."""
    import yaml

    from socketlab import session
    from socketlab.execute.progress import Reporter

    class Timed(Reporter):
        def __init__(self) -> None:
            super().__init__(open(os.devnull, "w"))  # noqa: SIM115 - closed below
            self.started: list[float] = []
            self.stored: list[float] = []

        def point_started(self, host: str, label: str) -> None:
            self.started.append(time.perf_counter())

        def point_done(self, host, label, status, reason, seconds) -> None:
            self.stored.append(time.perf_counter())

    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "spec.yaml"
        spec.write_text(
            yaml.safe_dump(
                {
                    "schema_version": 1,
                    "campaign": "bench-runner",
                    "experiments": [
                        {
                            "name": "noop",
                            "command": ["/bin/true", "{{ i }}"],
                            "sweep": {"matrix": {"i": list(range(points))}},
                        }
                    ],
                }
            )
        )
        inv = Path(tmp) / "inv.yml"
        inv.write_text(
            yaml.safe_dump(
                {
                    "all": {
                        "hosts": {
                            "localhost": {
                                "ansible_connection": "local",
                                "ansible_python_interpreter": "/usr/bin/python3",
                                "socketlab_workroot": f"{tmp}/work",
                            }
                        }
                    }
                }
            )
        )
        reporter = Timed()
        t0 = time.perf_counter()
        campaign = session.prepare(spec, inventory=inv)
        runner = session.run(campaign, f"{tmp}/results", reporter=reporter)
        total = time.perf_counter() - t0
        reporter.stream.close()
    if not runner.summary.ok or len(reporter.stored) != points:
        raise SystemExit(f"runner figure: the campaign failed: {runner.summary.as_dict()}")
    whole = (reporter.stored[-1] - reporter.started[0]) / points
    print(
        f"runner, whole campaign of {points} no-op points on localhost (facts, plan, "
        f"setup, points, store): {total:.2f} s, {total / points * 1e3:.0f} ms per point; "
        f"whole point (first started to last stored, / {points}): {whole * 1e3:.1f} ms "
        "(target < 20 ms)"
    )


if __name__ == "__main__":
    main()
