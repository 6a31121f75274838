"""The host-class matrix (issue 24 item 7): every host-dependent report test runs each of its
branches on any machine, by judging the same stored runs under recorded host facts.

A verdict depends on the host's facts as much as on the measured values: the same run reads
"reproduced per core" under the facts of a guest with the published core, "core class differs"
under an AMD guest's, and "conditions differ: workers 1 vs 90" under the published host's. So a
test that reads the verdict of a real run builds its report once with the facts of the machine
it ran on (the real host's branch) and once per recorded host below, with that host's facts in
``hosts/<host>.json`` where ``orchestrate run`` wrote the real ones.

| name | facts | class against the published Xeon 6975P-C |
|---|---|---|
| gnr-kvm-2vcpu | RECORDED: shared/recorded/gnr-kvm-2vcpu/host_facts.json (its copy in tests/published/recorded/) | the published core on 2 vCPUs |
| zen4-kvm-2vcpu | SYNTHESIZED (tests/fixtures/topology/make_fixtures.py; no Zen 4 guest was at hand) | another core class |
| c8i-metal-48xl | SYNTHESIZED from the published host's documentation (make_fixtures.py) | the published host |

``classify`` says which class facts belong to, from the published host's core class written in
the published file (vendor, family, per-core L1d and L2) and the model name, so the real host's
branch is named the same way as the recorded ones.
"""  # noqa: E501 (a table)

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from socketlab.spec.hosts import host_entry
from socketlab.topology import topology_from_snapshot

REPO = Path(__file__).resolve().parents[2]
TOPOLOGY = REPO / "tests" / "fixtures" / "topology"

PUBLISHED_HOST = "published host"  #: the published model and core count
PUBLISHED_CORE = "published core"  #: the published core class on fewer cores (a small guest)
OTHER_CORE = "other core"  #: another vendor, family or per-core cache size

#: recorded host -> (host_facts.py snapshot, class)
RECORDED: dict[str, tuple[Path, str]] = {
    "gnr-kvm-2vcpu": (
        REPO / "tests/published/recorded/gnr-kvm-2vcpu/host_facts.json",
        PUBLISHED_CORE,
    ),
    "zen4-kvm-2vcpu": (TOPOLOGY / "zen4-kvm-2vcpu.json", OTHER_CORE),
    "c8i-metal-48xl": (TOPOLOGY / "c8i-metal-48xl.json", PUBLISHED_HOST),
}
#: what a host-dependent test is parametrized with: the machine it runs on, then each recorded one
REAL = "real host"
HOSTS = (REAL, *RECORDED)


def snapshot(name: str) -> dict[str, Any]:
    return json.loads(RECORDED[name][0].read_text())


def entry(name: str, spec) -> dict[str, Any]:
    """hosts/<host>.json as `orchestrate run` would have written it on ``name`` for ``spec``."""
    return host_entry(topology_from_snapshot(snapshot(name)), spec)


def _kib(caches: Mapping[str, Any], level: str) -> int | None:
    size = (caches.get(level) or {}).get("size_bytes")
    return int(size) // 1024 if size is not None else None


def classify(topology: Mapping[str, Any], published_host: Mapping[str, Any]) -> str:
    """PUBLISHED_HOST, PUBLISHED_CORE or OTHER_CORE for topology facts (Topology.facts())."""

    def short(model: str) -> str:
        return " ".join(
            w for w in model.replace("(R)", "").split() if w.lower() not in ("intel", "processor")
        ).lower()

    if short(str(topology.get("cpu_model", ""))) == short(str(published_host["model"])):
        if topology.get("cores") == published_host["cores"]:
            return PUBLISHED_HOST
        return PUBLISHED_CORE
    core = published_host["core"]
    caches = topology.get("caches") or {}
    same = (
        topology.get("vendor") == core["vendor"]
        and str(topology.get("family")) == str(core["family"])
        and _kib(caches, "L1d") == core["l1d_kib"]
        and _kib(caches, "L2") == core["l2_kib"]
    )
    return PUBLISHED_CORE if same else OTHER_CORE


def judged_as(results: Path, campaign: str, name: str, spec, into: Path) -> Path:
    """A results folder whose campaign holds the same store, run log and spec as ``results``
    but each host's facts replaced by recorded host ``name``'s (REAL: ``results`` itself).
    The runs' raw folders stay where they are (the store names them by absolute path)."""
    if name == REAL:
        return results
    src, dst = results / campaign, into / campaign
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("runs", ".scratch"))
    for facts in (dst / "hosts").glob("*.json"):
        facts.write_text(json.dumps(entry(name, spec), indent=1, sort_keys=True, default=str))
    return into


def host_topology(results: Path, campaign: str) -> dict[str, Any]:
    """The topology facts the report of ``results`` judges by (its one host)."""
    (path,) = (results / campaign / "hosts").glob("*.json")
    return json.loads(path.read_text())["topology"]


# ---- the instruction sets a native test sees (SL_CPU_HIDE, native/common/cpu.c) ----
#: An AVX2-only guest (Zen 3) for the ISA branches: SYNTHESIZED as zen4-kvm-2vcpu's flags without
#: AVX-512 (no Zen 3 facts were recorded).
AVX2_ONLY = "zen3-kvm-2vcpu"
#: what an ISA-dependent native test is parametrized with: this machine, each recorded host, and
#: the AVX2-only guest
ISA_HOSTS = (REAL, *RECORDED, AVX2_ONLY)
# SL_CPU_HIDE's names and the /proc/cpuinfo flags each takes away, as cpu.c hides them
_HIDE_GROUPS = {
    "avx2": {"avx2"},
    "avx512": {"avx512f", "avx512bw", "avx512_bf16"},
    "amx": {"amx_tile", "amx_bf16"},
}


#: the /proc/cpuinfo flags each unit the native binaries check needs (native/common/cpu.c's
#: sl_have_*; the AVX2 kernels also use FMA)
UNITS = {
    "avx2": {"avx2", "fma"},
    "avx512": {"avx512f", "avx512bw"},
    "avx512_bf16": {"avx512f", "avx512bw", "avx512_bf16"},
    "amx": {"amx_tile", "amx_bf16"},
}


def has(flags: set[str], unit: str) -> bool:
    """Whether a host with these CPU flags runs ``unit`` (a key of UNITS)."""
    return UNITS[unit] <= flags


def proc_cpu_flags() -> set[str]:
    """This machine's /proc/cpuinfo flags."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def isa_flags(name: str) -> set[str]:
    """The CPU flags of ISA_HOSTS entry ``name``."""
    if name == REAL:
        return proc_cpu_flags()
    if name == AVX2_ONLY:
        return isa_flags("zen4-kvm-2vcpu") - _HIDE_GROUPS["avx512"] - _HIDE_GROUPS["amx"]
    return set(snapshot(name)["cpuinfo"]["flags"].split())


def cpu_hide(flags: set[str]) -> str | None:
    """The SL_CPU_HIDE under which this machine's native binaries see the instruction sets of a
    host with ``flags``; None where this machine lacks part of one that host has (features can
    only be taken away), so that host's branch can't run here."""
    real, hide = proc_cpu_flags(), []
    for name, group in _HIDE_GROUPS.items():
        has = group & flags
        if has and (has != group or not group <= real):
            return None
        if not has and group & real:
            hide.append(name)
    return ",".join(hide)


def as_host(host: str) -> tuple[set[str], str]:
    """(CPU flags, SL_CPU_HIDE) to run the native binaries as on ISA_HOSTS entry ``host``;
    skips the calling test where this machine lacks part of that host's instruction sets."""
    flags = isa_flags(host)
    hide = cpu_hide(flags)
    if hide is None:
        pytest.skip(f"{host}: this machine lacks part of its instruction sets")
    print(f"branch: {host} (SL_CPU_HIDE={hide!r})")
    return flags, hide


def run_hidden(
    binary: Path, hide: str, *args: object, timeout: float = 120
) -> subprocess.CompletedProcess:
    """binary ARGS with SL_CPU_HIDE=hide (native/common/cpu.c: run as if the CPU lacked them)."""
    env = {**os.environ, "SL_CPU_HIDE": hide}
    argv = [str(binary), *map(str, args)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)


def assert_unsupported(proc, context: object) -> None:
    """A native binary's answer where the host lacks what it needs: exit 3, one line saying
    "not available on this host" (docs/benchmarks.md, "Output contract")."""
    assert proc.returncode == 3 and "not available on this host" in proc.stderr, (
        context,
        proc.stderr,
    )
    assert proc.stderr.count("\n") == 1, proc.stderr
