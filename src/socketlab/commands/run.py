"""`orchestrate run SPEC`: run every point of a spec on its hosts, into the results store."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from socketlab import paths
from socketlab.commands._options import add_results_argument, add_spec_arguments
from socketlab.errors import HostError, StoreError


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "run",
        help="run a spec's points on its hosts (resumable) into results/<campaign>/",
        description="Load SPEC, gather facts of its hosts, expand every point, and run the "
        "points not yet stored as complete: hosts in parallel, one run at a time per host. "
        "Results go to results/<campaign>/store.sqlite and results/<campaign>/runs/<run key>/.",
    )
    add_spec_arguments(
        parser,
        repetitions_help="repetitions per point instead of the spec's (more adds runs; done ones "
        "are kept)",
        profile_help="apply the spec's profiles.NAME overrides (e.g. quick: shorter, smaller runs)",
    )
    parser.add_argument(
        "--rerun-failed", action="store_true", help="run failed, timed-out and invalid runs again"
    )
    parser.add_argument("--dry-run", action="store_true", help="show what would run; run nothing")
    parser.add_argument("--json", action="store_true", help="progress as JSON lines on stdout")
    parser.add_argument("--plain", action="store_true", help="plain log lines even on a TTY")
    add_results_argument(parser)
    parser.set_defaults(func=_stoppable)


class _Terminated(BaseException):  # not an Exception: no handler on the way may swallow it
    pass


def _stoppable(args: argparse.Namespace) -> int:
    """`run` with SIGTERM as one line and exit 143 before the runs start too (loading,
    facts, planning); while runs go, the runner's own handler stops them (socketlab.runner)."""
    import signal

    def terminated(*_: Any) -> None:
        raise _Terminated()

    old = signal.signal(signal.SIGTERM, terminated)
    try:
        return run(args)
    except _Terminated:
        print("orchestrate: stopped by SIGTERM before any run started", file=sys.stderr)
        return 128 + signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, old)


def gather(spec, hosts) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Facts of every host that answers; the others with the reason."""
    from socketlab.spec.hosts import gather_host_facts

    def one(host):
        try:
            return gather_host_facts(spec, [host])[host.name], None
        except HostError as exc:
            return None, str(exc)

    with ThreadPoolExecutor(max_workers=min(8, max(1, len(hosts)))) as pool:
        answers = list(pool.map(one, hosts))
    facts = {h.name: entry for h, (entry, _) in zip(hosts, answers, strict=True) if entry}
    errors = {h.name: err for h, (_, err) in zip(hosts, answers, strict=True) if err}
    return facts, errors


def run(args: argparse.Namespace) -> int:
    from socketlab.execute.progress import make_reporter
    from socketlab.runner import Runner, combined_profile, point_label
    from socketlab.spec.expand import expand_points
    from socketlab.spec.hosts import select_hosts
    from socketlab.spec.load import load_spec
    from socketlab.store import Store, check_results_folder

    spec = load_spec(args.spec, profile=getattr(args, "profile", None))
    hosts = select_hosts(spec, args.hosts, args.inventory)
    facts, unreachable = gather(spec, hosts)
    say = print if not args.json else (lambda *a: print(*a, file=sys.stderr))
    for name, why in unreachable.items():
        say(f"orchestrate: host {name} skipped: {why}")
    plan = expand_points(spec, facts, repetitions=args.repetitions)
    for skip in plan.skipped:
        say(f"orchestrate: {skip.host}: experiment {skip.experiment} skipped: {skip.reason}")
    results = check_results_folder(Path(args.results or paths.RESULTS) / spec.campaign)
    profiles = {h: combined_profile(h, plan.profile_hash(h)) for h in plan.hosts}
    by_name = {h.name: h for h in hosts if h.name in facts}
    store_file = results / "store.sqlite"
    # A dry run creates nothing: with no store yet, nothing is done.
    store = Store(":memory:" if args.dry_run and not store_file.exists() else store_file)
    runner = Runner(
        campaign=spec.campaign, points=plan.points, hosts=by_name, profiles=profiles,
        store=store, results_dir=results, builds=spec.builds, spec_sha256=spec.sha256,
        rerun_failed=args.rerun_failed, reporter=make_reporter(args.json, args.plain),
        host_facts=facts,
    )  # fmt: skip
    if args.dry_run:
        todo = runner.pending()
        for host, items in todo.items():
            say(f"host {host}: {sum(1 for p, _ in items if not p.warmup)} runs to do")
            for point, key in items:
                say(f"  {key[:12]} {point_label(point)}  argv={json.dumps(list(point.argv))}")
        say(f"{runner.summary.skipped_done} runs already stored as complete")
        store.close()
        return 0
    try:
        _prepare_results(results, spec, facts, getattr(args, "profile", None))
    except OSError as exc:
        raise StoreError(f"{exc.filename or results}: cannot write the results folder: "
                         f"{exc.strerror or exc}") from None
    # Hosts not reached have no points to store failed: note them per host, so that `status`
    # and `report` show them; a later session that reaches the host clears the note.
    for name, why in unreachable.items():
        store.record_host_failure(spec.campaign, name, "facts", why)
    for name in facts:  # reached; a "lock" note clears only once the runner holds the host
        store.clear_host_failure(spec.campaign, name, "facts")
    summary = runner.run()
    store.close()
    if runner.interrupted is not None:  # one line; the runs it stopped are stored interrupted
        import signal

        name = signal.Signals(runner.interrupted).name
        print(f"orchestrate: stopped by {name}: {summary.statuses.get('interrupted', 0)} runs "
              f"interrupted, {sum(summary.statuses.values())} stored this session; "
              f"`orchestrate run {args.spec}` resumes", file=sys.stderr)
        return 128 + runner.interrupted
    say(f"results: {results}/ (store {store_file}, raw files in {results}/runs/)")
    say(f"report: orchestrate report {spec.campaign}" + (
        f" --results {args.results}" if args.results else ""))  # fmt: skip
    return 0 if summary.ok and not unreachable else 1


def _prepare_results(results: Path, spec, facts: dict[str, dict[str, Any]],
                     profile: str | None) -> None:
    results.mkdir(parents=True, exist_ok=True)
    _save_provenance(results, spec, facts)
    # which file and profile this campaign last ran with: the report re-plans from it
    (results / "last-run.json").write_text(json.dumps(
        {"spec": str(Path(spec.path).resolve()), "spec_sha256": spec.sha256,
         "profile": profile}, indent=1))


def _save_provenance(results: Path, spec, facts: dict[str, dict[str, Any]]) -> None:
    """A copy of the spec as run (by hash) and each host's facts, next to the store."""
    specs = results / "specs"
    specs.mkdir(exist_ok=True)
    shutil.copyfile(spec.path, specs / f"{spec.sha256[:16]}{Path(spec.path).suffix or '.yaml'}")
    hosts = results / "hosts"
    hosts.mkdir(exist_ok=True)
    for name, entry in facts.items():
        (hosts / f"{name}.json").write_text(json.dumps(entry, indent=1, sort_keys=True, default=str))
