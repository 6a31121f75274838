"""Expansion: spec + host facts -> run points. Facts come from recorded host snapshots
(tests/fixtures/topology) through the real topology reader and isolation planner."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest

from socketlab.errors import PlanError, SpecError
from socketlab.spec import kinds
from socketlab.spec.expand import expand_points, host_profile_hash
from socketlab.spec.hosts import host_entry, isolation_applied
from socketlab.spec.load import load_spec
from socketlab.topology import topology_from_snapshot

FIXTURES = Path(__file__).parent / "fixtures" / "topology"
HEADER = "schema_version: 1\ncampaign: t\n"


def snapshot(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def spec_of(tmp_path: Path, body: str):
    path = tmp_path / "spec.yaml"
    path.write_text(HEADER + body)
    return load_spec(path)


def entry(spec, fixture: str = "c8i-metal-48xl") -> dict:
    return host_entry(topology_from_snapshot(snapshot(fixture)), spec)


def test_isolation_facts_reach_templates(tmp_path):
    spec = spec_of(
        tmp_path,
        """\
experiments:
  - name: stage
    command: ["./stage", "--threads", "{{ facts.workers | length }}",
              "--helpers", "{{ facts.siblings_list }}", "--first", "{{ facts.workers[0] }}"]
    cpus: "{{ facts.workers_by_node['1'] | cpulist }}"
    env: {HK: "{{ facts.housekeeping_list }}", MODEL: "{{ facts.cpu_model }}"}
""",
    )
    plan = expand_points(spec, {"c8i": entry(spec)})
    (point,) = plan.points
    assert point.argv == (
        "./stage",
        "--threads",
        "90",
        "--helpers",
        "98-127,130-159,162-191",
        "--first",
        "2",
    )
    assert point.cpus == "34-63"
    assert point.env == {
        "HK": "0-1,32-33,64-65,96-97,128-129,160-161",
        "MODEL": "INTEL(R) XEON(R) 6975P-C",
    }


def test_missing_isolation_plan_is_explained(tmp_path):
    spec = spec_of(
        tmp_path,
        """\
isolation: {housekeeping_per_node: 64}
experiments:
  - {name: a, command: "true", cpus: "{{ facts.workers_list }}"}
""",
    )
    host = entry(spec)
    assert host["isolation"] is None and host["isolation_error"]
    with pytest.raises(SpecError) as info:
        expand_points(spec, {"c8i": host})
    message = str(info.value)
    assert message.startswith(f"{spec.path}:5: experiments[0].cpus: undefined fact ")
    assert "facts.workers_list" in message and "no isolation plan" in message


def test_undefined_fact_names_file_line_field_and_suggests(tmp_path):
    spec = spec_of(tmp_path, "experiments:\n  - {name: a, command: 'echo {{ facts.siblngs }}'}\n")
    with pytest.raises(SpecError) as info:
        expand_points(spec, {"c8i": entry(spec)})
    assert str(info.value) == (
        f"{spec.path}:4: experiments[0].command: undefined fact 'facts.siblngs' on host c8i "
        "(did you mean 'facts.siblings'?)"
    )


@pytest.mark.parametrize(
    "value",
    ["1; rm -rf /", "$(touch /tmp/pwned)", "`id`", "a b  c", "'quoted'", '"dq"', "x\ny", "*", "&&"],
)
def test_shell_metacharacters_stay_one_argv_element(tmp_path, value):
    values = json.dumps([value])
    spec = spec_of(
        tmp_path,
        f"""\
experiments:
  - name: as-string
    command: "echo --value={{{{ v }}}} {{{{ v }}}}"
    env: {{V: "{{{{ v }}}}"}}
    sweep: {{matrix: {{v: {values}}}}}
  - name: as-list
    command: [echo, "{{{{ v }}}}"]
    sweep: {{matrix: {{v: {values}}}}}
""",
    )
    plan = expand_points(spec, {"c8i": entry(spec)})
    as_string, as_list = plan.points
    assert as_string.argv == ("echo", f"--value={value}", value)
    assert as_string.env == {"V": value}
    assert as_list.argv == ("echo", value)
    assert as_string.params == {"v": value}


ORDER_SPEC = """\
experiments:
  - name: a
    command: "echo {{{{ x }}}}"
    sweep: {{matrix: {{x: [1, 2, 3]}}}}
    repetitions: 2
    warmup: {warmup}
    order: {order}
    seed: {seed}
"""


def sequence(tmp_path, order, warmup=0, seed=0):
    spec = spec_of(tmp_path, ORDER_SPEC.format(order=order, warmup=warmup, seed=seed))
    return [(p.params["x"], p.repetition) for p in expand_points(spec, {"h": entry(spec)}).points]


def test_sequential_order(tmp_path):
    assert sequence(tmp_path, "sequential") == [(1, 0), (1, 1), (2, 0), (2, 1), (3, 0), (3, 1)]


def test_interleaved_order_with_warmups(tmp_path):
    assert sequence(tmp_path, "interleaved", warmup=2) == [
        (1, -2),
        (1, -1),
        (1, 0),
        (2, -2),
        (2, -1),
        (2, 0),
        (3, -2),
        (3, -1),
        (3, 0),
        (1, 1),
        (2, 1),
        (3, 1),
    ]


def test_shuffled_order_is_seeded(tmp_path):
    runs = [sequence(tmp_path, "shuffled", warmup=1, seed=s) for s in (7, 7, 8)]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]
    measured = [r for r in runs[0] if r[1] >= 0]
    assert sorted(measured) == sequence(tmp_path, "sequential")
    # every point's warm-up comes right before its first measured run
    first = {}
    for i, (x, rep) in enumerate(runs[0]):
        if rep >= 0 and x not in first:
            first[x] = i
            assert runs[0][i - 1] == (x, -1)
    assert Counter(rep for _, rep in runs[0])[-1] == 3


def test_repetitions_override(tmp_path):
    spec = spec_of(tmp_path, ORDER_SPEC.format(order="sequential", warmup=0, seed=0))
    plan = expand_points(spec, {"h": entry(spec)}, repetitions=4)
    assert plan.counts() == {"h": {"a": {"points": 3, "runs": 12, "warmups": 0}}}
    with pytest.raises(PlanError):
        expand_points(spec, {"h": entry(spec)}, repetitions=0)


def test_unmet_requirements_skip_with_reason_or_fail(tmp_path):
    spec = spec_of(
        tmp_path,
        """\
experiments:
  - {name: amx, command: "true", requires: {flags: [amx_tile, amx_bf16]}}
  - {name: isolated, command: "true", requires: {isolation: true}}
  - {name: plain, command: "true"}
""",
    )
    hosts = {"xeon": entry(spec), "here": entry(spec, "this-machine")}
    plan = expand_points(spec, hosts)
    ran = Counter((p.host, p.experiment) for p in plan.points)
    assert ran == {("xeon", "amx"): 1, ("xeon", "plain"): 1, ("here", "plain"): 1}
    reasons = {(s.host, s.experiment): s.reason for s in plan.skipped}
    assert reasons[("here", "amx")] == "host here lacks CPU flags amx_tile, amx_bf16"
    assert reasons[("xeon", "isolated")] == "isolation is not applied on host xeon"
    assert reasons[("here", "isolated")].startswith("isolation is not applied on host here")

    applied = dict(hosts["xeon"], isolation_applied=True)
    assert {p.experiment for p in expand_points(spec, {"xeon": applied}).points} == {
        "amx",
        "isolated",
        "plain",
    }

    failing = spec_of(
        tmp_path,
        "experiments:\n  - {name: a, command: x, requires: {flags: [amx_tile], on_unmet: fail}}\n",
    )
    with pytest.raises(PlanError, match=r"spec.yaml:4: experiments\[0\].requires: host here"):
        expand_points(failing, {"here": entry(failing, "this-machine")})


def test_isolation_applied_reads_the_workqueue_mask(tmp_path):
    spec = spec_of(tmp_path, "experiments:\n  - {name: a, command: x}\n")
    host = entry(spec)
    assert host["isolation_applied"] is False  # the fixture's mask has every CPU
    isolated = dict(host["topology"], workqueue_cpumask=host["isolation"]["workqueue_mask"])
    assert isolation_applied(isolated, host["isolation"]) is True
    assert isolation_applied(isolated, None) is False


def test_host_profile_ignores_volatile_facts(tmp_path):
    spec = spec_of(tmp_path, "experiments:\n  - {name: a, command: x}\n")
    host = entry(spec)
    moved = json.loads(json.dumps(host))
    for irq in moved["topology"]["irqs"]:
        irq["effective"] = "5"
    # knobs are state that the before/after fingerprint watches, not identity
    moved["topology"].update(
        thp="never",
        numa_balancing=1 - (host["topology"]["numa_balancing"] or 0),
        workqueue_cpumask="1",
        hugepages_2m={"0": 64},
    )
    moved["topology"]["cpufreq"]["governors"] = {"powersave": moved["topology"]["cpu_online"]}
    assert moved["topology"] != host["topology"]
    other = dict(host, isolation_applied=True)
    rebuilt = json.loads(json.dumps(host))
    rebuilt["topology"]["cores"] += 1  # different hardware: a different profile
    hosts = (host, moved, other, rebuilt)
    profiles = [expand_points(spec, {"h": h}).profile_hash("h") for h in hosts]
    assert profiles[0] == profiles[1] != profiles[2]
    assert profiles[3] not in (profiles[0], profiles[2])
    assert profiles[0] == host_profile_hash(expand_points(spec, {"h": host}).host_profiles["h"])


def test_points_per_host_in_host_order_with_inventory_vars(tmp_path):
    spec = spec_of(
        tmp_path,
        """\
experiments:
  - {name: a, command: "echo {{ host }} {{ vars.rack }} {{ experiment }} {{ campaign }}"}
""",
    )
    hosts = {"b": dict(entry(spec), vars={"rack": "r2"}), "a": dict(entry(spec), vars={"rack": 1})}
    plan = expand_points(spec, hosts)
    assert [p.argv for p in plan.points] == [
        ("echo", "b", "r2", "a", "t"),
        ("echo", "a", "1", "a", "t"),
    ]
    assert plan.hosts == ("b", "a")


def test_default_fills_a_missing_inventory_variable(tmp_path):
    # the size-checking filter wrapper must not touch the Undefined it is given: `default`
    # exists for exactly that value (a hasattr on it raised "undefined inventory variable")
    spec = spec_of(
        tmp_path,
        """\
experiments:
  - name: a
    command: ["echo", "{{ vars.x | default(3) }}", "{{ vars.tier | default('t0') | upper }}",
              "{{ facts.nope | default('') | center(4) }}|"]
""",
    )
    hosts = {"a": dict(entry(spec), vars={}), "b": dict(entry(spec), vars={"x": 7, "tier": "t2"})}
    assert [p.argv for p in expand_points(spec, hosts).points] == [
        ("echo", "3", "T0", "    |"),
        ("echo", "7", "T2", "    |"),
    ]
    bare = spec_of(tmp_path, 'experiments:\n  - {name: a, command: "echo {{ vars.x }}"}\n')
    with pytest.raises(SpecError, match="undefined inventory variable 'vars.x' on host a"):
        expand_points(bare, {"a": dict(entry(bare), vars={})})


class _NoIO:
    """Audit hook that records I/O events while armed (hooks can't be removed, so it disarms)."""

    installed = False
    armed = False
    seen: list[str] = []

    @classmethod
    def hook(cls, event, args):
        if cls.armed and event.split(".")[0] in ("open", "subprocess", "socket", "os", "shutil"):
            cls.seen.append(event)

    @classmethod
    def install(cls):
        if not cls.installed:
            sys.addaudithook(cls.hook)
            cls.installed = True


def test_expansion_is_pure(tmp_path):
    spec = spec_of(tmp_path, ORDER_SPEC.format(order="shuffled", warmup=1, seed=3))
    host = entry(spec)
    _NoIO.install()
    _NoIO.seen.clear()
    _NoIO.armed = True
    try:
        first = expand_points(spec, {"h": host})
        second = expand_points(spec, {"h": host})
    finally:
        _NoIO.armed = False
    assert _NoIO.seen == []
    assert first.points == second.points


def test_serving_kind_plugs_in_through_the_registry(tmp_path, monkeypatch):
    """A kind is a render function in the registry; this one stands in for socketlab.serve's."""

    def render(point: kinds.PointContext) -> kinds.Rendered:
        block = point.experiment.extra["serving"]
        arm = block["arms"][0]["name"]
        return kinds.Rendered(argv=("server", str(point.params["c"])), extra={"arm": arm})

    monkeypatch.setitem(kinds._HANDLERS, "serving", kinds.KindHandler(render))
    spec = spec_of(
        tmp_path,
        """\
experiments:
  - name: s
    kind: serving
    serving: {arms: [{name: tiny, command: srv}], load: {concurrency: [1]}}
    sweep: {matrix: {c: [1, 4]}}
""",
    )
    plan = expand_points(spec, {"h": entry(spec)})
    assert [(p.kind, p.argv, p.extra) for p in plan.points] == [
        ("serving", ("server", "1"), {"arm": "tiny"}),
        ("serving", ("server", "4"), {"arm": "tiny"}),
    ]


def test_serving_without_its_block_is_rejected(tmp_path):
    with pytest.raises(SpecError, match=r"experiments\[0\]: missing required key 'serving'"):
        spec_of(tmp_path, "experiments:\n  - {name: s, kind: serving}\n")
