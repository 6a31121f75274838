"""Pure parts of serving: placement, the spec block's checks, the samplers' parsers."""

from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path

import pytest

from socketlab.errors import PlanError, SpecError
from socketlab.hostside import procstats
from socketlab.serve import dram, placement
from socketlab.spec.expand import expand_points
from socketlab.spec.load import load_spec

FIXTURES = Path(__file__).parent / "fixtures" / "serve"
# a 2-socket-like host: 8 CPUs, SMT siblings 4-7 of 0-3; housekeeping core 0 (+ sibling 4)
FACTS = {
    "cpu_online": "0-7",
    "housekeeping": [0, 4],
    "workers": [1, 2, 3],
    "siblings": [5, 6, 7],
    "isolation_applied": True,
}


def test_placements_from_the_isolation_plan():
    w = placement.resolve("workers", FACTS)
    assert (w.server, w.client, w.client_shared) == ([1, 2, 3], [0, 4], False)
    ws = placement.resolve("workers+siblings", FACTS)
    assert ws.server == [1, 2, 3, 5, 6, 7] and ws.client == [0, 4]
    a = placement.resolve("all", FACTS)
    assert a.server == list(range(8)) and a.client_shared and a.client == list(range(8))
    assert placement.resolve("all", FACTS, explicit="2-3").facts()["server_cpus"] == "2-3"
    assert placement.resolve("workers", FACTS, client="7").client == [7]


def test_placement_errors_name_host_and_reason():
    with pytest.raises(PlanError, match="host h1: placement 'workers' needs the isolation"):
        placement.resolve("workers", {"cpu_online": "0-3"}, host="h1")
    with pytest.raises(PlanError, match="not all online"):
        placement.resolve("all", FACTS, explicit="6-9")
    with pytest.raises(PlanError, match="unknown placement"):
        placement.resolve("siblings", FACTS)


def spec_file(tmp_path, serving: str, sweep: str = "") -> Path:
    p = tmp_path / "spec.yaml"
    p.write_text(
        "schema_version: 1\ncampaign: t\nexperiments:\n  - name: s\n    kind: serving\n"
        + textwrap.indent(sweep, "    ")
        + "    serving:\n"
        + textwrap.indent(textwrap.dedent(serving), "      ")
    )
    return p


ARMS = """\
arms:
  - {name: a, command: [srv, --port, "{port}"], placement: workers}
  - {name: b, command: "srv --port {port} --threads {{ facts.workers | length }}",
     placement: workers+siblings}
load: {concurrency: [1, 4], rates: [2.5]}
"""


def test_one_point_per_arm_with_resolved_cpus(tmp_path):
    spec = load_spec(spec_file(tmp_path, ARMS + "baseline: b\n"))
    plan = expand_points(
        spec,
        {"h": {"topology": {"cpu_online": "0-7"}, "isolation": FACTS, "isolation_applied": True}},
    )
    assert [p.params for p in plan.points] == [
        {"arm": "a", "placement": "workers"},
        {"arm": "b", "placement": "workers+siblings"},
    ]
    a, b = plan.points
    assert (a.kind, a.cpus, b.cpus) == ("serving", "1-3", "1-3,5-7")
    assert a.argv == ("srv", "--port", "{port}")
    assert b.argv == ("srv", "--port", "{port}", "--threads", "3")
    levels = [lv for lv in a.extra["serving"]["levels"]]
    assert levels == [
        {"concurrency": 1, "rate": None},
        {"concurrency": 4, "rate": None},
        {"concurrency": None, "rate": 2.5},
    ]
    assert a.extra["placement"]["client_cpus"] == "0,4"
    assert a.key("", "p") != b.key("", "p")


@pytest.mark.parametrize(
    "extra, sweep, message",
    [
        ("baseline: c\n", "", "serving.baseline: 'c' is not an arm"),
        (
            "arms:\n  - {name: a, command: [x]}\n  - {name: a, command: [y]}\nload: {concurrency: "
            "[1]}\n",
            "",
            "duplicate arm name 'a'",
        ),
        ("", "sweep: {matrix: {arm: [x]}}\n", "parameter 'arm' is set by the serving kind"),
        ("prompts: random\n", "", "prompts"),
    ],
)
def test_spec_errors_name_the_field(tmp_path, extra, sweep, message):
    body = extra if extra.startswith("arms") else ARMS + extra
    with pytest.raises(SpecError) as err:
        load_spec(spec_file(tmp_path, body, sweep))
    text = str(err.value)
    assert message in text and "spec.yaml:" in text and "\n" not in text


def test_placement_error_at_plan_time_is_a_spec_error(tmp_path):
    spec = load_spec(spec_file(tmp_path, ARMS))
    with pytest.raises(SpecError, match=r"serving.arms\[0\]: host h: placement 'workers'"):
        expand_points(spec, {"h": {"topology": {"cpu_online": "0-1"}, "isolation": None}})


def test_perf_csv_gives_bytes():
    got = dram.parse_perf_csv((FIXTURES / "perf-stat-imc.csv").read_text())
    assert got["read_bytes"] == 3072 * 2**20 + 1_000_000 * 64
    assert got["write_bytes"] == 1024 * 2**20


def test_dram_unavailable_reason_here_or_events(tmp_path):
    fake = tmp_path / "devices"
    (fake / "cpu").mkdir(parents=True)
    assert dram.unavailable(fake).startswith("not available on this host: no uncore_imc PMU")
    ev = fake / "uncore_imc_0" / "events"
    ev.mkdir(parents=True)
    for name in ("cas_count_read", "cas_count_read.scale", "cas_count_write", "clockticks"):
        (ev / name).write_text("event=0x4\n")
    assert dram.imc_events(fake) == [
        "uncore_imc_0/cas_count_read/",
        "uncore_imc_0/cas_count_write/",
    ]


def test_procstats_samples_this_process_tree():
    assert procstats.thread_group("plow-cpu-12") == "plow-cpu"
    assert procstats.thread_group("tokio-runtime-w") == "tokio-runtime-w"
    assert procstats.thread_group("python3") == "python"
    s = procstats.Sampler(os.getpid())
    first = s.sample()
    assert first["pss_bytes"] > 1 << 20 and first["threads"] >= 1
    # spend 0.1 s of this thread's CPU between samples (bounded in wall time on a busy box)
    cpu0, deadline = time.thread_time(), time.monotonic() + 20
    while time.thread_time() - cpu0 < 0.1 and time.monotonic() < deadline:
        sum(i * i for i in range(20_000))
    spent = time.thread_time() - cpu0
    s.sample()
    summary = s.summary()
    assert summary["peak_pss_bytes"] >= first["pss_bytes"]
    # only the CPU used since the first sample counts, at clock-tick resolution
    tick = 1 / summary["clock_ticks_per_s"]
    assert spent - 2 * tick <= sum(summary["cpu_s_by_group"].values()) <= spent + 0.5, summary


def test_generator_health_marks_invalid_levels():
    from socketlab.serve.config import Level
    from socketlab.serve.runkind import health

    ok = {"p99_queue_client_ms": 0.4, "output_lens": [16, 16], "errors": ["", ""], "completed": 2}
    assert health(Level(rate=2.0), ok, 16) is None
    late = ok | {"p99_queue_client_ms": 4.0}
    assert health(Level(rate=2.0), late, 16) is None  # allowed: 1% of a 500 ms mean gap
    assert "fell behind (dispatch delay p99 4.00 ms > 1.00 ms)" in health(
        Level(rate=50.0), late, 16
    )
    assert health(Level(concurrency=4), late, 16) is None  # closed loop: pool wait, not lateness
    short = ok | {"output_lens": [16, 9]}
    assert "1 of 2 outputs are shorter than 90%" in health(Level(concurrency=1), short, 16)
    failed = ok | {"output_lens": [16, 0], "errors": ["", "HTTP 500"]}
    assert health(Level(concurrency=1), failed, 16) is None  # failures are reported as such
