"""Collectors used by campaign-oct: clocks, RAPL power, perf stat (+ the proc_noise parser).

The parsers run on recorded files: c8i-shaped outputs (tests/fixtures/collectors/c8i, made by
make_c8i.py in the tools' exact formats with the published values) and this machine's real
outputs. The collectors themselves run here for real: on this VM each degrades to a clean
"unsupported" record; RAPL also runs against a powercap tree in a temporary folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from socketlab.parse.collectors import collector_metrics
from socketlab.parse.collectors.clock_freq import parse_turbostat
from socketlab.parse.collectors.perf_stat import read_csv

REPO = Path(__file__).resolve().parents[1]
FIX = REPO / "tests" / "fixtures" / "collectors"
COLLECTORS = REPO / "collectors"


def _by_name(out):
    return {m["name"]: m for m in out.metrics}


def test_turbostat_c8i_clocks():
    out = collector_metrics("clock_freq", FIX / "c8i" / "clock_freq")
    m = _by_name(out)
    assert out.unsupported is None
    assert m["busy_mhz_mean"]["value"] == pytest.approx(3502, abs=1)
    assert m["busy_mhz_p5"]["value"] == pytest.approx(3498, abs=1)
    assert m["busy_mhz_min"]["value"] == 3497
    assert m["busy_mhz_mean"]["dims"] == {"clock_source": "turbostat", "cpus": 90}
    assert m["core_temp_max"]["value"] == 88
    assert m["turbostat_package_power"]["value"] == pytest.approx(601, abs=0.5)
    assert m["turbostat_dram_power"]["value"] == pytest.approx(19.7, abs=0.1)


def test_turbostat_table_with_short_rows():
    text = (
        "CPU\tAvg_MHz\tBusy%\tBzy_MHz\tCoreTmp\tPkgTmp\tPkgWatt\tRAMWatt\n"
        "-\t3000\t99\t3100\t70\t71\t300.5\t20.1\n"
        "2\t3000\t99\t3100\t70\t71\t300.5\t20.1\n"
        "3\t2900\t99\t2950\t72\n"
    )
    per_cpu, temps, summary = parse_turbostat(text)
    assert per_cpu == {"2": [3100.0], "3": [2950.0]}
    assert temps == [70.0, 72.0]
    assert summary["PkgWatt"] == [300.5]


def test_aperf_mperf_clocks():
    m = _by_name(collector_metrics("clock_freq", FIX / "c8i" / "clock_freq_msr"))
    assert m["busy_mhz_mean"]["value"] == pytest.approx(3502, abs=1)
    assert m["busy_mhz_min"]["value"] == pytest.approx(3497, abs=0.01)
    assert m["busy_mhz_max"]["value"] == pytest.approx(3502, abs=0.01)
    assert m["core_temp_max"]["value"] == 88 and m["core_temp_max"]["dims"]["source"] == "hwmon"


def test_rapl_c8i_power_across_a_counter_wrap():
    m = _by_name(collector_metrics("rapl_power", FIX / "c8i" / "rapl_power"))
    assert m["package_power"]["value"] == pytest.approx(601, rel=1e-6)
    assert m["dram_power"]["value"] == pytest.approx(19.7, rel=1e-6)


def test_perf_c8i_dram_sums_both_schedulers():
    out = collector_metrics("perf_stat", FIX / "c8i" / "perf_stat")
    m = _by_name(out)
    assert m["dram_read_bandwidth"]["value"] == pytest.approx(612, rel=1e-3)
    assert m["dram_read_bandwidth"]["dims"]["schedulers"] == "sch0+sch1"
    assert m["dram_write_fraction"]["value"] == pytest.approx(0.005, rel=1e-2)
    assert m["ipc"]["value"] == pytest.approx(0.45, rel=1e-3)
    # counting only SCH0 would read half: the parser must not
    text = (FIX / "c8i" / "perf_stat" / "perf_imc.csv").read_text()
    sch0 = "\n".join(ln for ln in text.splitlines() if "sch1" not in ln)
    totals, units, elapsed, _ = read_csv(sch0)
    read = sum(v for e, v in totals.items() if "read" in e) * 2**20 / elapsed / 1e9
    assert read == pytest.approx(306, rel=1e-2)


def test_proc_noise_rates():
    m = collector_metrics("proc_noise", FIX / "c8i" / "proc_noise").metrics
    rate = {x["dims"]["interrupt"]: x["value"] for x in m if x["name"] == "irq_rate"}
    assert rate == {
        "device": 0.0,
        "LOC": 100.0,
        "other": pytest.approx(2.5),
        "context-switches": 0.0,
    }
    here = collector_metrics("proc_noise", FIX / "this-machine" / "proc_noise").metrics
    assert {x["dims"]["interrupt"] for x in here} == {"device", "LOC", "other", "context-switches"}


@pytest.mark.parametrize("name", ["clock_freq", "rapl_power", "perf_stat"])
def test_recorded_unsupported_here(name):
    out = collector_metrics(name, FIX / "this-machine" / name)
    assert out.metrics == []
    assert out.unsupported


def _run(name, *args, env=None):
    return subprocess.run(
        [sys.executable, str(COLLECTORS / f"{name}.py"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


@pytest.mark.parametrize("name", ["clock_freq", "rapl_power", "perf_stat"])
def test_collector_runs_here_and_degrades_cleanly(name, tmp_path):
    """On this VM (no MSR, no cpufreq, no turbostat rights, no RAPL, no PMU): one clean record."""
    start = _run(name, "start", "--out", str(tmp_path), "--cpus", "0", "--interval", "0.2")
    assert start.returncode == 0, start.stderr
    stop = _run(name, "stop", "--out", str(tmp_path))
    assert stop.returncode == 0, stop.stderr
    records = [json.loads(x) for x in (tmp_path / f"{name}.jsonl").read_text().splitlines()]
    if any("unsupported" in r for r in records):
        assert len(records) == 1 and records[0]["source"] == name and records[0]["ts"] > 0
        assert collector_metrics(name, tmp_path).unsupported == records[0]["unsupported"]
    else:  # a host that has the source: samples and a stopped daemon
        assert not (tmp_path / f"{name}.pid").exists()


def test_rapl_collector_on_a_powercap_tree(tmp_path):
    cap = tmp_path / "powercap"
    for zone, name, energy in (
        ("intel-rapl:0", "package-0", 1_000_000),
        ("intel-rapl:0:0", "dram", 500_000),
    ):
        (cap / zone).mkdir(parents=True)
        (cap / zone / "name").write_text(name + "\n")
        (cap / zone / "energy_uj").write_text(f"{energy}\n")
        (cap / zone / "max_energy_range_uj").write_text("262143328850\n")
    out = tmp_path / "out"
    env = {**os.environ, "SOCKETLAB_POWERCAP": str(cap)}
    assert (
        _run("rapl_power", "start", "--out", str(out), "--interval", "0.1", env=env).returncode == 0
    )
    time.sleep(0.35)
    # 2 J more on the package, 0.5 J more on DRAM
    (cap / "intel-rapl:0" / "energy_uj").write_text("3000000\n")
    (cap / "intel-rapl:0:0" / "energy_uj").write_text("1000000\n")
    time.sleep(0.35)
    assert _run("rapl_power", "stop", "--out", str(out), env=env).returncode == 0
    assert not (out / "rapl_power.pid").exists()
    records = [json.loads(x) for x in (out / "rapl_power.jsonl").read_text().splitlines()]
    span = records[-1]["ts"] - records[0]["ts"]
    m = _by_name(collector_metrics("rapl_power", out))
    assert m["package_power"]["value"] == pytest.approx(2.0 / span, rel=1e-6)
    assert m["dram_power"]["value"] == pytest.approx(0.5 / span, rel=1e-6)


def test_perf_refuses_legacy_alias_on_granite_rapids(tmp_path):
    sys.path.insert(0, str(COLLECTORS))
    try:
        import perf_stat as collector
    finally:
        sys.path.remove(str(COLLECTORS))
    legacy = tmp_path / "uncore_imc_0" / "events"
    legacy.mkdir(parents=True)
    (legacy / "cas_count_read").write_text("event=0x05,umask=0xcf\n")
    (legacy / "cas_count_write").write_text("event=0x05,umask=0xf0\n")
    events, reason = collector.imc_events(str(tmp_path), cpu=(6, 173))
    assert events == "" and "refused" in reason
    events, reason = collector.imc_events(str(tmp_path), cpu=(6, 143))  # Sapphire Rapids
    assert events == "uncore_imc/cas_count_read/,uncore_imc/cas_count_write/"
    for name in ("cas_count_read_sch0", "cas_count_read_sch1"):
        (legacy / name).write_text("x\n")
    events, reason = collector.imc_events(str(tmp_path), cpu=(6, 173))
    assert "cas_count_read_sch1" in events and "cas_count_write_sch1" in events
    assert collector.imc_events(str(tmp_path / "none"))[1] == "no uncore_imc PMU"


def test_perf_csv_uncounted_events_are_noted_once():
    text = (
        "# started on Sun Nov 29 2026\n"
        "1.000,<not supported>,,cycles,0,100.00,,\n"
        "1.000,12345,,instructions,1000,100.00,,\n"
        "2.000,<not supported>,,cycles,0,100.00,,\n"
        "2.000,23456,,instructions,1000,100.00,,\n"
    )
    totals, _, last, missing = read_csv(text)
    assert totals == {"instructions": 35801.0} and last == 2.0
    assert missing == ["cycles <not supported>"]


def test_shared_daemon_rules_hold_for_every_collector(tmp_path):
    """collectors/_collector.py: one daemon per --out, usage errors before any daemon starts."""
    out = tmp_path / "c"
    started = _run("proc_peakmem", "start", "--out", str(out), "--interval", "0.2")
    assert started.returncode == 0, started.stderr
    pid = json.loads(started.stdout)["pid"]
    try:
        again = _run("proc_peakmem", "start", "--out", str(out))
        assert again.returncode == 1 and f"already running as PID {pid}" in again.stderr
    finally:
        stopped = _run("proc_peakmem", "stop", "--out", str(out))
    assert json.loads(stopped.stdout) == {"source": "proc_peakmem", "stopped": pid}
    assert not (out / "proc_peakmem.pid").exists()
    for args, message in (
        (["--interval", "0"], "--interval must be positive"),
        (["--max-seconds", "-1"], "--max-seconds must be positive"),
        (["--cpus", "3-1"], "bad CPU range '3-1'"),
    ):
        bad = _run("proc_peakmem", "start", "--out", str(tmp_path / "bad"), *args)
        assert bad.returncode == 2 and message in bad.stderr, (args, bad.stderr)
        assert not (tmp_path / "bad" / "proc_peakmem.pid").exists()
