"""`orchestrate plan SPEC --assume-host FACTS`: size a campaign on a controller without hosts,
from a recorded host (the c8i.metal-48xl snapshot) and the spec's own durations."""

from __future__ import annotations

import json
from pathlib import Path

from socketlab.cli import main
from tests.support.campaign import write_spec

REPO = Path(__file__).resolve().parents[1]
C8I = REPO / "tests" / "fixtures" / "topology" / "c8i-metal-48xl.json"


def test_campaign_oct_on_the_c8i_snapshot_prints_every_point_and_a_duration(capsys):
    assert (
        main(["plan", str(REPO / "experiments" / "campaign-oct.yaml"), "--assume-host", str(C8I)])
        == 0
    )
    out = capsys.readouterr().out
    assert "host c8i-metal-48xl" in out
    assert (
        main(
            [
                "plan",
                str(REPO / "experiments" / "campaign-oct.yaml"),
                "--assume-host",
                f"gnr={C8I}",
                "--json",
            ]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert list(doc["hosts"]) == ["gnr"] and doc["total_runs"] == len(doc["points"]) > 100
    # every point printed: one line per run in the text form, with the 90 worker cores
    lines = [x for x in out.splitlines() if x.startswith("  ") and ": " in x and "rep " in x]
    assert len(lines) == doc["total_runs"]
    assert any("--cpus 2-31,34-63,66-95" in x for x in lines)
    est = doc["estimate"]
    assert est["source"] == "spec" and est["seconds"] > est["timed_seconds"] > 0
    assert "estimated time: at most " in out


def test_spec_estimate_is_seconds_times_reps_plus_overheads(tmp_path, capsys):
    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "campaign": "est",
            "builds": {"native": {"source": ".", "target": "build/cc/ladder"}},
            "defaults": {"repetitions": 2, "timeout_s": 10},
            "experiments": [
                {
                    "name": "timed",
                    "build": "native",
                    "command": "build/cc/ladder --size {{ s }} --seconds 2 --reps 3",
                    "sweep": {"matrix": {"s": ["16K", "64K"]}},
                    "metrics": {"parser": "jsonl"},
                },
                {
                    "name": "steps",
                    "command": "build/cc/ladder --steps 100",
                    "repetitions": 1,
                    "metrics": {"parser": "jsonl"},
                },
            ],
        },
    )
    assert main(["plan", str(spec), "--assume-host", str(C8I), "--json"]) == 0
    est = json.loads(capsys.readouterr().out)["estimate"]
    # 2 sizes x 2 reps x (2 s x 3 reps + 2 s) + one build (120 s); the step-counted run adds
    # its timeout (10 s) + 2 s to the ceiling only
    assert est["timed_seconds"] == 4 * (6 + 2) + 120
    assert est["seconds"] == 4 * (6 + 2) + 120 + (10 + 2)
    assert est["unknown_runs"] == 1


def test_bad_assumed_host_is_one_line_exit_2(tmp_path, capsys):
    spec = REPO / "experiments" / "quickstart.yaml"
    (tmp_path / "x.json").write_text('{"a": 1}')
    (tmp_path / "y.json").write_text("not json")
    for arg, want in [
        (str(tmp_path / "nope.json"), "No such file"),
        (str(tmp_path / "y.json"), "not JSON"),
        (str(tmp_path / "x.json"), "socketlab-host-facts/1"),
    ]:
        assert main(["plan", str(spec), "--assume-host", arg]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"orchestrate: error: --assume-host {arg}: ") and want in err, err
        assert "\n" not in err
