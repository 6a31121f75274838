"""Loading specs: the schema ships and rejects unknown keys, defaults merge, errors name lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from socketlab.errors import SpecError
from socketlab.paths import SCHEMAS
from socketlab.spec.load import load_spec, split_command, sweep_points
from socketlab.spec.model import Sweep

GOOD = Path(__file__).parent / "specs" / "good"

BASE = """\
schema_version: 1
campaign: t
experiments:
  - name: a
    command: "true"
"""


def write(tmp_path: Path, text: str, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def error_of(tmp_path: Path, text: str) -> str:
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, text))
    message = str(info.value)
    assert "\n" not in message
    return message


def test_schema_is_package_data_and_valid_json_schema():
    from jsonschema import Draft202012Validator

    schema = json.loads((SCHEMAS / "spec.schema.json").read_text())
    Draft202012Validator.check_schema(schema)
    assert schema["additionalProperties"] is False


@pytest.mark.parametrize("spec", sorted(GOOD.glob("*.yaml")), ids=lambda p: p.name)
def test_good_specs_load(spec):
    loaded = load_spec(spec)
    assert loaded.experiments
    assert len(loaded.sha256) == 64


@pytest.mark.parametrize(
    "where, text, field",
    [
        ("top level", "extra: 1\n", "extra"),
        ("hosts", "hosts: {pattern: localhost, groupz: x}\n", "hosts.groupz"),
        ("isolation", "isolation: {housekeeping: 1}\n", "isolation.housekeeping"),
        ("requires", "requires: {flag: [avx2]}\n", "requires.flag"),
        ("builds", "builds: {b: {source: x, cflags: -O3}}\n", "builds.b.cflags"),
        ("defaults", "defaults: {repeat: 2}\n", "defaults.repeat"),
    ],
)
def test_unknown_keys_rejected_at_every_level(tmp_path, where, text, field):
    message = error_of(tmp_path, BASE + text)
    assert f": {field}: unknown key" in message, message


@pytest.mark.parametrize(
    "body, field",
    [
        ("    sweep: {matrix: {a: [1]}, zipp: {}}\n", "experiments[0].sweep.zipp"),
        ("    sanity: {exit_code: [0]}\n", "experiments[0].sanity.exit_code"),
        ("    metrics: {parser: jsonl, strict: true}\n", "experiments[0].metrics.strict"),
        ("    requires: {flags: [avx2], onunmet: skip}\n", "experiments[0].requires.onunmet"),
        ("    cpu: '0'\n", "experiments[0].cpu"),
    ],
)
def test_unknown_nested_experiment_keys_rejected(tmp_path, body, field):
    message = error_of(tmp_path, BASE + body)
    assert f": {field}: unknown key" in message, message


def test_error_names_file_line_and_suggests(tmp_path):
    message = error_of(tmp_path, BASE + "    timeout: 5\n")
    assert message.startswith(f"{tmp_path / 'spec.yaml'}:6: experiments[0].timeout: ")
    assert "did you mean 'timeout_s'?" in message


def test_defaults_merge_into_experiments(tmp_path):
    spec = load_spec(
        write(
            tmp_path,
            """\
schema_version: 1
campaign: merge
requires: {flags: [sse2]}
defaults:
  env: {A: "1", B: two}
  timeout_s: 12
  repetitions: 3
  collectors: [proc_noise]
  requires: {flags: [avx2], on_unmet: fail}
experiments:
  - name: one
    command: ["echo", "{{ n }}"]
    env: {B: three, C: true}
    repetitions: 5
    sweep: {matrix: {n: [1, 2]}}
    requires: {isolation: true}
  - name: two
    command: echo hi
""",
        )
    )
    one, two = spec.experiments
    assert one.env == {"A": "1", "B": "three", "C": "1"}
    assert one.origins["env.A"] == "defaults.env.A"
    assert one.origins["env.B"] == "experiments[0].env.B"
    assert (one.repetitions, two.repetitions) == (5, 3)
    assert one.timeout_s == two.timeout_s == 12.0
    assert one.collectors == ("proc_noise",)
    assert one.requires.flags == ("sse2", "avx2")
    assert one.requires.isolation is True and two.requires.isolation is False
    assert one.requires.on_unmet == "fail"
    assert two.command == ("echo", "hi")
    assert one.parsers[0].kind == "jsonl"
    assert spec.hosts == "localhost"


def test_requires_devices_merge_from_top_level_defaults_and_experiment(tmp_path):
    spec = load_spec(
        write(
            tmp_path,
            """\
schema_version: 1
campaign: dev
requires: {devices: [/proc/modules]}
defaults:
  requires: {devices: [/dev/pseudo_lock]}
experiments:
  - {name: one, command: "true", requires: {devices: [/dev/cpu/0/msr, /dev/pseudo_lock]}}
  - {name: two, command: "true", requires: {flags: [avx2]}}
""",
        )
    )
    one, two = spec.experiments
    assert one.requires.devices == ("/proc/modules", "/dev/pseudo_lock", "/dev/cpu/0/msr")
    assert two.requires.devices == ("/proc/modules", "/dev/pseudo_lock")
    assert two.requires.flags == ("avx2",)


@pytest.mark.parametrize(
    "value, needle",
    [
        ("[/dev/nvidia0]", "'/dev/nvidia0' is not one of: /dev/pseudo_lock, /dev/cpu/0/msr"),
        ("/dev/pseudo_lock", "expected a list"),
        ("[/dev/pseudo_lock, /dev/pseudo_lock]", "lists a value twice"),
    ],
)
def test_requires_devices_outside_the_collected_set_is_one_line(tmp_path, value, needle):
    message = error_of(tmp_path, BASE + f"    requires: {{devices: {value}}}\n")
    assert message.startswith(f"{tmp_path / 'spec.yaml'}:6: experiments[0].requires.devices"), (
        message
    )
    assert needle in message, message


def test_regex_metrics_and_sanity_are_built(tmp_path):
    spec = load_spec(
        write(
            tmp_path,
            BASE
            + """\
    sanity: {exit_codes: [0, 1], required_metrics: [eps], must_not_match: ['FATAL']}
    metrics:
      - parser: jsonl
      - parser: regex
        patterns:
          eps: {pattern: 'events per second:\\s+(?P<v>[\\d.]+)', unit: 1/s, group: v}
""",
        )
    )
    exp = spec.experiments[0]
    assert [p.kind for p in exp.parsers] == ["jsonl", "regex"]
    assert exp.parsers[1].options["eps"]["group"] == "v"
    assert exp.parsers[1].options["eps"]["stream"] == "stdout"
    assert exp.sanity.exit_codes == (0, 1)
    assert exp.sanity.must_not_match == ("FATAL",)


def test_split_command_keeps_templates_whole():
    words = split_command("./b --n {{ threads }} --s '{{ size }} KiB' {{ facts['a b'] }}x")
    assert words == ["./b", "--n", "{{ threads }}", "--s", "{{ size }} KiB", "{{ facts['a b'] }}x"]


def test_sweep_points_matrix_zip_exclude():
    sweep = Sweep(
        matrix={"a": (1, 2, 3), "b": ("x", "y")},
        zip={"c": (10, 20), "d": ("p", "q")},
        exclude=({"a": (2,), "b": ("y",)}, {"c": (20,), "a": (3,)}),
    )
    points = sweep_points(sweep)
    # 3 x 2 matrix, each with 2 zip rows = 12; minus a=2,b=y (2 rows) and a=3,c=20 (2 b's)
    assert len(points) == 12 - 2 - 2
    assert points[0] == {"a": 1, "b": "x", "c": 10, "d": "p"}
    assert all(p["c"] == 10 and p["d"] == "p" or p["c"] == 20 and p["d"] == "q" for p in points)
    assert not any(p["a"] == 2 and p["b"] == "y" for p in points)
    assert sweep_points(Sweep()) == [{}]


def test_yaml_merge_keys_are_allowed(tmp_path):
    spec = load_spec(
        write(
            tmp_path,
            """\
schema_version: 1
campaign: anchors
experiments:
  - &base {name: a, command: "true", timeout_s: 7}
  - <<: *base
    name: b
""",
        )
    )
    assert [e.name for e in spec.experiments] == ["a", "b"]
    assert spec.experiments[1].timeout_s == 7.0


def test_missing_file_is_a_spec_error(tmp_path):
    with pytest.raises(SpecError, match="cannot read the spec"):
        load_spec(tmp_path / "nope.yaml")


@pytest.mark.parametrize(
    "spec",
    sorted((Path(__file__).parents[1] / "experiments").glob("*.yaml")),
    ids=lambda p: p.name,
)
def test_shipped_experiment_specs_load(spec):
    assert load_spec(spec).experiments


def test_the_example_in_docs_loads(tmp_path):
    doc = (Path(__file__).parents[1] / "docs" / "spec.md").read_text()
    example = doc.split("```yaml\n", 1)[1].split("```", 1)[0]
    spec = load_spec(write(tmp_path, example))
    assert [e.name for e in spec.experiments] == ["ladder", "sysbench-cpu"]
    assert spec.hosts == "bench"


def test_collector_names_are_the_scripts_with_the_start_stop_contract():
    import subprocess
    import sys

    from socketlab.paths import COLLECTORS
    from socketlab.spec.load import collector_names

    names = collector_names()
    assert {"proc_peakmem", "proc_noise"} <= set(names)
    assert not {"host_facts", "dma_latency_hold", "_collector", "_runwrap"} & set(names)
    for name in names:  # each one really takes start/stop --out
        for command in ("start", "stop"):
            proc = subprocess.run(
                [sys.executable, "-I", "-S", str(COLLECTORS / f"{name}.py"), command, "--help"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert proc.returncode == 0 and "--out" in proc.stdout, (name, command, proc.stderr)
