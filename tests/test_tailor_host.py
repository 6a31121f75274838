"""`orchestrate tailor` for real on this machine: two sysbench workloads in their own cgroups
whose load changes over time; the controller's sets follow, never overlap while both are busy,
never include housekeeping CPUs; `stop` and SIGKILL + `--restore` put every cpuset back.

The managed CPUs are the first two physical cores (on this 2-vCPU VM: CPUs 0-1, and no CPU is
left for housekeeping, which the test prints); a workload that goes idle is parked, so the
other can grow from one core to two. Cgroups are created as socketlab-test-<pid>-<name> in
the hierarchy the host has (v2 with cpuset, else v1 cpuset + cpuacct) and removed afterwards,
as are the load processes (by PID), even when a test fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from socketlab.cpulist import format_cpulist, parse_cpulist
from socketlab.topology import read_topology
from tests.support.procs import alive, wait_for

ORCHESTRATE = str(Path(sys.executable).parent / "orchestrate")
ROOT = Path("/sys/fs/cgroup")
PERIOD = 0.5
#: samples a change of demand may take to show: the window (3) plus the shrink hysteresis (2),
#: plus 3: the sample in progress when the load changed, the one that sees it, and one spare
#: for a loaded machine.
N_SAMPLES = 8

pytestmark = pytest.mark.root


def cgroup_version() -> int | None:
    controllers = ROOT / "cgroup.controllers"
    if controllers.exists() and "cpuset" in controllers.read_text().split():
        return 2
    if (ROOT / "cpuset" / "cpuset.cpus").exists() and (ROOT / "cpuacct").is_dir():
        return 1
    return None


def skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "not available on this host: needs root to create cgroups"
    if cgroup_version() is None:
        return "not available on this host: no cpuset cgroup controller (v2 or v1)"
    if not shutil.which("sysbench"):
        return "not available on this host: sysbench is missing (scripts/system-deps.sh)"
    if len(read_topology("/").cores) < 2:
        return "not available on this host: fewer than 2 physical cores"
    return None


needs_host = pytest.mark.skipif(skip_reason() is not None, reason=str(skip_reason()))


class Host:
    """Test cgroups and the load processes in them; everything is undone in close()."""

    def __init__(self, names: list[str], originals: dict[str, str]) -> None:
        self.version = cgroup_version()
        self.loads: list[subprocess.Popen] = []
        self.dirs: dict[str, list[Path]] = {}
        self.paths: dict[str, str] = {}
        for name in names:
            rel = f"socketlab-test-{os.getpid()}-{name}"
            self.paths[name] = rel
            if self.version == 2:
                dirs = [ROOT / rel]
            else:
                dirs = [ROOT / "cpuset" / rel, ROOT / "cpuacct" / rel]
            for d in dirs:
                d.mkdir()
            self.dirs[name] = dirs
            cpuset = dirs[0]
            if self.version == 1:
                (cpuset / "cpuset.mems").write_text((ROOT / "cpuset" / "cpuset.mems").read_text())
            (cpuset / "cpuset.cpus").write_text(originals[name])

    def cpus(self, name: str) -> str:
        return (self.dirs[name][0] / "cpuset.cpus").read_text().strip()

    def load(self, name: str, threads: int) -> subprocess.Popen:
        """sysbench busy threads, born inside the workload's cgroup(s)."""
        procs_files = [str(d / "cgroup.procs") for d in self.dirs[name]]

        def enter() -> None:
            for f in procs_files:
                with open(f, "w") as fh:
                    fh.write(str(os.getpid()))

        proc = subprocess.Popen(
            ["sysbench", "cpu", f"--threads={threads}", "--time=120", "run"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=enter,
        )
        self.loads.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)  # by its PID: our own child
        proc.wait(timeout=10)

    def close(self) -> None:
        for proc in self.loads:
            self.stop(proc)
        for dirs in self.dirs.values():
            for d in dirs:
                deadline = time.monotonic() + 10
                while d.exists():
                    try:
                        d.rmdir()
                    except OSError:
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.1)


def managed_cpus() -> tuple[list[int], list[int]]:
    """All threads of the first two physical cores, and every other online CPU."""
    t = read_topology("/")
    cores = sorted(t.cores, key=lambda c: c.cpus[0])[:2]
    managed = sorted(c for core in cores for c in core.cpus)
    others = sorted(set(t.online) - set(managed))
    return managed, others


def tailor(state: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [ORCHESTRATE, "tailor", "--state-dir", str(state), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def timeline(state: Path) -> list[dict]:
    path = state / "tailor.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def controller_pid(state: Path) -> int | None:
    try:
        pid = int((state / "tailor.pid").read_text())
    except (OSError, ValueError):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return pid if b"tailor.py" in cmdline and alive(pid) else None


@contextlib.contextmanager
def controlled(state: Path, host: Host, managed: list[int], *extra: str):
    args = [
        "start",
        "--cpus",
        format_cpulist(managed),
        "--period",
        str(PERIOD),
        "--window",
        "3",
        "--shrink-after",
        "2",
        "--max-seconds",
        "90",
        *extra,
    ]
    for name, rel in host.paths.items():
        args += ["--workload", f"{name}={rel}"]
    try:
        proc = tailor(state, *args)
        assert proc.returncode == 0, proc.stderr
        yield json.loads(proc.stdout)["started"]
    finally:
        pid = controller_pid(state)
        if pid is not None:  # a failed test: still stop it by its PID, then undo what it left
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: not alive(pid), 10, "the controller to exit")
        tailor(state, "restore")


def busy_sets(record: dict) -> dict[str, set[int]]:
    return {
        n: set(parse_cpulist(c)) for n, c in record["sets"].items() if n not in record["parked"]
    }


@needs_host
def test_controller_follows_demand_and_stop_restores(tmp_path):
    managed, housekeeping = managed_cpus()
    tpc = read_topology("/").threads_per_core
    print(
        f"host branch: cgroup v{cgroup_version()}, managed CPUs {format_cpulist(managed)}, "
        f"housekeeping {format_cpulist(housekeeping) or 'none (2 CPUs: all are managed)'}, "
        f"{tpc} thread(s) per core"
    )
    # Originals unlike anything the controller writes (it starts with one core each, a first).
    originals = {"a": str(managed[-1]), "b": format_cpulist(managed)}
    host = Host(["a", "b"], originals)
    state = tmp_path / "state"
    marks: list[tuple[float, dict[str, int]]] = []  # (when, expected cores) per phase
    try:
        with controlled(state, host, managed):
            wait_for(lambda: len(timeline(state)) >= 1, 10, "the first assignment")
            # Phase 1: one core of load each.
            host.load("a", tpc)
            b1 = host.load("b", tpc)
            marks.append((time.time(), {"a": 1, "b": 1}))
            time.sleep(N_SAMPLES * PERIOD + 1.5)
            # Phase 2: b idles, a grows to two cores.
            host.stop(b1)
            a2 = host.load("a", tpc)
            marks.append((time.time(), {"a": 2, "b": 0}))
            time.sleep(N_SAMPLES * PERIOD + 1.5)
            # Phase 3: a back to one core, b busy again.
            host.stop(a2)
            host.load("b", tpc)
            marks.append((time.time(), {"a": 1, "b": 1}))
            time.sleep(N_SAMPLES * PERIOD + 1.5)
            marks.append((time.time(), {}))
            # The cpusets in force now are the controller's, not the originals.
            assert {n: host.cpus(n) for n in originals} != originals
            stop = tailor(state, "stop")
            assert stop.returncode == 0, (stop.stdout, stop.stderr)
            assert not (state / "tailor-state.json").exists()
        assert {n: host.cpus(n) for n in originals} == originals, "stop did not restore"
    finally:
        host.close()
    records = [r for r in timeline(state) if "sets" in r]
    print(
        tail := subprocess.run(
            [ORCHESTRATE, "tailor", "--state-dir", str(state), "timeline"],
            capture_output=True,
            text=True,
        ).stdout
    )
    assert tail.strip()
    managed_set = set(managed)
    for r in records:
        sets = busy_sets(r)
        for n, cpus in sets.items():
            assert cpus <= managed_set and not cpus & set(housekeeping), (r["sample"], n, cpus)
        names = sorted(sets)
        for i, x in enumerate(names):
            for y in names[i + 1 :]:
                assert not sets[x] & sets[y], f"sample {r['sample']}: {x} and {y} overlap"
    # Each phase's demand is reached within N_SAMPLES periods and holds to the phase's end.
    for (start, want), (end, _) in zip(marks, marks[1:], strict=False):
        phase = [r for r in records if start <= r["ts"] <= end]
        assert len(phase) > N_SAMPLES, f"only {len(phase)} samples in a phase"
        hits = [i for i, r in enumerate(phase) if r["cores"] == want]
        assert hits and hits[0] <= N_SAMPLES, (want, [r["cores"] for r in phase])
        assert phase[-1]["cores"] == want, (want, [r["cores"] for r in phase])
        own = {n: len(c) for n, c in busy_sets(phase[-1]).items()}
        assert own == {n: k * tpc for n, k in want.items() if k}, phase[-1]["sets"]
    assert timeline(state)[-1]["event"] == "stop"


@needs_host
def test_sigkill_then_restore_puts_every_cpuset_back(tmp_path):
    managed, _ = managed_cpus()
    tpc = read_topology("/").threads_per_core
    originals = {"a": str(managed[-1]), "b": format_cpulist(managed)}
    host = Host(["a", "b"], originals)
    state = tmp_path / "state"
    try:
        with controlled(state, host, managed) as pid:
            host.load("a", tpc)
            wait_for(lambda: len(timeline(state)) >= 3, 20, "three samples")
            assert controller_pid(state) == pid
            before = {n: host.cpus(n) for n in originals}
            assert before != originals, "the controller changed nothing"
            # A running controller is not undone behind its back.
            refused = tailor(state, "--restore")
            assert refused.returncode == 2 and "still running" in refused.stderr
            assert len(refused.stderr.strip().splitlines()) == 1
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: not alive(pid), 10, "the controller to die")
            assert (state / "tailor-state.json").exists()
            assert {n: host.cpus(n) for n in originals} == before  # nothing undid it
            proc = tailor(state, "--restore")
            assert proc.returncode == 0, proc.stderr
            restored = json.loads(proc.stdout)["restored"]
            assert {n: v["now"] for n, v in restored.items()} == originals
        assert {n: host.cpus(n) for n in originals} == originals
        assert not (state / "tailor-state.json").exists()
    finally:
        host.close()


@needs_host
def test_missing_cgroup_is_one_line(tmp_path):
    proc = tailor(tmp_path, "start", "--workload", "a=socketlab-test-does-not-exist", "--cpus", "0")
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("orchestrate: error: workload a: cgroup ")
    assert "socketlab-test-does-not-exist does not exist" in line
    assert not (tmp_path / "tailor-state.json").exists()
