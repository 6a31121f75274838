"""`orchestrate run SPEC`: run every point of a spec on its hosts, into the results store."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from socketlab.commands._options import add_results_argument, add_spec_arguments


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


def run(args: argparse.Namespace) -> int:
    from socketlab import session
    from socketlab.execute.progress import make_reporter
    from socketlab.runner import point_label
    from socketlab.shipped import spec_path
    from socketlab.store.status import RunStatus

    spec = spec_path(args.spec)
    campaign = session.prepare(
        spec,
        profile=getattr(args, "profile", None),
        pattern=args.hosts,
        inventory=args.inventory,
        repetitions=args.repetitions,
        open_hosts=not args.dry_run,
    )
    if args.dry_run:  # a preview refuses what `plan` refuses: exit 2 when no host answered
        session.require_a_host(campaign)
    say = print if not args.json else (lambda *a: print(*a, file=sys.stderr))
    for name, why in campaign.unreachable.items():
        say(f"orchestrate: host {name} skipped: {why}")
    for skip in campaign.plan.skipped:
        say(f"orchestrate: {skip.host}: experiment {skip.experiment} skipped: {skip.reason}")
    if args.dry_run:
        todo, done = session.pending(campaign, args.results, rerun_failed=args.rerun_failed)
        for host, items in todo.items():
            say(f"host {host}: {sum(1 for p, _ in items if not p.warmup)} runs to do")
            for point, key in items:
                say(f"  {key[:12]} {point_label(point)}  argv={json.dumps(list(point.argv))}")
        say(f"{done} runs already stored as complete")
        return 0
    runner = session.run(
        campaign,
        args.results,
        rerun_failed=args.rerun_failed,
        reporter=make_reporter(args.json, args.plain),
    )
    summary, results = runner.summary, runner.results_dir
    if runner.interrupted is not None:  # one line; the runs it stopped are stored interrupted
        import signal

        name = signal.Signals(runner.interrupted).name
        stopped = summary.statuses.get(RunStatus.INTERRUPTED, 0)
        print(
            f"orchestrate: stopped by {name}: {stopped} runs "
            f"interrupted, {sum(summary.statuses.values())} stored this session; "
            f"`orchestrate run {args.spec}` resumes",
            file=sys.stderr,
        )
        return 128 + runner.interrupted
    say(f"results: {results}/ (store {results / 'store.sqlite'}, raw files in {results}/runs/)")
    say(
        f"report: orchestrate report {campaign.spec.campaign}"
        + (f" --results {args.results}" if args.results else "")
    )
    return 0 if summary.ok and not campaign.unreachable else 1
