"""`orchestrate run` end to end on localhost: build, run, store, resume, faults."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from socketlab.cli import main
from socketlab.store import Store, store_path
from tests.support.campaign import EMIT, PY, local_inventory, ok_count, stored, write_spec
from tests.support.procs import alive
from tests.support.shell import bait_untouched, shell_bait


def orchestrate(*argv: str) -> int:
    argv = [str(a) for a in argv]
    if argv[0] == "run" and "--inventory" not in argv:
        argv += ["--inventory", str(local_inventory(Path(argv[1]).parent))]
    return main(argv)


def test_build_run_store_resume_and_report(tmp_path, capsys):
    keep, evil = shell_bait(tmp_path)
    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "campaign": "local-e2e",
            "builds": {"native": {"source": ".", "target": "build/cc/ladder"}},
            "defaults": {"timeout_s": 60, "repetitions": 2, "collectors": ["proc_peakmem"]},
            "experiments": [
                {
                    "name": "ladder",
                    "build": "native",
                    "command": "build/cc/ladder --kernel avx2-read --size {{ size }} --seconds "
                    "0.05 --reps 1 --timeout 20",
                    "sweep": {"matrix": {"size": ["16K", "64K"]}},
                    "metrics": {"parser": "jsonl"},
                    "sanity": {"required_metrics": ["bw_total"]},
                },
                {
                    "name": "argv",
                    "command": [PY, "-c", EMIT, "{{ word }}"],
                    "sweep": {"matrix": {"word": [evil, "plain"]}},
                    "repetitions": 1,
                },
            ],
        },
    )
    results = tmp_path / "results"
    assert orchestrate("run", spec, "--results", results, "--plain") == 0
    first = stored(results, "local-e2e")
    assert len(first) == 6 and {r.status for r in first.values()} == {"ok"}

    # provenance on every run: spec hash, host profile, fingerprints, raw files
    for r in first.values():
        assert r.spec_sha256 and r.host_profile and r.fingerprint_before["kernel"]
        assert r.fingerprint_before == r.fingerprint_after
        raw = Path(r.raw_dir)
        assert (raw / "stdout").exists() and (raw / "stderr").exists()
        assert json.loads((raw / "run.json").read_text())["run_key"] == r.run_key
        assert json.loads((raw / "facts.json").read_text())["topology"]
        assert (raw / "collectors" / "proc_peakmem.jsonl").exists()
    # the build manifest is stamped on each ladder run
    manifests = [r.build for r in first.values() if r.experiment == "ladder"]
    assert len({m["build_hash"] for m in manifests}) == 1
    manifest = manifests[0]
    assert manifest["compiler"] and manifest["source_hash"] and not manifest["cached"]
    assert list(manifest["binaries"]) == ["build/cc/ladder"]
    built = tmp_path / "work" / "localhost" / "builds" / manifest["build_hash"] / "build/cc/ladder"
    assert manifest["binaries"]["build/cc/ladder"] == hashlib.sha256(built.read_bytes()).hexdigest()
    # the flags in the manifest are those the binary was compiled with (its meta record)
    ladder_run = next(r for r in first.values() if r.experiment == "ladder")
    meta = json.loads((Path(ladder_run.raw_dir) / "meta.json").read_text())
    assert manifest["cflags"] and manifest["cflags"] == meta[0]["flags"]

    # shell metacharacters: one literal argv element, nothing created or removed
    evil_run = next(r for r in first.values() if r.params.get("word") == evil)
    assert json.loads((Path(evil_run.raw_dir) / "stdout").read_text().splitlines()[0]) == [evil]
    assert bait_untouched(tmp_path, keep)

    # metrics: the binary's and the collector's, with parameters and parser versions
    with Store(store_path("local-e2e", results)) as store:
        frame = store.metrics_frame("local-e2e")
    ladder = frame[frame["experiment"] == "ladder"]
    assert set(ladder["size"]) == {"16K", "64K"}
    assert {"jsonl/1", "collector:proc_peakmem/1"} <= set(ladder["parser"])
    assert (ladder[ladder["metric"] == "peak_tree_rss"]["value"] > 0).all()

    # resume: nothing is run again
    assert orchestrate("run", spec, "--results", results, "--plain") == 0
    again = stored(results, "local-e2e")
    assert {k: (r.started, r.attempts) for k, r in again.items()} == {
        k: (r.started, r.attempts) for k, r in first.items()
    }

    # --dry-run shows the new repetitions (ladder 2 -> 3, argv 1 -> 3) and runs nothing
    capsys.readouterr()
    assert orchestrate("run", spec, "--results", results, "--repetitions", "3", "--dry-run") == 0
    out = capsys.readouterr().out
    assert "host localhost: 6 runs to do" in out and "6 runs already stored" in out
    assert len(stored(results, "local-e2e")) == 6

    # --repetitions adds runs; the build comes from the host's cache
    assert orchestrate("run", spec, "--results", results, "--repetitions", "3", "--plain") == 0
    more = stored(results, "local-e2e")
    assert len(more) == 12 and set(first) < set(more)
    new = [r for k, r in more.items() if k not in first and r.experiment == "ladder"]
    assert new and all(r.build["cached"] for r in new)

    # status, report and export read the store
    capsys.readouterr()
    assert orchestrate("status", "local-e2e", "--results", results) == 0
    assert "ladder on localhost: ok 6" in capsys.readouterr().out
    assert orchestrate("report", "local-e2e", "--results", results) == 0
    report = capsys.readouterr().out
    assert "## ladder" in report and "bw_total" in report and "median" in report
    assert (results / "local-e2e" / "report.md").exists()
    for fmt in ("csv", "jsonl", "parquet"):
        out_file = tmp_path / f"m.{fmt}"
        assert (
            orchestrate(
                "export", "local-e2e", "--format", fmt, "-o", out_file, "--results", results
            )
            == 0
        )
        assert out_file.stat().st_size > 0
    import pandas as pd

    with Store(store_path("local-e2e", results)) as store:
        assert len(pd.read_parquet(tmp_path / "m.parquet")) == store.metric_count("local-e2e")


def test_timeouts_failures_and_rerun_failed(tmp_path, capsys):
    bg = tmp_path / "bg.pid"
    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "campaign": "local-faults",
            "experiments": [
                {
                    "name": "hang",
                    "timeout_s": 1,
                    "command": ["sh", "-c", f"sleep 60 & echo $! > {bg}; wait"],
                },
                {"name": "exit3", "command": [PY, "-c", "raise SystemExit(3)"]},
                {
                    "name": "nometric",
                    "command": [PY, "-c", "print('hello')"],
                    "metrics": {"parser": "jsonl"},
                    "sanity": {"required_metrics": ["bw"]},
                },
                {
                    "name": "selfcheck",
                    "command": [PY, "-c", "print('self-check FAILED')"],
                    "sanity": {"must_not_match": ["(?i)self-check failed"]},
                },
            ],
        },
    )
    results = tmp_path / "results"
    assert orchestrate("run", spec, "--results", results, "--plain") == 1
    by_exp = {r.experiment: r for r in stored(results, "local-faults").values()}
    assert by_exp["hang"].status == "timeout" and "killed after 1 s" in by_exp["hang"].reason
    pid = int(bg.read_text())
    assert not alive(pid)
    assert by_exp["exit3"].status == "failed" and "exit code 3" in by_exp["exit3"].reason
    assert "required metrics missing: bw" in by_exp["nometric"].reason
    assert "must_not_match" in by_exp["selfcheck"].reason

    # a plain rerun skips them; --rerun-failed runs them again (same keys, attempt 2)
    assert orchestrate("run", spec, "--results", results, "--plain") == 0
    assert {r.attempts for r in stored(results, "local-faults").values()} == {1}
    assert orchestrate("run", spec, "--results", results, "--plain", "--rerun-failed") == 1
    after = stored(results, "local-faults")
    assert len(after) == 4 and {r.attempts for r in after.values()} == {2}


def test_sigkill_mid_campaign_then_resume(tmp_path):
    points = 8
    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "campaign": "local-kill",
            "experiments": [
                {
                    "name": "slow",
                    "command": [PY, "-c", "import time, sys; time.sleep(0.4); " + EMIT, "{{ i }}"],
                    "sweep": {"matrix": {"i": list(range(points))}},
                    "metrics": {"parser": "jsonl"},
                }
            ],
        },
    )
    results = tmp_path / "results"
    argv = [
        sys.executable,
        "-m",
        "socketlab.cli",
        "run",
        str(spec),
        "--results",
        str(results),
        "--plain",
        "--inventory",
        str(local_inventory(tmp_path)),
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    db = store_path("local-kill", results)
    try:
        deadline = time.monotonic() + 120
        done = 0
        while time.monotonic() < deadline and proc.poll() is None:
            done = ok_count(db)
            if done >= 3:
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the campaign ended before we could kill it"
        assert 3 <= done < points
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    before = stored(results, "local-kill")
    assert 3 <= len(before) < points and {r.status for r in before.values()} == {"ok"}

    assert orchestrate("run", spec, "--results", results, "--plain") == 0
    after = stored(results, "local-kill")
    assert len(after) == points  # none missing
    assert {r.status for r in after.values()} == {"ok"}
    for key, r in before.items():  # no completed run redone
        assert (after[key].started, after[key].attempts) == (r.started, 1)
    with sqlite3.connect(db) as raw:  # none duplicated
        per_run = raw.execute("SELECT run_key, count(*) FROM metrics GROUP BY run_key").fetchall()
        keys = raw.execute("SELECT count(*), count(DISTINCT run_key) FROM runs").fetchone()
    assert keys == (points, points)
    assert sorted(n for _, n in per_run) == [1] * points
    assert sorted(json.loads(json.dumps(r.params))["i"] for r in after.values()) == list(
        range(points)
    )


THP_DEFRAG = Path("/sys/kernel/mm/transparent_hugepage/defrag")


@pytest.mark.root
def test_drift_during_a_run_marks_it_invalid(tmp_path, kernel_knobs_lock):
    """The command changes a host knob (THP defrag); the test restores it afterwards."""
    if os.geteuid() != 0 or not THP_DEFRAG.exists() or not os.access(THP_DEFRAG, os.W_OK):
        pytest.skip("needs root and a writable transparent_hugepage/defrag")
    original = THP_DEFRAG.read_text().split("[", 1)[1].split("]", 1)[0]
    other = "never" if original != "never" else "madvise"
    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "campaign": "local-drift",
            "experiments": [
                {
                    "name": "flip",
                    "command": [PY, "-c", f"open({str(THP_DEFRAG)!r}, 'w').write({other!r})"],
                }
            ],
        },
    )
    results = tmp_path / "results"
    try:
        assert orchestrate("run", spec, "--results", results, "--plain") == 1
    finally:
        THP_DEFRAG.write_text(original)
    (run,) = stored(results, "local-drift").values()
    assert run.status == "invalid"
    assert f"thp_defrag: {original} -> {other}" in run.reason


def test_a_second_orchestrator_leaves_a_busy_host_alone(tmp_path, capsys):
    from socketlab.execute.local import LocalExecutor

    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "campaign": "local-busy",
            "experiments": [{"name": "e", "command": [PY, "-c", "0"]}],
        },
    )
    holder = LocalExecutor("localhost", workroot=str(tmp_path / "work"))  # same host, same lock
    holder.lock({"campaign": "someone-else"})
    try:
        assert orchestrate("run", spec, "--results", tmp_path / "results", "--plain") == 1
    finally:
        holder.unlock()
    err = capsys.readouterr().err
    assert "localhost: error: localhost: host is busy" in err and "someone-else" in err
    assert stored(tmp_path / "results", "local-busy") == {}
    assert orchestrate("run", spec, "--results", tmp_path / "results", "--plain") == 0


def test_json_progress_lines_on_stdout(tmp_path, capsys):
    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "campaign": "local-json",
            "experiments": [
                {
                    "name": "e",
                    "command": [PY, "-c", "0", "{{ n }}"],
                    "sweep": {"matrix": {"n": [1, 2]}},
                }
            ],
        },
    )
    capsys.readouterr()
    assert orchestrate("run", spec, "--results", tmp_path / "results", "--json") == 0
    out = capsys.readouterr().out
    events = [json.loads(line) for line in out.splitlines()]  # nothing else on stdout
    assert [e["event"] for e in events if e["event"] != "message"] == [
        "start",
        "point",
        "done",
        "point",
        "done",
        "finish",
    ]
    assert events[0]["total"] == 2 and events[0]["already_done"] == 0
    done = [e for e in events if e["event"] == "done"]
    assert [d["progress"] for d in done] == ["1/2", "2/2"] and done[-1]["eta_s"] == 0
    assert {d["status"] for d in done} == {"ok"} and done[0]["point"] == "e[n=1]#rep0"
    assert events[-1]["statuses"] == {"ok": 2}


def test_rich_progress_shows_labels_literally(capsys):
    from socketlab.execute.progress import RichReporter

    reporter = RichReporter()
    reporter.start("c", 2, 1, 0)
    reporter.point_started("h", "e[size=16K]#rep0")
    reporter.point_done("h", "e[size=16K]#rep0", "failed", "exit code 3 [x]", 0.1)
    reporter.point_done("h", "e[size=1M]#rep0", "ok", "", 0.1)
    reporter.finish({"statuses": {"failed": 1, "ok": 1}})
    err = capsys.readouterr().err
    # rich markup would swallow "[size=16K]" and "[x]" if the labels were not escaped
    assert "h: e[size=16K]#rep0 failed exit code 3 [x]" in err
    assert "done: failed 1, ok 1" in err and reporter.done == 2


def test_warmups_run_first_and_are_never_stored(tmp_path):
    calls = tmp_path / "calls"
    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "campaign": "local-warm",
            "defaults": {"warmup": 1, "repetitions": 2, "collectors": ["proc_peakmem"]},
            "experiments": [
                {
                    "name": "e",
                    "sweep": {"matrix": {"n": [1, 2]}},
                    "command": [
                        PY,
                        "-c",
                        "import sys; open(sys.argv[1], 'a').write(sys.argv[2] + '\\n')",
                        str(calls),
                        "{{ n }}",
                    ],
                }
            ],
        },
    )
    results = tmp_path / "results"
    assert orchestrate("run", spec, "--results", results, "--plain") == 0
    # sequential order: each point's warm-up right before its two measured runs
    assert calls.read_text().split() == ["1", "1", "1", "2", "2", "2"]
    kept = stored(results, "local-warm")
    assert sorted((r.params["n"], r.repetition) for r in kept.values()) == [
        (1, 0),
        (1, 1),
        (2, 0),
        (2, 1),
    ]
    # a third repetition: one warm-up again before it, per point; the done runs stay
    assert orchestrate("run", spec, "--results", results, "--plain", "--repetitions", "3") == 0
    assert calls.read_text().split()[6:] == ["1", "1", "2", "2"]
    assert len(stored(results, "local-warm")) == 6
    # nothing of any run (warm-ups included) is left in the host's work folder
    assert list((tmp_path / "work" / "localhost" / "runs").iterdir()) == []


def test_host_lost_during_cleanup_keeps_the_stored_run(tmp_path, monkeypatch):
    """Fault injection: the host goes away right after a run was stored (while its run folder
    is being removed). The stored 'ok' run must stand; the remaining points fail as unreachable.
    (An SSH outage at that moment once overwrote a stored ok run with 'failed'.)"""
    from socketlab.execute import HostUnreachable
    from socketlab.execute.local import LocalExecutor

    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "campaign": "lost-cleanup",
            "experiments": [
                {
                    "name": "emit",
                    "command": [PY, "-c", EMIT, "{{ i }}"],
                    "sweep": {"matrix": {"i": [0, 1, 2]}},
                    "metrics": {"parser": "jsonl"},
                }
            ],
        },
    )
    real_request = LocalExecutor._request
    gone = {"now": False}

    def request(self, req, deadline_s):  # every request to the host's agent
        if gone["now"]:
            raise HostUnreachable(f"{self.name}: connection lost (injected)")
        if req.get("op") == "remove" and "/runs/" in req["path"]:  # the cleanup: run stored
            gone["now"] = True
            raise HostUnreachable(f"{self.name}: connection lost (injected)")
        return real_request(self, req, deadline_s)

    monkeypatch.setattr(LocalExecutor, "_request", request)
    results = tmp_path / "results"
    orchestrate("run", spec, "--results", results, "--plain")
    runs = list(stored(results, "lost-cleanup").values())
    statuses = sorted(r.status for r in runs)
    assert len(runs) == 3 and statuses.count("ok") == 1, [(r.status, r.reason) for r in runs]
    failed = [r for r in runs if r.status != "ok"]
    assert all("unreachable" in r.reason for r in failed), [r.reason for r in failed]


def test_not_available_on_this_host_is_stored_apart_and_fails_nothing(tmp_path, capsys):
    """Exit 3 with the tools' "not available on this host: <reason>" line is a fact about the
    host (status unavailable, the reason kept, `run` exits 0); exit 3 without it, or exit 4
    with it, is still a failure."""
    say = "import sys; sys.stderr.write(sys.argv[2] + '\\n'); raise SystemExit(int(sys.argv[1]))"
    line = "frob: not available on this host: CPU lacks FROB (CPUID.7.0:EDX bit 99)"
    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "campaign": "unavail",
            "defaults": {"timeout_s": 30, "repetitions": 1},
            "experiments": [
                {"name": "lacks", "command": [PY, "-c", say, "3", line]},
            ],
        },
    )
    results = tmp_path / "results"
    assert orchestrate("run", spec, "--results", results, "--plain") == 0
    (run,) = stored(results, "unavail").values()
    assert run.status == "unavailable" and run.reason == line.split(": ", 1)[1], run.reason
    # resumed: stored, not run again (the same record, same start)
    assert orchestrate("run", spec, "--results", results, "--plain") == 0
    (again,) = stored(results, "unavail").values()
    assert again.started == run.started and again.status == "unavailable"

    for code, text, name in ((3, "frob: broke", "no-line"), (4, line, "other-code")):
        spec = write_spec(
            tmp_path / f"{name}.yaml",
            {
                "campaign": name,
                "defaults": {"timeout_s": 30, "repetitions": 1},
                "experiments": [{"name": "x", "command": [PY, "-c", say, str(code), text]}],
            },
        )
        assert orchestrate("run", spec, "--results", results, "--plain") == 1, name
        (run,) = stored(results, name).values()
        assert run.status == "failed" and run.reason.startswith(f"exit code {code}"), run.reason
