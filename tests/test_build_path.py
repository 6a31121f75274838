"""Issue 14: the binary path of a build has one source. The spec names a target and writes
`{{ build.dir }}/ladder`; the toolkit decides the folder (Build.dir) and passes it to make as
BUILD=, so the compiler (the spec's `cc`, or CC in the host's environment) can't move the
binaries away from the path the command names.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from socketlab.build import BuildJob, misplaced
from socketlab.cli import main
from socketlab.errors import SpecError
from socketlab.spec.expand import expand_points
from socketlab.spec.load import load_spec
from socketlab.spec.model import Build
from tests.support.campaign import local_inventory, stored, write_spec

CLANG = "clang-16"
needs_clang = pytest.mark.skipif(shutil.which(CLANG) is None, reason=f"{CLANG} not installed")
LADDER = "--kernel avx2-read --size 16K --seconds 0.05 --reps 1 --timeout 20"
HOST = {"localhost": {"topology": {"flags": ["avx2"], "cpu_online": "0-1"}}}


@pytest.mark.parametrize(
    ("cc", "folder"),
    [("", "build/cc"), ("clang-16", "build/clang-16"), ("/usr/bin/gcc-12", "build/gcc-12")],
)
def test_the_folder_is_the_makefiles_rule_of_the_compiler(cc, folder):
    # native/Makefile: BUILD ?= build/$(notdir $(firstword $(CC))), CC ?= cc
    assert Build("b", cc=cc).dir == folder
    assert BuildJob.from_spec(Build("b", cc=cc)).dir == folder


def test_a_build_without_cc_keeps_its_hash_and_a_compiler_changes_it():
    # stored run keys hold the build hash: a spec without `cc` must resume its old runs
    plain = BuildJob.from_spec(Build("native", target="all"))
    fields = {"source_hash": plain.source_hash, "source": ".", "target": "all", "flags": ""}
    old = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]
    assert plain.build_hash == old
    assert BuildJob.from_spec(Build("native", cc=CLANG)).build_hash != old


def test_templates_see_the_builds_folder(tmp_path):
    spec = load_spec(
        write_spec(
            tmp_path / "spec.yaml",
            {
                "campaign": "paths",
                "builds": {"clang": {"cc": CLANG}, "plain": {}},
                "experiments": [
                    {
                        "name": "a",
                        "build": "clang",
                        "command": "{{ build.dir }}/ladder {{ build.cc }}",
                    },
                    {
                        "name": "b",
                        "build": "plain",
                        "command": ["{{ build.dir }}/gemv", "{{ build.name }}"],
                    },
                    {
                        "name": "c",
                        "build": "plain",
                        "command": "build/cc/ladder",
                    },  # a literal still works
                ],
            },
        )
    )
    argv = {p.experiment: p.argv for p in expand_points(spec, HOST).points}
    assert argv == {
        "a": ("build/clang-16/ladder", "clang-16"),
        "b": ("build/cc/gemv", "plain"),
        "c": ("build/cc/ladder",),
    }


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"command": "build/cc/ladder --size 1"},
            "experiments[0].command: 'build/cc/ladder' is not where build 'clang' puts its "
            "binaries (build/clang-16, from cc: clang-16); write '{{ build.dir }}/ladder'",
        ),
        (
            {"command": ["./build/gcc/gemv"]},
            "experiments[0].command[0]: './build/gcc/gemv' is not where build 'clang'",
        ),
        (
            {"build": None, "command": "{{ build.dir }}/ladder"},
            "experiments[0].command: undefined value on host localhost: experiment 'a' has no "
            "build",
        ),
    ],
)
def test_a_path_into_another_folder_is_one_line_naming_the_field(tmp_path, change, message):
    exp = {"name": "a", "build": "clang", **change}
    spec = load_spec(
        write_spec(
            tmp_path / "spec.yaml",
            {
                "campaign": "paths",
                "builds": {"clang": {"cc": CLANG}},
                "experiments": [{k: v for k, v in exp.items() if v is not None}],
            },
        )
    )
    with pytest.raises(SpecError) as err:
        expand_points(spec, HOST)
    assert str(err.value).startswith(f"{tmp_path / 'spec.yaml'}:")
    assert message in str(err.value), str(err.value)


def test_a_target_in_another_folder_is_refused():
    assert misplaced(Build("b", cc=CLANG, target="build/cc/ladder"), "build/cc/ladder") == (
        "build/cc/ladder",
        "ladder",
    )
    assert misplaced(Build("b", cc=CLANG), "build/clang-16/ladder") is None
    assert misplaced(Build("b"), "build/release/x") is None  # no cc: nothing to contradict
    assert misplaced(Build("b", cc=CLANG), "/opt/x/build/cc/ladder") is None  # not relative


def _run(tmp_path: Path, build: dict, command: str, capsys) -> tuple[dict, dict]:
    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "campaign": "build-path",
            "builds": {"native": {"source": ".", **build}},
            "defaults": {"timeout_s": 60},
            "experiments": [
                {
                    "name": "ladder",
                    "build": "native",
                    "command": command,
                    "sanity": {"required_metrics": ["bw_total"]},
                }
            ],
        },
    )
    results = tmp_path / "results"
    argv = [
        "run",
        str(spec),
        "--results",
        str(results),
        "--plain",
        "--inventory",
        str(local_inventory(tmp_path)),
    ]
    assert main(argv) == 0, capsys.readouterr()
    (record,) = stored(results, "build-path").values()
    assert record.status == "ok", record.reason
    meta = json.loads((Path(record.raw_dir) / "meta.json").read_text())[0]
    return record.build, meta


@needs_clang
def test_a_clang_build_runs_its_binary_from_its_folder(tmp_path, capsys):
    target = f"build/{CLANG}/ladder"  # only the ladder: a target in the build's own folder
    manifest, meta = _run(
        tmp_path, {"target": target, "cc": CLANG}, "{{ build.dir }}/ladder " + LADDER, capsys
    )
    assert list(manifest["binaries"]) == [target] and manifest["dir"] == f"build/{CLANG}"
    assert "clang version 16" in manifest["compiler"], manifest["compiler"]
    assert meta["compiler"].startswith("clang 16"), meta  # the binary that ran is clang's
    built = tmp_path / "work" / "localhost" / "builds" / manifest["build_hash"] / target
    assert manifest["binaries"][target] == hashlib.sha256(built.read_bytes()).hexdigest()
    assert f"BUILD=build/{CLANG} CC={CLANG}" in manifest["make"]


@needs_clang
def test_cc_in_the_hosts_environment_does_not_move_the_folder(tmp_path, capsys, monkeypatch):
    # the bug of the issue: make's default BUILD follows CC, so CC=clang-16 in the
    # environment put the binaries in build/clang-16 while the spec ran build/cc/ladder
    monkeypatch.setenv("CC", CLANG)
    manifest, meta = _run(
        tmp_path, {"target": "build/cc/ladder"}, "build/cc/ladder " + LADDER, capsys
    )
    assert list(manifest["binaries"]) == ["build/cc/ladder"]
    assert meta["compiler"].startswith("clang 16"), meta  # the environment's compiler built it
    assert "clang version 16" in manifest["compiler"], manifest["compiler"]  # and says so
