"""A campaign session: the one path `orchestrate plan`, `run --dry-run` and `run` share.

`prepare` loads the spec, selects its hosts, gathers their facts once and expands the points;
for a run (``open_hosts``) it opens each host in the same session that reads its facts, and
the runner goes on in it. `pending` says what a run would do; `run` writes the campaign's
provenance and host-failure notes and runs it. The commands only parse arguments and print.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from socketlab import paths
from socketlab.errors import HostError, SocketlabError, StoreError
from socketlab.runner import Runner, combined_profile
from socketlab.safepath import inside
from socketlab.spec.estimate import estimate
from socketlab.spec.expand import Plan, Skip, expand_points
from socketlab.spec.hosts import assumed_host_facts, gather_host_facts, select_hosts
from socketlab.spec.load import load_spec
from socketlab.spec.model import Spec
from socketlab.store import Store, check_results_folder


@dataclass(frozen=True)
class Campaign:
    spec: Spec
    plan: Plan
    hosts: dict[str, Any]  #: inventory name -> host, the hosts that answered
    facts: dict[str, dict[str, Any]]  #: inventory name -> host entry (socketlab.spec.hosts)
    unreachable: dict[str, SocketlabError]  #: inventory name -> why its facts are missing
    profile: str | None
    #: inventory name -> its executor, opened with its facts (``prepare(open_hosts=True)``)
    executors: dict[str, Any] = field(default_factory=dict)

    def close(self) -> None:
        """Close the hosts opened for the run (each executor's close may come twice)."""
        for executor in self.executors.values():
            executor.close()


def prepare(
    spec_file: str | Path,
    *,
    profile: str | None = None,
    pattern: str | None = None,
    inventory: str | Path | None = None,
    repetitions: int | None = None,
    assume: list[str] | None = None,
    open_hosts: bool = False,
) -> Campaign:
    """Load, select hosts (or take `assume`d snapshots), gather facts once, expand the points.
    With ``open_hosts`` each host reached stays open for the run (``Campaign.executors``);
    `run` closes them, and so does a failure here."""
    spec = load_spec(spec_file, profile=profile)
    unreachable: dict[str, SocketlabError] = {}
    executors: dict[str, Any] = {}
    try:
        if assume:
            hosts: list[Any] = []
            facts = assumed_host_facts(spec, assume)
        else:
            hosts = select_hosts(spec, pattern, inventory)
            facts = gather_host_facts(
                spec, hosts, unreachable, executors=executors if open_hosts else None
            )
        plan = expand_points(spec, facts, repetitions=repetitions)
    except BaseException:
        for executor in executors.values():
            executor.close()
        raise
    reached = {h.name: h for h in hosts if h.name in facts}
    return Campaign(spec, plan, reached, facts, unreachable, profile, executors)


def preview(
    spec_file: str | Path,
    *,
    profile: str | None = None,
    pattern: str | None = None,
    inventory: str | Path | None = None,
    repetitions: int | None = None,
    assume: list[str] | None = None,
    results: str | Path | None = None,
) -> tuple[Plan, dict[str, Any]]:
    """What `orchestrate plan` shows: the plan (every experiment of an unreachable host
    skipped, with why) and its estimated time (socketlab.spec.estimate). HostError when no
    host answered."""
    campaign = prepare(
        spec_file,
        profile=profile,
        pattern=pattern,
        inventory=inventory,
        repetitions=repetitions,
        assume=assume,
    )
    require_a_host(campaign)
    plan = campaign.plan
    plan.skipped.extend(
        Skip(name, exp.name, f"host unreachable: {exc}")
        for name, exc in campaign.unreachable.items()
        for exp in campaign.spec.experiments
    )
    return plan, estimate(plan, results, assumed=bool(assume))


def require_a_host(campaign: Campaign) -> None:
    """HostError when no host answered (a broken ansible_python_interpreter, an unreachable
    address): what `plan` and `run --dry-run` both say, so a preview never passes a campaign
    that can't run anywhere."""
    if not campaign.facts and campaign.unreachable:
        first = next(iter(campaign.unreachable.values()))
        raise HostError(
            f"no host could be reached ({len(campaign.unreachable)} tried); first: {first}"
        )


def runner(
    campaign: Campaign,
    results: str | Path | None = None,
    *,
    dry_run: bool = False,
    rerun_failed: bool = False,
    reporter: Any = None,
):
    """The campaign's Runner over results/<campaign>/store.sqlite (a dry run creates nothing:
    with no store yet it reads an empty one in memory)."""
    spec, plan = campaign.spec, campaign.plan
    folder = check_results_folder(
        inside(Path(results or paths.RESULTS), spec.campaign, what="campaign")
    )
    store_file = folder / "store.sqlite"
    return Runner(
        campaign=spec.campaign,
        points=plan.points,
        hosts=campaign.hosts,
        profiles={h: combined_profile(h, plan.profile_hash(h)) for h in plan.hosts},
        store=Store(":memory:" if dry_run and not store_file.exists() else store_file),
        results_dir=folder,
        builds=spec.builds,
        spec_sha256=spec.sha256,
        rerun_failed=rerun_failed,
        reporter=reporter,
        host_facts=campaign.facts,
        executors=None if dry_run else campaign.executors,
    )


def pending(campaign: Campaign, results: str | Path | None = None, *, rerun_failed: bool = False):
    """(host -> [(point, run key)] a run would do, runs already stored complete); writes nothing."""
    dry = runner(campaign, results, dry_run=True, rerun_failed=rerun_failed)
    try:
        return dry.pending(), dry.summary.skipped_done
    finally:
        dry.store.close()


def run(
    campaign: Campaign,
    results: str | Path | None = None,
    *,
    rerun_failed: bool = False,
    reporter: Any = None,
):
    """Record the campaign's provenance and host-failure notes, run what is pending and return
    the Runner (its summary, and the signal that stopped it if one did)."""
    try:
        session = runner(campaign, results, rerun_failed=rerun_failed, reporter=reporter)
    except BaseException:
        campaign.close()
        raise
    try:
        save_provenance(session.results_dir, campaign)
        # Hosts not reached have no points to store failed: note them per host, so that
        # `status` and `report` show them; a later session that reaches the host clears it.
        for name, why in campaign.unreachable.items():
            session.store.record_host_failure(campaign.spec.campaign, name, "facts", str(why))
        for name in campaign.facts:  # reached; a "lock" note clears once the runner holds it
            session.store.clear_host_failure(campaign.spec.campaign, name, "facts")
        session.run()
    finally:
        campaign.close()
        session.store.close()
    return session


def save_provenance(results: Path, campaign: Campaign) -> None:
    """Beside the store: the spec as run (by hash), each host's facts, and which file and
    profile the campaign last ran with (the report re-plans from it)."""
    spec = campaign.spec
    try:
        for sub in ("specs", "hosts"):
            (results / sub).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(
            spec.path, results / "specs" / f"{spec.sha256[:16]}{Path(spec.path).suffix or '.yaml'}"
        )
        for name, entry in campaign.facts.items():
            inside(results / "hosts", f"{name}.json", what="host name").write_text(
                json.dumps(entry, indent=1, sort_keys=True, default=str)
            )
        (results / "last-run.json").write_text(
            json.dumps(
                {
                    "spec": str(Path(spec.path).resolve()),
                    "spec_sha256": spec.sha256,
                    "profile": campaign.profile,
                },
                indent=1,
            )
        )
    except OSError as exc:
        raise StoreError(
            f"{exc.filename or results}: cannot write the results folder: {exc.strerror or exc}"
        ) from None
