"""`orchestrate compare A B`, `orchestrate compare A --by host|build`: medians, ratio, its
bootstrap interval and a verdict per matching point (socketlab.results.comparison)."""

from __future__ import annotations

import argparse
import fnmatch
import sys
from pathlib import Path

from socketlab.commands._options import add_results_argument
from socketlab.errors import SocketlabError

FAIL_ON = ("slower", "inconclusive", "missing")


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "compare",
        help="compare two campaigns (or one's two hosts or builds) point by point",
        description="Per point and metric both sides measured: the medians over repetitions, "
        "B / A, its bootstrap confidence interval and a verdict: faster / slower (a rate or a "
        "time), higher / lower (other metrics), same within the tolerance, or inconclusive. "
        "Points one side lacks are listed. A and B: a campaign name, a results folder, a "
        "campaign folder, a store file, or s3://bucket/prefix/<campaign>.",
    )
    parser.add_argument("a", metavar="A", help="the base: what B is compared with")
    parser.add_argument("b", metavar="B", nargs="?", help="the other side (not with --by)")
    parser.add_argument(
        "--by",
        choices=("host", "build"),
        help="compare A's two hosts or two builds instead of two campaigns",
    )
    parser.add_argument(
        "--between",
        nargs=2,
        metavar=("X", "Y"),
        help="with --by: the two hosts or builds (a build by hash prefix)",
    )
    add_results_argument(parser, help="results folder campaign names are looked up in")
    parser.add_argument(
        "--metric",
        action="append",
        metavar="GLOB",
        help="only metrics matching (repeatable; default all)",
    )
    parser.add_argument(
        "--tolerance",
        type=float,
        default=0.05,
        help="'same' when the interval lies within 1 ± this (default 0.05)",
    )
    parser.add_argument("--confidence", type=float, default=0.95, help="default 0.95")
    parser.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    parser.add_argument(
        "--format",
        choices=("md", "html"),
        default="md",
        help="markdown on stdout, or standalone HTML with a plot (needs -o)",
    )
    parser.add_argument("-o", "--output", metavar="FILE", help="write to FILE")
    parser.add_argument(
        "--json",
        action="store_true",
        help="one JSON line per point instead (the points of one side too)",
    )
    parser.add_argument(
        "--fail-on",
        metavar="WHAT",
        type=_fail_on,
        default=[],
        help=f"exit 1 when a point is one of ({', '.join(FAIL_ON)}; "
        "comma-separated), naming them on stderr",
    )
    parser.set_defaults(func=run)


def _fail_on(text: str) -> list[str]:
    words = [w.strip() for w in text.split(",") if w.strip()]
    bad = [w for w in words if w not in FAIL_ON]
    if bad or not words:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected one or more of {', '.join(FAIL_ON)}, comma-separated"
        )
    return words


def _check(args: argparse.Namespace) -> None:
    if args.by and args.b:
        raise SocketlabError(
            f"compare {args.a} {args.b} --by {args.by}: give one campaign "
            "with --by (its two hosts or builds are the sides)"
        )
    if not args.by and not args.b:
        raise SocketlabError("compare: expected B, or --by host|build to split A")
    if args.between and not args.by:
        raise SocketlabError("--between: only with --by host|build")
    if not 0 < args.tolerance < 1:
        raise SocketlabError(f"--tolerance {args.tolerance}: expected a fraction in (0, 1)")
    if not 0.5 <= args.confidence < 1:
        raise SocketlabError(f"--confidence {args.confidence}: expected a level in [0.5, 1)")
    if args.resamples < 100:
        raise SocketlabError(f"--resamples {args.resamples}: expected 100 or more")
    if args.format == "html" and not args.output and not args.json:
        raise SocketlabError("--format html: give the file to write with -o")


def run(args: argparse.Namespace) -> int:
    from socketlab import results
    from socketlab.results.compare_view import json_lines, render_html, render_markdown
    from socketlab.results.comparison import Settings, compare, split

    _check(args)
    settings = Settings(args.tolerance, args.confidence, args.resamples, args.seed)
    left = results.load(args.a, results=args.results)
    notes: list[str] = []
    if args.by:
        (a_name, a), (b_name, b), notes = split(
            left.metrics_with_runs(), args.by, tuple(args.between) if args.between else None
        )
        drop = ("host",) if args.by == "host" else ()
        a_name, b_name = (f"{left.campaign} {args.by} {x}" for x in (a_name, b_name))
    else:
        right = results.load(args.b, results=args.results)
        a, b = left.metrics_with_runs(), right.metrics_with_runs()
        single = a["host"].nunique() == 1 and b["host"].nunique() == 1
        drop = ("host",) if single else ()
        a_name, b_name = _name(args.a, left), _name(args.b, right)
        notes += [
            f"{name}: {n} builds pooled per point (split them with --by build)"
            for name, frame in ((a_name, a), (b_name, b))
            if (n := frame["build_hash"].nunique()) > 1
        ]
    if args.metric:
        a, b = (
            f[
                f["metric"]
                .astype(str)
                .map(lambda m: any(fnmatch.fnmatchcase(m, g) for g in args.metric))
            ]
            for f in (a, b)
        )
    cmp = compare(a, b, a_name=a_name, b_name=b_name, drop=drop, settings=settings)
    cmp.notes += notes
    if args.json:
        _emit("\n".join(json_lines(cmp)) + "\n", args.output)
    elif args.format == "html":
        _emit(render_html(cmp), args.output)
    else:
        _emit(render_markdown(cmp), args.output)
    return _gate(cmp, args.fail_on)


def _name(source: str, res) -> str:
    return source if source == res.campaign else f"{source} ({res.campaign})"


def _emit(text: str, output: str | None) -> None:
    if not output:
        print(text, end="")
        return
    path = Path(output)
    try:
        path.write_text(text)
    except OSError as exc:
        raise SocketlabError(f"-o {path}: cannot write: {exc.strerror or exc}") from None
    print(f"written to {path}", file=sys.stderr)


def _gate(cmp, words: list[str]) -> int:
    """Exit 1 naming every point that --fail-on catches; 0 otherwise."""
    from socketlab.results.compare_view import point_text

    hits = []
    for _, r in cmp.rows.iterrows():
        if r["verdict"] in words:
            hits.append(
                f"{r['verdict']}: {r['experiment']} {point_text(r, cmp.point)} "
                f"{r['metric']} [{r['unit']}]: {r['ratio']:.3g}x "
                f"({r['ci_low']:.3g}–{r['ci_high']:.3g})"
            )
    if "missing" in words:
        for frame, side in ((cmp.only_a, "A"), (cmp.only_b, "B")):
            hits += [
                f"only in {side}: {r['experiment']} {point_text(r, cmp.point)} "
                f"{r['metric']} [{r['unit']}]"
                for _, r in frame.iterrows()
            ]
    for line in hits:
        print(f"orchestrate: compare: {line}", file=sys.stderr)
    if hits:
        print(
            f"orchestrate: compare: {len(hits)} point(s) fail --fail-on {','.join(words)}",
            file=sys.stderr,
        )
    return 1 if hits else 0
