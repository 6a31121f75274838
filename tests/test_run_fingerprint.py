"""Host fingerprint and drift (on recorded trees), the peak-memory collector (on a real
process tree), and the plain report tables."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from socketlab import paths
from socketlab.hostside.fingerprint import DRIFT_KNOBS, drift, read_fingerprint
from socketlab.report.tables import experiment_tables, format_table


def fake_root(root: Path, thp: str = "always [madvise] never", irq1: str = "0-3") -> Path:
    files = {
        "proc/cpuinfo": "model name\t: Intel(R) Xeon(R) 6975P-C\nmicrocode\t: 0x10003a2\n" * 2,
        "proc/cmdline": "isolcpus=2-3 nohz_full=2-3",
        "proc/sys/kernel/osrelease": "6.8.0-1021-aws",
        "proc/sys/kernel/numa_balancing": "0",
        "proc/sys/vm/nr_hugepages": "64",
        "proc/irq/default_smp_affinity": "3",
        "proc/irq/1/smp_affinity_list": irq1,
        "proc/irq/24/smp_affinity_list": "0-1",
        "sys/devices/system/cpu/online": "0-3",
        "sys/devices/system/cpu/isolated": "2-3",
        "sys/kernel/mm/transparent_hugepage/enabled": thp,
        "sys/kernel/mm/transparent_hugepage/defrag": "[never] madvise",
        "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor": "performance",
        "sys/devices/system/cpu/cpu1/cpufreq/scaling_governor": "performance",
    }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    return root


def test_fingerprint_reads_every_knob_from_a_recorded_tree(tmp_path):
    fp = read_fingerprint(str(fake_root(tmp_path)))
    assert fp["model"] == "Intel(R) Xeon(R) 6975P-C" and fp["microcode"] == "0x10003a2"
    assert fp["thp"] == "madvise" and fp["thp_defrag"] == "never"
    assert fp["isolated"] == "2-3" and fp["numa_balancing"] == "0"
    assert fp["governor"] == "performance" and fp["kernel"].startswith("6.8.0-1021-aws")
    assert fp["nohz_full"] == "unsupported" and fp["workqueue_cpumask"] == "unsupported"
    assert set(DRIFT_KNOBS) <= set(fp)


def test_drift_names_each_changed_knob(tmp_path):
    before = read_fingerprint(str(fake_root(tmp_path / "a")))
    after = read_fingerprint(str(fake_root(tmp_path / "b", thp="[always] madvise", irq1="0")))
    changes = drift(before, after)
    assert changes[0] == "thp: madvise -> always"
    assert any(c.startswith("irq_affinity: ") for c in changes) and len(changes) == 2
    assert drift(before, before) == []


def test_live_fingerprint_script_prints_json():
    out = subprocess.run(
        [sys.executable, "-I", "-S", str(paths.COLLECTORS / "fingerprint.py")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert set(DRIFT_KNOBS) <= set(json.loads(out))


def test_peak_memory_collector_follows_the_process_tree(tmp_path):
    script = paths.COLLECTORS / "proc_peakmem.py"
    out = tmp_path / "c"
    subprocess.run(
        [sys.executable, "-I", "-S", str(script), "start", "--out", str(out)],
        check=True,
        capture_output=True,
    )
    # a parent that starts a child holding ~150 MiB: the tree's peak must include the child
    child = "import time; b = bytearray(150 * 2**20); time.sleep(0.6)"
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import subprocess, sys; subprocess.run([sys.executable, '-c', {child!r}])",
        ]
    )
    (out / "target.pid").write_text(f"{parent.pid}\n")
    parent.wait()
    stopped = subprocess.run(
        [sys.executable, "-I", "-S", str(script), "stop", "--out", str(out)],
        check=True,
        capture_output=True,
        text=True,
    )
    assert json.loads(stopped.stdout)["stopped"]
    records = [json.loads(line) for line in (out / "proc_peakmem.jsonl").read_text().splitlines()]
    metrics = {r["name"]: r for r in records if r.get("type") == "metric"}
    assert metrics["peak_tree_rss"]["unit"] == "KiB"
    assert metrics["peak_tree_rss"]["value"] > 150 * 1024
    assert not (out / "proc_peakmem.pid").exists()


def test_collector_daemon_ends_when_its_folder_is_removed(tmp_path):
    script = paths.COLLECTORS / "proc_peakmem.py"
    out = tmp_path / "gone"
    started = subprocess.run(
        [sys.executable, "-I", "-S", str(script), "start", "--out", str(out)],
        check=True,
        capture_output=True,
        text=True,
    )
    pid = json.loads(started.stdout)["pid"]
    subprocess.run(["rm", "-rf", str(out)], check=True)
    deadline = time.monotonic() + 5
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (
        not Path(f"/proc/{pid}/cmdline").exists()
        or b"proc_peakmem" not in Path(f"/proc/{pid}/cmdline").read_bytes()
    )


def test_report_tables_give_median_min_max_n_of_ok_runs():
    rows = []
    for rep, value in enumerate([4.0, 1.0, 3.0, 2.0]):
        rows.append(
            {
                "run_key": f"k{rep}",
                "campaign": "c",
                "experiment": "e",
                "host": "h",
                "repetition": rep,
                "status": "ok",
                "metric": "bw",
                "value": value,
                "unit": "GB/s",
                "parser": "jsonl/1",
                "size": "16K",
                "dim.kernel": "load",
            }
        )
    rows.append({**rows[0], "run_key": "bad", "status": "failed", "value": 1000.0})
    tables = experiment_tables(pd.DataFrame(rows))
    ((experiment, headers, body),) = tables
    assert experiment == "e"
    assert headers == ["host", "size", "metric", "unit", "kernel", "median", "min", "max", "n"]
    assert body == [["h", "16K", "bw", "GB/s", "load", "2.5", "1", "4", "4"]]
    text = format_table(headers, body)
    assert text.splitlines()[2].split() == ["h", "16K", "bw", "GB/s", "load", "2.5", "1", "4", "4"]
