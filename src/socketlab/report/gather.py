"""Gather what the comparison report needs from a campaign's results folder.

The store gives metrics and runs (with build manifests and fingerprints); host facts come from
the folder the runner writes them to (``results/<campaign>/hosts/<host>.json``) or, failing that,
from a facts file in a run's raw folder; the published files are those whose ``campaign`` names
this campaign. Skip reasons come from re-planning the campaign file (pure) when it is found.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from socketlab import paths
from socketlab.errors import SocketlabError
from socketlab.report import probe_quiet
from socketlab.report.compare import _equal, compare
from socketlab.report.interference import summary_text as interference_summary
from socketlab.report.isolation import isolation_text
from socketlab.report.published import PUBLISHED_DIR, Cell, published_for_campaign
from socketlab.report.render import Report

#: file names a run's raw folder may keep host facts under, most specific first
FACTS_FILES = ("facts.json", "facts_before.json", "host_facts.json")


def facts_entry(data: dict[str, Any]) -> dict[str, Any]:
    """Normalise stored facts to {"topology": Topology.facts(), ...}."""
    if "topology" in data:
        return data
    if "cpu_model" in data:
        return {"topology": data}
    if "cpuinfo" in data:  # a raw host_facts.py snapshot
        from socketlab.topology import topology_from_snapshot

        return {"topology": topology_from_snapshot(data).facts()}
    return {"topology": {}}


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def host_facts(campaign_dir: Path, runs: list[Any]) -> dict[str, dict[str, Any]]:
    """host -> facts entry, from hosts/<host>.json or the newest run's raw folder."""
    out: dict[str, dict[str, Any]] = {}
    hosts_dir = campaign_dir / "hosts"
    if hosts_dir.is_dir():
        for p in sorted(hosts_dir.glob("*.json")):
            data = _read_json(p)
            if data is not None:
                out[p.stem] = facts_entry(data)
    for run in sorted(runs, key=lambda r: r.started or 0, reverse=True):
        if run.host in out or not run.raw_dir:
            continue
        raw = Path(run.raw_dir)
        raw = raw if raw.is_absolute() else campaign_dir / raw
        for name in FACTS_FILES:
            data = _read_json(raw / name)
            if data is not None:
                out[run.host] = facts_entry(data)
                break
    for run in runs:  # hosts that ran but left no facts still get a column
        out.setdefault(run.host, {})
    return out


def _skips(
    spec_path: Path | None, hosts: dict[str, dict[str, Any]], profile: str | None
) -> list[tuple[str, str, str]]:
    """(host, experiment, reason) the planner gives for the campaign file, or [] if unknown."""
    if spec_path is None or not spec_path.is_file() or not hosts:
        return []
    try:
        from socketlab.spec.expand import expand_points
        from socketlab.spec.load import load_spec

        spec = load_spec(spec_path, profile=profile) if profile else load_spec(spec_path)
        plan = expand_points(spec, {h: e for h, e in hosts.items() if e.get("topology")})
    except (SocketlabError, TypeError, ImportError):
        return []
    return [(s.host, s.experiment, s.reason) for s in plan.skipped]


def collector_notes(campaign_dir: Path, raw_dir: str) -> dict[str, str]:
    """collector -> its "unsupported here" reason, from a run's raw collectors folder."""
    from socketlab.parse.collectors import read_records

    if not raw_dir:
        return {}
    raw = Path(raw_dir)
    folder = (raw if raw.is_absolute() else campaign_dir / raw) / "collectors"
    notes: dict[str, str] = {}
    for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else ():
        for rec in read_records(path):
            if rec.get("unsupported"):
                part = f"{rec['part']}: " if rec.get("part") else ""
                notes.setdefault(path.stem, f"{part}{rec['unsupported']}")
    return notes


def run_meta(campaign_dir: Path, raw_dir: str) -> dict[str, Any]:
    """The binary's meta record of a run (its ``meta.json``: seconds, reps, iters, threads...),
    merged into one dict; {} when the run kept none."""
    if not raw_dir:
        return {}
    raw = Path(raw_dir)
    try:
        data = json.loads(
            ((raw if raw.is_absolute() else campaign_dir / raw) / "meta.json").read_text()
        )
    except (OSError, ValueError):
        return {}
    out: dict[str, Any] = {}
    for record in data if isinstance(data, list) else [data]:
        if isinstance(record, dict):
            for k, v in record.items():
                out.setdefault(k, v)
    return out


def run_dicts(campaign_dir: Path, runs: list[Any]) -> list[dict[str, Any]]:
    """Stored runs as ``compare`` takes them: status and reason, collector notes, meta record,
    the interference probe's readings around the run (socketlab.report.interference)."""
    return [
        {
            "run_key": r.run_key,
            "experiment": r.experiment,
            "host": r.host,
            "params": r.params,
            "status": r.status,
            "reason": r.reason,
            "collectors": collector_notes(campaign_dir, r.raw_dir),
            "meta": run_meta(campaign_dir, r.raw_dir),
            "probe": (r.extra or {}).get("probe") if isinstance(r.extra, dict) else None,
        }
        for r in runs
    ]


def explainer(
    spec_path: Path | None, profile: str | None
) -> Callable[[Cell, str], str | None] | None:
    """Why the campaign has no point for a cell: no such experiment or parameter value in the
    campaign file, or left out by the profile it ran with. Pure over the file's sweeps."""
    if spec_path is None or not spec_path.is_file():
        return None
    try:
        from socketlab.spec.load import load_spec, sweep_points

        full = load_spec(spec_path)
        prof = load_spec(spec_path, profile=profile) if profile else None
    except (SocketlabError, TypeError):
        return None

    def points(spec) -> dict[str, tuple[set[str], list[dict[str, Any]]]]:
        return {e.name: (set(e.sweep.names), sweep_points(e.sweep)) for e in spec.experiments}

    full_pts = points(full)
    prof_pts = points(prof) if prof else None

    def has(pts: list[dict[str, Any]], want: dict[str, Any]) -> bool:
        return any(all(_equal(p.get(k), v) for k, v in want.items()) for p in pts)

    def explain(cell: Cell, host: str) -> str | None:
        exp = cell.experiment
        if exp not in full_pts:
            return f"{spec_path.name} has no experiment '{exp}'"
        names, pts = full_pts[exp]
        want = {k: v for k, v in cell.join_params().items() if k in names}
        if not has(pts, want):
            what = ", ".join(f"{k}={v}" for k, v in want.items())
            return f"{spec_path.name} runs no {exp} point with {what}"
        if prof_pts is not None and (exp not in prof_pts or not has(prof_pts[exp][1], want)):
            return f"left out by profile {profile}"
        return None

    return explain


def build_report(
    campaign: str,
    *,
    results: Path | None = None,
    published_dir: Path = PUBLISHED_DIR,
    spec_path: Path | None = None,
    extra_markdown: str = "",
    measured_markdown: str = "",
) -> Report | None:
    """The comparison report of a campaign, or None when no published file names it."""
    published = published_for_campaign(campaign, published_dir)
    if not published:
        return None
    from socketlab.store import Store, store_path

    path = store_path(campaign, results)
    campaign_dir = path.parent
    if path.exists():
        with Store(path, create=False) as store:
            frame = store.metrics_frame(campaign)
            runs = store.runs(campaign)
    else:
        frame, runs = [], []
    hosts = host_facts(campaign_dir, runs)
    last = _read_json(campaign_dir / "last-run.json") or {}  # written by `orchestrate run`
    profile = last.get("profile")
    if spec_path is None and last.get("spec"):
        spec_path = Path(last["spec"]) if Path(last["spec"]).is_file() else None
    if spec_path is None:
        guess = paths.EXPERIMENTS / f"{campaign}.yaml"
        spec_path = guess if guess.is_file() else None
    skips = _skips(spec_path, hosts, profile)
    stored = run_dicts(campaign_dir, runs)
    explain = explainer(spec_path, profile)
    quiet = probe_quiet.load()  # recorded quiet probe rates per core class
    rows = [
        row
        for pub in published
        for row in compare(pub, frame, hosts, skips, stored, explain, profile, quiet)
    ]
    builds: dict[str, dict[str, Any]] = {}
    for r in runs:
        if isinstance(r.build, dict):
            key = str(r.build.get("binary_sha256") or r.build.get("source_hash") or r.build)
            builds.setdefault(
                key,
                {
                    k: r.build.get(k)
                    for k in ("name", "source_hash", "compiler", "flags", "binary_sha256")
                    if k in r.build
                }
                or dict(r.build),
            )
    # applied or not, the plan's CPU sets, and verify.yml's result (socketlab.report.isolation)
    isolation = {host: isolation_text(entry) for host, entry in hosts.items() if entry}
    provenance = {
        "spec": str(spec_path) if spec_path else None,
        "spec_sha256": next((r.spec_sha256 for r in runs if r.spec_sha256), None),
        "profile": profile,
        "store": str(path),
        "runs": dict(Counter(r.status for r in runs)),
        "builds": list(builds.values()),
        "isolation": isolation,
        # each host's probe reference and how many runs it marked (socketlab.report.interference)
        "interference": interference_summary(stored, probe_quiet.recorded_references(hosts, quiet)),
    }
    # the planner's predictions of the stages each host measured (socketlab.report.stage_plan)
    from socketlab.report.stage_plan import planner_markdown

    planned = planner_markdown(
        campaign_dir.parent, campaign, sorted(set(hosts) | {r.host for r in runs})
    )
    return Report(
        campaign=campaign,
        published=published,
        rows=rows,
        hosts=hosts,
        provenance=provenance,
        generated=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        extra_markdown="\n".join(x for x in (extra_markdown.strip(), planned) if x),
        measured_markdown=measured_markdown,
    )


def write_report(
    report: Report, out_dir: Path, formats: tuple[str, ...] = ("md", "html")
) -> dict[str, Path]:
    """Write report.md / report.html into ``out_dir``, and the plain measured tables, when the
    report has them, as measured.md beside (report.md names it); return format -> path."""
    from socketlab.report.render import MEASURED_FILE, render

    out_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    for f in formats:
        p = out_dir / f"report.{f}"
        p.write_text(render(report, f))
        written[f] = p
    if report.measured_markdown:
        written["measured"] = out_dir / MEASURED_FILE
        written["measured"].write_text(report.measured_markdown)
    return written
