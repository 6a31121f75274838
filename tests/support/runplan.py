"""Drive the real runner (socketlab.runner.Runner) over an expanded plan on this machine."""

from __future__ import annotations

import sys
from pathlib import Path

from socketlab.execute.progress import Reporter
from socketlab.inventory import InventoryHost
from socketlab.runner import Runner, combined_profile


def local_host(name: str = "localhost") -> InventoryHost:
    return InventoryHost(
        name=name,
        connection="local",
        address="127.0.0.1",
        port=22,
        user=None,
        key_file=None,
        ssh_common_args="",
        python=sys.executable,
    )


def run_plan(plan, store, results: Path, workroot: Path | None = None) -> list:
    """Run and store every point of ``plan`` on this machine (a private work folder and host
    lock); returns this session's stored records in the plan's order."""
    campaign = plan.spec.campaign
    hosts = {h: local_host(h) for h in plan.hosts}
    runner = Runner(
        campaign=campaign,
        points=plan.points,
        hosts=hosts,
        profiles={h: combined_profile(h, plan.profile_hash(h)) for h in hosts},
        store=store,
        results_dir=Path(results) / campaign,
        reporter=Reporter(),
        spec_sha256=plan.spec.sha256,
        workroot=str(workroot or Path(results).parent / "work"),
    )
    runner.run()
    ran = set(runner.summary.keys)
    order = [runner.key(p) for p in plan.points if not p.warmup]
    stored = {r.run_key: r for r in store.runs(campaign)}
    return [stored[k] for k in order if k in ran]
