"""How long `orchestrate run` takes to get many SSH hosts running, and with how many threads.

Makes N sshd hosts in network namespaces of this machine (tests/support/netns.py; root only),
runs a campaign of one short point per host through `orchestrate run --json` in a child
process, and reads its events as they come: the time from the command's start to the runner's
start (facts and plan), to each host's first point (the last one is "the last host
running"), and to the end; the child's thread count is sampled every 20 ms from
/proc/<pid>/status. The hosts log in as this machine's root, through its login shell and rc
files (here bash with `pyenv init`: ~0.14 s of CPU per session), as a real host's user would.

    .venv/bin/python bench/host_setup.py [--hosts 64] [--repeat 1]

PYTHONPATH picks the socketlab the child runs (e.g. an older checkout's src, for a before
figure); the hosts and the spec are made by this checkout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.support.netns

#: hosts per pool (tests/support/netns.py makes at most 60 per pool)
PER_POOL = 32


def threads_of(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def one_run(inventory: Path, spec: Path, results: Path, hosts: int) -> dict:
    """One `orchestrate run --json`; the times of its events relative to its start."""
    argv = [
        sys.executable,
        "-m",
        "socketlab.cli",
        "run",
        str(spec),
        "--results",
        str(results),
        "--inventory",
        str(inventory),
        "--json",
    ]
    t0 = time.time()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    samples: list[tuple[float, int]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.02):
            samples.append((time.time() - t0, threads_of(proc.pid)))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    first_point: dict[str, float] = {}
    started = finished = None
    statuses: dict[str, int] = {}
    errors: list[str] = []
    for line in proc.stdout:
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            at = event["ts"] - t0
            if event["event"] == "start":
                started = at
            elif event["event"] == "point":
                first_point.setdefault(event["host"], at)
            elif event["event"] == "message" and "error" in event.get("text", ""):
                errors.append(f"{event['host']}: {event['text']}")
            elif event["event"] == "finish":
                finished = at
                statuses = event.get("statuses", {})
    err = proc.stderr.read()
    proc.wait()
    done.set()
    sampler.join()
    if not first_point:
        raise SystemExit(f"no host ran a point (exit {proc.returncode}): {err[-2000:]}")
    skipped = [line for line in err.splitlines() if "skipped" in line]
    running = sorted(first_point.values())
    peak = max(samples, key=lambda s: s[1]) if samples else (0.0, 0)
    return {
        "start": started,
        "first_running": running[0],
        "last_running": running[-1],
        "finish": finished,
        "wall": time.time() - t0,
        "statuses": statuses,
        "threads_peak": peak[1],
        "threads_peak_at": peak[0],
        "threads_at_last_running": _threads_near(samples, running[-1]),
        "running": len(first_point),
        "errors": errors + skipped,
    }


def _threads_near(samples: list[tuple[float, int]], at: float) -> int:
    before = [n for t, n in samples if t <= at]
    return before[-1] if before else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=1, help="runs (each a fresh campaign)")
    args = parser.parse_args()

    from tests.support.netns import SshHostPool, netns_available

    reason = netns_available()
    if reason:
        raise SystemExit(f"host_setup: needs netns test hosts: {reason}")
    import yaml

    pools: list[SshHostPool] = []
    with tempfile.TemporaryDirectory(prefix="slab-bench-hosts-") as tmp:
        tmp_path = Path(tmp)
        try:
            t_made = time.monotonic()
            hosts = []
            for index in range(0, args.hosts, PER_POOL):
                pool = SshHostPool(tmp_path / f"pool{index // PER_POOL}")
                pools.append(pool)
                for _ in range(min(PER_POOL, args.hosts - index)):
                    hosts.append(pool.add())
            made = time.monotonic() - t_made
            inventory = tmp_path / "hosts.yml"
            inventory.write_text(
                yaml.safe_dump(
                    {
                        "all": {
                            "children": {
                                "bench": {
                                    "hosts": {
                                        h.name: {
                                            **h.inventory_vars(),
                                            "socketlab_workroot": f"{tmp}/work",
                                        }
                                        for h in hosts
                                    }
                                }
                            }
                        }
                    }
                )
            )
            figures = []
            for rep in range(args.repeat):
                spec = tmp_path / f"spec{rep}.yaml"
                spec.write_text(
                    yaml.safe_dump(
                        {
                            "schema_version": 1,
                            "campaign": f"bench-hosts-{rep}",
                            "hosts": {"pattern": "bench"},
                            "experiments": [
                                {"name": "noop", "command": ["/bin/true"], "timeout_s": 60}
                            ],
                        }
                    )
                )
                figures.append(one_run(inventory, spec, tmp_path / "results", len(hosts)))
        finally:
            for pool in pools:
                pool.close()
    which = "this checkout" if not os.environ.get("PYTHONPATH") else os.environ["PYTHONPATH"]
    print(
        f"{len(hosts)} netns sshd hosts (made in {made:.1f} s), socketlab from {which}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
    )
    for f in figures:
        print(
            f"  runner start (facts + plan) {f['start']:.2f} s; first host running "
            f"{f['first_running']:.2f} s; last host running {f['last_running']:.2f} s "
            f"(runner start -> last {f['last_running'] - f['start']:.2f} s); finished "
            f"{f['finish']:.2f} s; statuses {f['statuses']}; threads: peak "
            f"{f['threads_peak']} at {f['threads_peak_at']:.1f} s, "
            f"{f['threads_at_last_running']} when the last host ran"
        )
        if f["running"] != len(hosts):
            print(f"  only {f['running']} of {len(hosts)} hosts ran; first errors:")
            for line in f["errors"][:5]:
                print(f"    {line[:300]}")
    if len(figures) > 1:
        print(
            f"  median last host running: "
            f"{statistics.median(f['last_running'] for f in figures):.2f} s"
        )


if __name__ == "__main__":
    main()
