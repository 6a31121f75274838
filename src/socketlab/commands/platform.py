"""`orchestrate platform amx|report`: is AMX really executing? Verdicts from oneDNN's kernel trace.

Live (default): runs a BF16, an INT8 and an FP32 workload and the forced-no-AMX control under
ONEDNN_VERBOSE=1 on this host (needs torch: the `ref` extra) and prints one verdict per
precision. Recorded: ``--trace FILE --precision P`` judges a trace someone else captured.
``--jsonl`` prints the native JSON-lines contract (one ``amx_executing`` metric per run), which
is how experiments/platform.yaml stores it.

Exit: 0 verdicts given; 1 the control ran AMX (the check itself is broken); 2 bad input;
3 not available on this host (no torch).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from socketlab.commands._options import add_results_argument
from socketlab.errors import SocketlabError
from socketlab.hostside.platform_onednn import PRECISIONS, Verdict


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("platform", help="seed 003 platform checks (AMX trace verdicts)")
    sub = p.add_subparsers(dest="platform_command", metavar="ACTION")
    sub.required = True
    amx = sub.add_parser(
        "amx",
        help="AMX verdict per precision from oneDNN's verbose trace",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    amx.add_argument(
        "--precision",
        action="append",
        choices=PRECISIONS,
        help="precision(s) to run or judge (default: all three)",
    )
    amx.add_argument("--trace", type=Path, help="judge this recorded trace instead of running")
    amx.add_argument(
        "--flags",
        help="CPUID flags of the traced host (comma separated; with "
        "--trace), so 'no AMX on this host' can be said",
    )
    amx.add_argument(
        "--control",
        action="store_true",
        help="with --trace: the trace is a forced-no-AMX negative control",
    )
    amx.add_argument("--no-control", action="store_true", help="live: skip the negative control")
    amx.add_argument("--out", type=Path, help="live: keep the traces in this folder")
    amx.add_argument("--timeout", type=float, default=300.0, help="per workload, seconds")
    amx.add_argument("--jsonl", action="store_true", help="JSON-lines metric records")
    amx.set_defaults(func=_amx)
    rep = sub.add_parser(
        "report",
        help="host vs guest tables of a platform campaign, written "
        "to results/<campaign>/platform-report.md",
    )
    rep.add_argument("campaign")
    add_results_argument(rep)
    rep.set_defaults(func=_report)


def _amx(args: argparse.Namespace) -> int:
    precisions = args.precision or list(PRECISIONS)
    if args.trace is not None:
        return _recorded(args, precisions)
    try:
        import torch  # noqa: F401 - only whether it is there
    except ImportError:
        print(
            "not available on this host: torch is not installed (pip install -e '.[ref]')",
            file=sys.stderr,
        )
        return 3
    from socketlab.hostside.platform_amx import probe

    results = probe(precisions, not args.no_control, args.out, args.timeout)
    failed = False
    for run, verdict, error in results:
        if verdict is None:
            failed = True
            _emit_error(args, run.name, run.precision, error)
        else:
            _emit(args, run.name, verdict)
    control_broken = any(v is not None and v.control_ok is False for _, v, _ in results)
    if control_broken:
        print("self-check failed: the forced-no-AMX control ran AMX", file=sys.stderr)
        return 1
    return 1 if failed else 0


def _recorded(args: argparse.Namespace, precisions: list[str]) -> int:
    from socketlab.hostside.platform_onednn import parse_trace, verdict

    try:
        text = args.trace.read_text(errors="replace")
    except OSError as exc:
        raise SocketlabError(f"--trace {args.trace}: cannot read ({exc.strerror})") from None
    trace = parse_trace(text)
    if trace.version is None and not trace.primitives:
        raise SocketlabError(
            f"--trace {args.trace}: no onednn_verbose lines; expected a trace "
            "captured with ONEDNN_VERBOSE=1"
        )
    flags = [f for f in args.flags.split(",") if f] if args.flags is not None else None
    for precision in precisions:
        _emit(args, args.trace.stem, verdict(trace, precision, flags, args.control))
    return 0


def _emit(args: argparse.Namespace, run: str, v: Verdict) -> None:
    if args.jsonl:
        record = {
            "type": "metric",
            "name": "amx_executing",
            "value": int(v.executing),
            "unit": "bool",
            "run": run,
            "precision": v.precision,
            "verdict": v.verdict,
            "implementation": ",".join(v.implementations) or "none",
            "isa": v.isa or "unknown",
            "host_amx": {True: "yes", False: "no", None: "unknown"}[v.host_amx],
            "control": "yes" if v.control else "no",
            "reason": v.reason,
        }
        print(json.dumps(record, sort_keys=True))
    else:
        tag = " (negative control)" if v.control else ""
        print(f"{run:<14} {v.precision:<5} {v.verdict}{tag}: {v.reason}")


def _emit_error(args: argparse.Namespace, run: str, precision: str, error: str) -> None:
    if args.jsonl:
        print(json.dumps({"type": "meta", "run": run, "precision": precision, "error": error}))
    print(f"{run}: {error}", file=sys.stderr)


def _report(args: argparse.Namespace) -> int:
    from socketlab.platform.tables import load, render
    from socketlab.store import Store, existing_store_path

    path = existing_store_path(args.campaign, args.results)
    from socketlab.platform.plots import write_plots

    with Store(path, create=False) as store:
        data = load(store, args.campaign, path.parent)
    plots = write_plots(data, path.parent)
    text = render(
        args.campaign, data, ["", "## Plots", ""] + [f"![{p.stem}]({p.name})" for p in plots]
    )
    out = path.parent / "platform-report.md"
    out.write_text(text)
    print(text, end="")
    print(f"\nreport written to {out}")
    return 0
