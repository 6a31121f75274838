"""Issue 29: spec and inventory fields never reach make, the compiler or the filesystem as
anything but data, on a real `orchestrate run` on localhost, not only at plan time.

Each payload that used to get through (a make target read as an assignment or an option,
compiler flags that write a file or start a program, host names that are paths, a symlinked
build source) is refused by `plan` and by `run` with one line and exit 2, and the run creates
nothing: not the file the payload names, not a results folder. The classes that already held
(parameters, env values, inventory variables and Jinja payloads as data; traversal in campaign,
experiment and collector names) are run too. Every test lists the files under its sandbox
before and after, so a write anywhere but the results and work folders fails it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from socketlab import paths
from tests.support.campaign import PY, stored, write_spec
from tests.support.shell import bait_untouched, shell_bait

ORCHESTRATE = Path(sys.executable).parent / "orchestrate"
#: prints its argv and $EVIL as one JSON line, and one metric (the jsonl contract)
SHOW = (
    "import json, os, sys; print(json.dumps([sys.argv[1:], os.environ.get('EVIL')])); "
    "print(json.dumps({'type': 'metric', 'name': 'x', 'value': 1.0, 'unit': '1'}))"
)


def orchestrate(*argv, env=None) -> tuple[int, str, str]:
    proc = subprocess.run(
        [str(ORCHESTRATE), *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )
    return proc.returncode, proc.stdout, proc.stderr


def files(root: Path) -> set[Path]:
    """Every file, folder and link under root (links not followed)."""
    return {Path(d) / n for d, dirs, names in os.walk(root) for n in (*dirs, *names)}


def one_line(rc: int, err: str, *parts: str) -> str:
    assert rc == 2, err
    assert "Traceback" not in err and err.count("\n") == 1, err
    line = err.strip()
    assert line.startswith("orchestrate: error: "), line
    for part in parts:
        assert part in line, (part, line)
    return line


def inventory(path: Path, name: str, work: Path, **host) -> Path:
    host = {
        "ansible_connection": "local",
        "ansible_python_interpreter": PY,
        "socketlab_workroot": str(work),
        **host,
    }
    path.write_text(yaml.safe_dump({"all": {"hosts": {name: host}}}))
    return path


# -- payloads refused at plan time; the same through `run` create nothing -------------------

#: case -> (build, expected parts of the line); {m} is the case's marker file, {p} a planted
#: program that makes it (gcc's -wrapper runs it with cc1's command line, which sh ignores)
BUILDS = {
    "target_assignment": (
        {"target": "X:=$(shell touch {m})"},
        [
            "builds.native.target",
            "holds '=', so make would read it as a variable assignment",
            "expected a make goal",
        ],
    ),
    "target_option": (
        {"target": "--eval=$(shell touch {m})"},
        ["builds.native.target", "starts with '-', so make would read it as an option"],
    ),
    "target_outside": ({"target": "../../../../x"}, ["builds.native.target", "'..' part"]),
    "flags_dependency_file": (
        {"flags": "-O2 -MD -MF {m}"},
        [
            "builds.native.flags",
            "'-MD' is dependency output",
            "expected compiler options of the forms",
        ],
    ),
    "flags_wrapper": (
        {"flags": "-O2 -wrapper /bin/sh,{p}"},
        ["builds.native.flags", "'-wrapper' runs another program"],
    ),
    "flags_output": ({"flags": "-o {m}"}, ["builds.native.flags", "'-o' names the output file"]),
    "flags_options_file": ({"flags": "@{m}"}, ["builds.native.flags", "reads more options"]),
    "flags_compiler_dir": ({"flags": "-B{m}"}, ["builds.native.flags", "runs another program"]),
    "flags_input_file": ({"flags": "-O2 {m}"}, ["builds.native.flags", "is not an option"]),
    "cc_option": ({"cc": "-wrapper"}, ["builds.native.cc", "expected a compiler command or path"]),
}
#: case -> (experiment fields, expected parts): the classes that already held
EXPERIMENTS = {
    "jinja_escape": (
        {"command": ["true", "{{ cycler.__init__.__globals__.os.system('touch {m}') }}"]},
        ["experiments[0].command[1]", "not allowed in a template"],
    ),
    "experiment_name": ({"name": "../../x"}, ["experiments[0].name", "expected a name"]),
    "collector_name": (
        {"collectors": ["../../x"]},
        ["experiments[0].collectors[0]", "expected a collector name"],
    ),
}


def _refused(
    root: Path, spec: Path, inv: Path, parts: list[str], markers: list[Path], env=None
) -> str:
    """A real `run` creates nothing (the payload's marker first of all) and refuses with one
    line; `plan` refuses with the same line."""
    before = files(root)
    rc, out, err = orchestrate(
        "run", spec, "--inventory", inv, "--results", root / "results", "--plain", env=env
    )
    for marker in markers:
        assert not marker.exists() and not marker.is_symlink(), (marker, rc, out[-2000:], err)
    assert files(root) == before, sorted(files(root) - before)
    line = one_line(rc, err, *parts)
    assert out == "", out
    rc, out, err = orchestrate("plan", spec, "--inventory", inv, env=env)
    assert one_line(rc, err, *parts) == line and out == "", out
    print(line)  # the evidence: the line each refusal prints
    return line


@pytest.mark.parametrize("case", sorted(BUILDS) + sorted(EXPERIMENTS))
def test_a_payload_is_refused_by_plan_and_run_and_creates_nothing(case, tmp_path):
    marker = tmp_path / f"pwned-{case}"
    planted = tmp_path / "planted.sh"
    planted.write_text(f"touch {marker}\n")
    experiment = {"name": "a", "command": [PY, "-c", SHOW], "build": "native"}
    build = {"source": ".", "target": "all"}
    if case in BUILDS:
        build.update({k: v.format(m=marker, p=planted) for k, v in BUILDS[case][0].items()})
        parts = BUILDS[case][1]
    else:
        fields, parts = EXPERIMENTS[case]
        experiment.update(yaml.safe_load(yaml.safe_dump(fields).replace("{m}", str(marker))))
    spec = write_spec(
        tmp_path / "spec.yaml",
        {"campaign": "inj", "builds": {"native": build}, "experiments": [experiment]},
    )
    inv = inventory(tmp_path / "inventory.yml", "localhost", tmp_path / "work")
    _refused(tmp_path, spec, inv, [str(spec), *parts], [marker, tmp_path / "work"])


@pytest.mark.parametrize("case", ["traversal", "absolute", "leading_dash", "dot_dot"])
def test_a_host_name_that_is_a_path_is_refused_at_inventory_load(case, tmp_path):
    # the work root three folders down: `../../../x` would be tmp_path/a/x, and its facts file
    # results/inj/hosts/../../../x.json tmp_path/x.json (what the issue saw written)
    work = tmp_path / "a" / "b" / "c" / "work"
    name = {
        "traversal": "../../../x",
        "absolute": str(tmp_path / "abs"),
        "leading_dash": "-oProxyCommand=touch",
        "dot_dot": "..",
    }[case]
    inv = inventory(tmp_path / "inventory.yml", name, work)
    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "campaign": "inj",
            "hosts": {"pattern": "all"},
            "experiments": [{"name": "a", "command": [PY, "-c", SHOW]}],
        },
    )
    why = {
        "traversal": "holds '/'",
        "absolute": "holds '/'",
        "leading_dash": "starts with '-'",
        "dot_dot": "'..' is not a name of its own",
    }[case]
    markers = [
        tmp_path / "a" / "x",
        tmp_path / "x.json",
        tmp_path / "abs",
        tmp_path / "abs.json",
        work,
        tmp_path / "results",
    ]
    _refused(
        tmp_path, spec, inv, [f"{inv}: host {name!r}: ", why, "becomes a folder name"], markers
    )


def _sandbox_repo(tmp_path: Path) -> Path:
    """A repository whose native/ has a symlinked build folder, the rest linked to ours
    (SOCKETLAB_REPO): the shared checkout's native/ is left alone."""
    repo = tmp_path / "repo"
    (repo / "native").mkdir(parents=True)
    for entry in paths.REPO.iterdir():
        if entry.name not in ("native", ".git", ".venv", "results"):
            (repo / entry.name).symlink_to(entry)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "Makefile").write_text(f"all:\n\ttouch {tmp_path}/pwned-source\n")
    (repo / "native" / "linked").symlink_to(elsewhere)
    return repo


def test_a_symlinked_build_source_is_refused_at_plan_time(tmp_path):
    repo = _sandbox_repo(tmp_path)
    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "campaign": "inj",
            "builds": {"native": {"source": "linked"}},
            "experiments": [{"name": "a", "build": "native", "command": [PY, "-c", SHOW]}],
        },
    )
    inv = inventory(tmp_path / "inventory.yml", "localhost", tmp_path / "work")
    _refused(
        tmp_path,
        spec,
        inv,
        [
            str(spec),
            f"builds.native.source: native/linked is a symbolic link (to {tmp_path / 'elsewhere'})",
        ],
        [tmp_path / "pwned-source", tmp_path / "work"],
        env={"SOCKETLAB_REPO": str(repo)},
    )


def test_dry_run_checks_the_interpreter_as_plan_does(tmp_path):
    inv = inventory(
        tmp_path / "inventory.yml",
        "localhost",
        tmp_path / "work",
        ansible_python_interpreter=str(tmp_path / "no" / "python3"),
    )
    spec = write_spec(
        tmp_path / "spec.yaml",
        {"campaign": "inj", "experiments": [{"name": "a", "command": [PY, "-c", SHOW]}]},
    )
    before = files(tmp_path)
    lines = []
    for argv in (["plan", spec], ["run", spec, "--dry-run", "--results", tmp_path / "results"]):
        rc, out, err = orchestrate(*argv, "--inventory", inv)
        lines.append(
            one_line(
                rc,
                err,
                "no host could be reached (1 tried)",
                f"cannot run {tmp_path / 'no' / 'python3'}",
            )
        )
        assert out == ""
    assert lines[0] == lines[1]
    assert files(tmp_path) == before


# -- what runs: data stays data, files stay in their folders ----------------------------------


def test_params_env_vars_and_template_text_stay_data_on_a_real_run(tmp_path):
    keep, evil = shell_bait(tmp_path)
    jinja = "{{ cycler.__init__.__globals__.os.system('touch " + str(tmp_path / "pwned") + "') }}"
    work, results = tmp_path / "work", tmp_path / "results"
    inv = inventory(tmp_path / "inventory.yml", "localhost", work, evil_var=evil)
    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "campaign": "inj",
            "experiments": [
                {
                    "name": "data",
                    "command": [PY, "-c", SHOW, "{{ word }}", "{{ vars.evil_var }}"],
                    "env": {"EVIL": "{{ word }}"},
                    "sweep": {"matrix": {"word": [evil, jinja]}},
                    "metrics": {"parser": "jsonl"},
                }
            ],
        },
    )
    before = files(tmp_path)
    rc, out, err = orchestrate("run", spec, "--inventory", inv, "--results", results, "--plain")
    assert rc == 0, out + err
    runs = stored(results, "inj")
    assert {r.status for r in runs.values()} == {"ok"} and len(runs) == 2
    shown = [
        json.loads((Path(r.raw_dir) / "stdout").read_text().splitlines()[0]) for r in runs.values()
    ]
    assert sorted(argv[0] for argv, _ in shown) == sorted([evil, jinja])  # literal, one word each
    for argv, env in shown:
        assert argv[1:] == [evil] and env == argv[0]
    assert bait_untouched(tmp_path, keep)
    new = files(tmp_path) - before
    assert new and all(p.is_relative_to(results) or p.is_relative_to(work) for p in new), sorted(
        p for p in new if not (p.is_relative_to(results) or p.is_relative_to(work))
    )


def test_allowed_flags_and_a_goal_build_for_real(tmp_path):
    """The allow-list lets a real build through: the goal after make's `--`, the flags as
    CFLAGS, and the files it makes inside the work folder."""
    work, results = tmp_path / "work", tmp_path / "results"
    inv = inventory(tmp_path / "inventory.yml", "localhost", work)
    flags = "-O2 -g -Wall -Wno-unused-function -DSOCKETLAB_TEST=1 -fno-omit-frame-pointer -pipe"
    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "campaign": "inj",
            "builds": {"native": {"source": ".", "target": "build/cc/ladder", "flags": flags}},
            "experiments": [
                {
                    "name": "ladder",
                    "build": "native",
                    "command": "{{ build.dir }}/ladder --kernel avx2-read --size 16K "
                    "--seconds 0.05 --reps 1 --timeout 20",
                    "metrics": {"parser": "jsonl"},
                }
            ],
        },
    )
    before = files(tmp_path)
    rc, out, err = orchestrate("run", spec, "--inventory", inv, "--results", results, "--plain")
    assert rc == 0, out[-3000:] + err[-3000:]
    (run,) = stored(results, "inj").values()
    assert run.status == "ok", run.reason
    assert run.build["make"] == f"build/cc/ladder BUILD=build/cc CFLAGS={flags}"
    assert run.build["cflags"] == flags
    new = files(tmp_path) - before
    assert all(p.is_relative_to(results) or p.is_relative_to(work) for p in new)


def _keys(spec: Path, inv: Path, results: Path) -> dict[str, str]:
    """experiment -> run key, as the runner computes it (a dry run's plan, nothing written)."""
    from socketlab import session

    campaign = session.prepare(spec, inventory=inv)
    dry = session.runner(campaign, results, dry_run=True)
    try:
        return {p.experiment: key for p, key in dry.pending()["localhost"]}
    finally:
        dry.store.close()


def test_a_symlink_at_a_run_folder_fails_that_run_only_and_names_it(tmp_path):
    work, results = tmp_path / "work", tmp_path / "results"
    inv = inventory(tmp_path / "inventory.yml", "localhost", work)
    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "campaign": "inj",
            "experiments": [
                {"name": name, "command": [PY, "-c", SHOW, name], "metrics": {"parser": "jsonl"}}
                for name in ("first", "second")
            ],
        },
    )
    keys = _keys(spec, inv, results)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("keep")
    link = results / "inj" / "runs" / keys["first"]
    link.parent.mkdir(parents=True)
    link.symlink_to(outside)
    rc, out, err = orchestrate("run", spec, "--inventory", inv, "--results", results, "--plain")
    assert rc == 1 and "Traceback" not in err, out + err
    runs = {r.experiment: r for r in stored(results, "inj").values()}
    assert runs["first"].status == "failed"
    assert runs["first"].reason.startswith(f"{link}: is a symbolic link (to {outside})")
    assert runs["second"].status == "ok"  # the host went on: only that run failed
    assert "stopped:" not in out + err
    assert link.is_symlink() and sorted(os.listdir(outside)) == ["keep"]
    assert (outside / "keep").read_text() == "keep"
