"""Real output of a 2-vCPU Granite Rapids guest, stored as runs of campaign-oct.

``tests/published/recorded/gnr-kvm-2vcpu/`` is a copy of ``shared/recorded/gnr-kvm-2vcpu/`` (see
its README.md): the host facts snapshot (collectors/host_facts.py; the hypervisor masks the model
name as "Intel(R) Xeon(R) Processor", family 6 model 167) and each native binary's JSON-lines
stdout at the campaign's sizes, one pinned core (cpu 0), 1 s x 3 reps. ``fill_results`` parses
those outputs with the runner's parser (``socketlab.parse.parse_output``), stores each as the run
of the campaign-oct point it is (experiment and parameters as campaign-oct.yaml names them), with
the meta record in the run's ``meta.json`` and the host facts in ``hosts/<host>.json``, as
``orchestrate run`` leaves them. Nothing is made up: a value changes only through ``scale`` (a
recorded file name, optionally ``:metric``, and a factor) and a meta field only through
``meta``, which the tests use to move one value or shorten the recorded runs.

``probe`` adds the interference probe's readings (socketlab.report.interference) to every run,
from the recorded noise series of the same guest class (recorded/gnr-kvm-2vcpu-2026-12-03/
noise-series-2026-12-03.csv: direct `ladder` runs of the probe's three units on one core, 2 s
each, 12 rounds): "quiet" brackets each run with rounds 8 and 6 (AMX stream 132.9 and 122.2
GB/s), and the files named in ``disturbed`` get round 9 before the run (AMX stream 95.9 GB/s,
0.72x of the campaign's best) instead. The units are those the probe exercises; the series ran
them for 2 s, the probe for a few tens of ms.

Not stored: gemv (recorded at 1,536 x 1,536 and 256 x 1,536, not campaign-oct's 2,560-column
points), the 512 KiB ladder size (not a campaign point) and the 2-core runs.

    python -m tests.published.gnr_recorded RESULTS
    orchestrate report campaign-oct --results RESULTS   # then
"""

from __future__ import annotations

import csv
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from socketlab.parse import parse_output
from socketlab.spec.points import ParserSpec
from socketlab.store import COMPLETE, RunRecord, Store, store_path
from socketlab.topology import topology_from_snapshot

RECORDED = Path(__file__).resolve().parent / "recorded" / "gnr-kvm-2vcpu"
NOISE = RECORDED.parent / "gnr-kvm-2vcpu-2026-12-03" / "noise-series-2026-12-03.csv"
#: the probe's units, by the kernel that ran them in the noise series (1 MiB, THP)
PROBE_UNITS = {
    "avx512-read": "l2-read",
    "amx-bf16-stream": "amx-stream",
    "avx512-bf16-gemv": "bf16-dot",
}
QUIET_ROUNDS, DISTURBED_ROUND = (8, 6), 9
CAMPAIGN = "campaign-oct"
HOST = "gnr-kvm"
MIB_BY_SIZE = {"1M": 1.0, "1331K": 1.3, "1536K": 1.5, "3M": 3, "64M": 64}


def host_entry(snapshot: Path = RECORDED / "host_facts.json") -> dict[str, Any]:
    """hosts/<host>.json as `orchestrate run` writes it: the topology facts of the snapshot."""
    topo = topology_from_snapshot(json.loads(snapshot.read_text())).facts()
    return {"topology": topo, "isolation": None, "isolation_applied": False}


def points(folder: Path = RECORDED) -> list[tuple[Path, str, dict[str, Any]]]:
    """(recorded file, campaign-oct experiment, its parameters) for every stored file."""
    out: list[tuple[Path, str, dict[str, Any]]] = []
    for path in sorted(folder.glob("*.jsonl")):
        parts = path.name.removesuffix(".jsonl").split(".")
        binary, rest = parts[0], parts[1:]
        if binary == "ladder" and rest[0].endswith("-compute") and rest[1:] == ["1core"]:
            exp = "compute-amx" if rest[0].startswith("amx") else "compute"
            out.append((path, exp, {"kernel": rest[0]}))
        elif binary == "ladder" and len(rest) == 3 and rest[1] in MIB_BY_SIZE:
            exp = "ladder-amx" if rest[0].startswith("amx") else "ladder"
            out.append(
                (
                    path,
                    exp,
                    {"kernel": rest[0], "pages": rest[2], "mib_per_core": MIB_BY_SIZE[rest[1]]},
                )
            )
        elif binary == "exchange" and rest == ["pingpong"]:
            out.append((path, "latency", {"target": "next-core"}))
        elif binary == "exchange":
            # one NUMA node of 2 cores: every scope runs the same 2 participants; the quick
            # profile's points are one-node (and all-nodes for hier, published only there)
            scope = "all-nodes" if rest[0] == "hier" else "one-node"
            out.append((path, "exchange", {"scope": scope, "mode": rest[0]}))
        elif binary == "kvstream" and rest == ["16k"]:
            out.append((path, "kvstream", {"layer": "E2B L4", "context": 16384}))
    return out


def _changed(text: str, name: str, scale: dict[str, float], meta: dict[str, Any]) -> str:
    """The recorded output of file ``name``, its metric values multiplied as ``scale`` says
    (key ``file`` or ``file:metric``) and its meta record updated with ``meta``."""
    lines = []
    for line in text.splitlines():
        rec = json.loads(line) if line.strip() else None
        if isinstance(rec, dict) and rec.get("type") == "metric":
            factor = scale.get(f"{name}:{rec.get('name')}", scale.get(name, 1.0))
            if factor != 1.0:
                rec["value"] = rec["value"] * factor
                line = json.dumps(rec)
        elif isinstance(rec, dict) and rec.get("type") == "meta" and meta:
            line = json.dumps({**rec, **meta})
        lines.append(line)
    return "\n".join(lines) + "\n"


def probe_reading(round_no: int, cpu: str = "0") -> dict[str, Any]:
    """One round of the recorded noise series as a probe reading on ``cpu``."""
    rows = [
        r
        for r in csv.DictReader(NOISE.open())
        if int(r["round"]) == round_no and r["kernel"] in PROBE_UNITS and r["bytes"] == "1048576"
    ]
    assert len(rows) == 3, (round_no, rows)
    h, m, sec = (int(x) for x in rows[0]["utc"].split(":"))
    return {
        "at": 1796290000.0 + 3600 * h + 60 * m + sec,  # 2026-12-03, as the series' clock
        "units": {PROBE_UNITS[r["kernel"]]: {cpu: float(r["gbps"])} for r in rows},
        "rate_units": {PROBE_UNITS[r["kernel"]]: "GB/s" for r in rows},
        "steal_ticks": {cpu: int(rows[0]["steal_ticks"])},
    }


def probe_record(disturbed: bool) -> dict[str, Any]:
    before = DISTURBED_ROUND if disturbed else QUIET_ROUNDS[0]
    return {"before": probe_reading(before), "after": probe_reading(QUIET_ROUNDS[1])}


def fill_results(
    results: Path,
    scale: dict[str, float] | None = None,
    host: str = HOST,
    facts: dict[str, Any] | None = None,
    meta: dict[str, Any] | None = None,
    profile: str | None = None,
    probe: str | None = None,
    disturbed: tuple[str, ...] = (),
) -> Path:
    """A results folder holding the recorded runs; ``scale`` maps a recorded file name (or
    ``file:metric``) to a factor on its values; ``meta`` updates every meta record; ``facts``
    replaces the host facts entry; ``profile`` is recorded in last-run.json as the profile the
    campaign ran with; ``probe="quiet"`` adds probe readings to every run, disturbed for the
    files named in ``disturbed`` (module doc). Returns the campaign dir."""
    scale = scale or {}
    campaign_dir = results / CAMPAIGN
    (campaign_dir / "hosts").mkdir(parents=True, exist_ok=True)
    (campaign_dir / "hosts" / f"{host}.json").write_text(json.dumps(facts or host_entry()))
    with Store(store_path(CAMPAIGN, results)) as store:
        for path, experiment, params in points():
            stdout = _changed(path.read_text(), path.name, scale, meta or {})
            parsed = parse_output([ParserSpec("jsonl")], stdout)
            assert not parsed.errors, (path, parsed.errors)
            key = hashlib.sha256(
                f"{experiment}:{json.dumps(params, sort_keys=True)}".encode()
            ).hexdigest()[:16]
            raw = campaign_dir / "runs" / key
            raw.mkdir(parents=True, exist_ok=True)
            (raw / "stdout").write_text(stdout)
            (raw / "meta.json").write_text(json.dumps(parsed.meta, indent=1))
            meta = parsed.meta[0] if parsed.meta else {}
            store.add_run(
                RunRecord(
                    run_key=key,
                    campaign=CAMPAIGN,
                    experiment=experiment,
                    host=host,
                    repetition=0,
                    params=params,
                    status=COMPLETE,
                    cpus=str(meta.get("cpus", "")),
                    build={"compiler": meta.get("compiler"), "flags": meta.get("flags")},
                    raw_dir=str(raw),
                    extra={"probe": probe_record(path.name in disturbed)} if probe else {},
                ),
                parsed.metrics,
            )
    if profile:
        (campaign_dir / "last-run.json").write_text(json.dumps({"profile": profile}))
    return campaign_dir


NOISY = RECORDED.parent / "gnr-kvm-2vcpu-2026-12-03" / "ladder-noisy"


def noisy_results(into: Path) -> Path:
    """The recorded disturbed window (ladder-noisy: campaign-oct's ladder and ladder-amx
    experiments run as campaign 'ladder-check', README.md beside it) as a campaign-oct results
    folder: its store with the runs' campaign relabelled campaign-oct, and its host facts."""
    import shutil
    import sqlite3

    dst = into / CAMPAIGN
    shutil.copytree(NOISY, dst)
    for path in dst.rglob("*"):
        path.chmod(0o644 if path.is_file() else 0o755)
    with sqlite3.connect(dst / "store.sqlite") as db:
        db.execute("UPDATE runs SET campaign = ?", (CAMPAIGN,))
    return into


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.published.gnr_recorded RESULTS_DIR")
    print(fill_results(Path(sys.argv[1])))
