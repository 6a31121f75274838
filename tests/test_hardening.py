"""Issue 15: every size bounded, every loader total. Each class of bad input gets one line,
exit 2, no traceback, through the real CLI in this process (tests/specs/bad/ and
tests/published/bad/ hold the text cases; bytes that can't be a text file are made here).

The 5-s bound of the issue is a hang guard (SIGALRM), not a speed claim; speed figures come
from bench/hardening_sizes.py.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from socketlab.cli import main
from socketlab.errors import SpecError
from socketlab.report.published import load_published
from socketlab.store import RunRecord, Store, store_path

HERE = Path(__file__).parent
BAD_SPECS = HERE / "specs" / "bad"
GOOD_PUBLISHED = HERE / "published" / "good-minimal.yaml"
HEADER = "schema_version: 1\ncampaign: bad\nexperiments:\n  - {name: a, command: 'true'}\n"


@pytest.fixture(scope="module")
def inventory(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("inv") / "hosts.yml"
    path.write_text("all:\n  hosts:\n    localhost:\n      ansible_connection: local\n")
    return path


@contextlib.contextmanager
def within(seconds: int):
    """Fail (not hang) when the body runs past ``seconds``: the issue's bound per input."""

    def expired(*_):
        raise AssertionError(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), within(5):
        rc = main([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue()


def one_line_error(rc: int, err: str, *parts: str) -> None:
    assert rc == 2, err
    assert "Traceback" not in err
    assert err.startswith("orchestrate: error: ") and err.count("\n") == 1, err
    for part in parts:
        assert part in err, f"{part!r} not in {err!r}"


# -- the spec corpus of issue 15, in one process (test_spec_bad_corpus runs it per process) ----

ISSUE_15_SPECS = sorted(
    p
    for p in BAD_SPECS.glob("*.yaml")
    if p.stem.startswith(
        ("limit_", "jinja_", "nul_", "timeout_n", "timeout_i", "cpulist_huge", "build_flags_")
    )
    or p.stem
    in {
        "env_key_not_a_string",
        "key_reads_as_boolean",
        "complex_key",
        "recursive_alias",
        "deep_nesting",
        "nesting_over_limit",
        "alias_expansion_bomb",
        "control_character",
        "invalid_date",
        "huge_integer",
        "unused_profile_invalid",
    }
)


def _header(path: Path, key: str) -> str:
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith(f"# {key}: "):
            return line.removeprefix(f"# {key}: ")
    raise AssertionError(f"{path.name}: no # {key}:")


def test_the_issue_corpus_covers_every_class():
    assert len(ISSUE_15_SPECS) >= 28, [p.stem for p in ISSUE_15_SPECS]


@pytest.mark.parametrize("spec", ISSUE_15_SPECS, ids=lambda p: p.stem)
def test_bad_spec_is_one_line_within_5_s(spec, inventory):
    rc, out, err = cli("plan", spec, "--inventory", inventory)
    assert out == ""
    one_line_error(rc, err, str(spec), _header(spec, "expect"), _header(spec, "field"))


# -- inputs that are bytes, or too big to keep in the repo -----------------------------------

BYTE_CASES = {
    "not_utf8": (HEADER.encode() + b"x: \xff\xfe\n", ":5: not UTF-8 text (byte 79)"),
    "latin1_comment": (b"# caf\xe9\n" + HEADER.encode(), ":1: not UTF-8 text"),
    "nul_in_key": (HEADER.encode() + b'"a\\0": 1\n', "a NUL character"),
    "escape_char": (HEADER.encode() + b"x: \x1b[31m\n", "control character U+001B"),
    "c1_control": (HEADER.encode() + "x: \u0085\u0091\n".encode(), "control character U+0091"),
    "truncated_flow": (b"schema_version: 1\nexperiments: [{name: a, command: ", "YAML syntax"),
    "tab_indent": (b"schema_version: 1\n\tcampaign: x\n", "YAML syntax error"),
    "two_documents": (HEADER.encode() + b"---\nx: 1\n", "YAML syntax error"),
    "float_overflow": (
        HEADER.encode().replace(b"'true'}", b"'true', timeout_s: 1.0e+999}"),
        "'1.0e+999' is not a finite number",
    ),
    "python_tag": (
        HEADER.encode() + b"x: !!python/object/apply:os.system [echo]\n",
        "unsupported YAML",
    ),
}


@pytest.mark.parametrize("name", sorted(BYTE_CASES))
def test_bad_bytes_give_one_line(name, tmp_path, inventory):
    data, expect = BYTE_CASES[name]
    spec = tmp_path / f"{name}.yaml"
    spec.write_bytes(data)
    rc, _, err = cli("plan", spec, "--inventory", inventory)
    one_line_error(rc, err, str(spec), expect)
    pub = tmp_path / f"{name}-published.yaml"
    pub.write_bytes(data)
    with within(5), pytest.raises(SpecError) as info:  # the published loader is the same one
        load_published(pub)
    assert "\n" not in str(info.value) and str(info.value).startswith(str(pub))


def test_spec_over_the_size_limit_is_refused_before_it_is_read(tmp_path, inventory):
    spec = tmp_path / "big.yaml"
    with spec.open("w") as fh:
        fh.write(HEADER)
        fh.write("# padding\n" * 900_000)  # 9 MB of comments
    rc, _, err = cli("plan", spec, "--inventory", inventory)
    one_line_error(
        rc,
        err,
        f"{spec}: the spec is 9",
        "over the limit of 8388608 bytes",
        "SOCKETLAB_LIMIT_SPEC_BYTES",
    )


def test_a_limit_is_a_setting_the_user_can_raise(tmp_path, inventory, monkeypatch):
    spec = tmp_path / "reps.yaml"
    spec.write_text(HEADER.replace("'true'}", "'true', repetitions: 20}"))
    monkeypatch.setenv("SOCKETLAB_LIMIT_REPETITIONS", "10")
    rc, _, err = cli("plan", spec, "--inventory", inventory)
    one_line_error(
        rc, err, "repetitions 20, over the limit of 10 (SOCKETLAB_LIMIT_REPETITIONS raises it)"
    )
    monkeypatch.setenv("SOCKETLAB_LIMIT_REPETITIONS", "30")
    rc, out, err = cli("plan", spec, "--inventory", inventory)
    assert rc == 0, err
    monkeypatch.setenv("SOCKETLAB_LIMIT_POINTS", "many")
    rc, _, err = cli("plan", spec, "--inventory", inventory)
    one_line_error(rc, err, "SOCKETLAB_LIMIT_POINTS='many': expected a positive integer")


def test_56000_experiments_with_an_error_in_the_last(tmp_path, inventory):
    """The issue's big spec: 56,000 experiments, the last one misspelt: refused by its size
    at once (building and validating 56,000 experiments would take a minute and more)."""
    lines = ["schema_version: 1", "campaign: big", "experiments:"]
    lines += [f"  - {{name: e{i}, command: 'true'}}" for i in range(55_999)]
    lines.append("  - {name: last, comand: 'true'}")
    spec = tmp_path / "big.yaml"
    spec.write_text("\n".join(lines) + "\n")
    print(f"{spec.stat().st_size} bytes")
    rc, _, err = cli("plan", spec, "--inventory", inventory)
    one_line_error(
        rc,
        err,
        f"{spec}:",
        "with its aliases expanded, has 100001 values, over the "
        "limit of 100000 values (SOCKETLAB_LIMIT_YAML_NODES raises it)",
    )


def test_2000_experiments_with_an_error_in_the_last(tmp_path, inventory):
    lines = ["schema_version: 1", "campaign: big", "experiments:"]
    lines += [f"  - {{name: e{i}, command: 'true'}}" for i in range(1_999)]
    lines.append("  - {name: last, comand: 'true'}")
    spec = tmp_path / "big.yaml"
    spec.write_text("\n".join(lines) + "\n")
    rc, _, err = cli("plan", spec, "--inventory", inventory)
    one_line_error(rc, err, f"{spec}:2003: experiments[1999].comand: unknown key 'comand'")


# -- published values --------------------------------------------------------------------------


def test_non_finite_published_values_never_reach_a_verdict(tmp_path):
    good = GOOD_PUBLISHED.read_text()
    for bad, word in (
        (".inf", "'.inf'"),
        ("-.Inf", "'-.Inf'"),
        (".nan", "'.nan'"),
        ("1.0e+400", "'1.0e+400'"),
    ):
        path = tmp_path / "p.yaml"
        path.write_text(good.replace("bandwidth_total: 100}", f"bandwidth_total: {bad}}}"))
        with pytest.raises(SpecError, match=re.escape(f"{word} is not a finite number")):
            load_published(path)
        path.write_text(good.replace("better: higher}", f"better: higher, tolerance: {bad}}}"))
        with pytest.raises(SpecError, match="is not a finite number"):
            load_published(path)


# -- file-system faults --------------------------------------------------------------------------


def _store_with_one_run(results: Path) -> Path:
    path = store_path("fs", results)
    with Store(path) as store:
        store.add_run(
            RunRecord(
                run_key="k1",
                campaign="fs",
                experiment="e",
                host="h",
                repetition=0,
                params={"n": 1},
                status="ok",
            )
        )
    return path


def test_results_pointing_at_a_file_is_one_line(tmp_path, inventory):
    spec = tmp_path / "spec.yaml"
    spec.write_text(HEADER)
    afile = tmp_path / "results.txt"
    afile.write_text("not a folder")
    for extra in ([], ["--dry-run"]):
        rc, out, err = cli("run", spec, "--inventory", inventory, "--results", afile, *extra)
        one_line_error(rc, err, f"{afile}: is a file, not a folder")
        assert "runs to do" not in out
    assert afile.read_text() == "not a folder"


def test_export_into_a_missing_folder_or_onto_a_folder(tmp_path):
    results = tmp_path / "results"
    _store_with_one_run(results)
    rc, _, err = cli("export", "fs", "--results", results, "-o", tmp_path / "no" / "m.csv")
    one_line_error(rc, err, f"folder {tmp_path / 'no'} does not exist")
    rc, _, err = cli("export", "fs", "--results", results, "-o", tmp_path)
    one_line_error(rc, err, f"-o {tmp_path}: is a folder")
    rc, _, err = cli("export", "fs", "--results", results, "-o", tmp_path / "m.csv")
    assert rc == 0, err
    assert "run_key" in (tmp_path / "m.csv").read_text()


def test_a_read_only_store_is_one_line_for_writers(tmp_path):
    path = _store_with_one_run(tmp_path / "results")
    with Store(path, create=False) as store:  # opened read-only
        assert [r.run_key for r in store.runs("fs")] == ["k1"]
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            store._db.execute("DELETE FROM runs")


def _read_only_mount_works() -> str:
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, text=True)
    return "" if probe.returncode == 0 else f"no mount namespace here: {probe.stderr.strip()}"


@pytest.mark.skipif(bool(_read_only_mount_works()), reason=_read_only_mount_works() or "-")
def test_status_report_export_read_a_store_on_a_read_only_medium(tmp_path):
    """A read-only bind mount of the results (in a private mount namespace, so root's
    permission bypass doesn't hide the fault) still answers status, report and export."""
    results = tmp_path / "results"
    _store_with_one_run(results)
    out = tmp_path / "out"
    out.mkdir()
    script = (
        f"mount --bind -o ro {results} {results} && "
        f"{sys.executable} -m socketlab.cli status fs --results {results} && "
        f"{sys.executable} -m socketlab.cli report fs --results {results} && "
        f"{sys.executable} -m socketlab.cli export fs --results {results} -o {out}/m.csv && "
        f"! touch {results}/fs/x 2>/dev/null"
    )
    proc = subprocess.run(
        ["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "campaign fs: 1 runs" in proc.stdout
    assert "report not written to" in proc.stderr  # printed instead, one line
    assert "k1" in (out / "m.csv").read_text() or "run_key" in (out / "m.csv").read_text()


def test_mid_run_store_failure_stops_the_host_with_one_line(tmp_path, capsys):
    """A store that can't be written (here: made read-only under the runner) stops the host
    with one line, no thread traceback, and nothing half-stored."""
    from socketlab.runner import Runner

    path = _store_with_one_run(tmp_path / "results")
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(HEADER)
    store = Store(path)
    store._db.execute("PRAGMA query_only = ON")  # every write now fails like a read-only medium
    from socketlab.execute.progress import Reporter
    from socketlab.inventory import InventoryHost
    from socketlab.spec.expand import expand_points
    from socketlab.spec.load import load_spec

    spec = load_spec(spec_path)
    plan = expand_points(spec, {"localhost": {"topology": {}}})
    host = InventoryHost(
        name="localhost",
        connection="local",
        address="localhost",
        port=22,
        user=None,
        key_file=None,
        ssh_common_args="",
        python=sys.executable,
    )
    runner = Runner(
        campaign="bad",
        points=plan.points,
        hosts={"localhost": host},
        profiles={"localhost": "p"},
        store=store,
        results_dir=tmp_path / "r",
        reporter=Reporter(),
        workroot=str(tmp_path / "w"),
    )
    with within(30):
        summary = runner.run()
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert summary.host_errors["localhost"].startswith(f"stopped: {path}: cannot store"), summary
    store.close()
    with Store(path, create=False) as again:
        assert [r.run_key for r in again.runs()] == ["k1"]


# -- keys --------------------------------------------------------------------------------------


def test_yaml_keys_never_reach_the_model_as_non_strings(tmp_path):
    from socketlab.yamlload import load_document

    for text, expect in (
        ("{1: a}", "reads as YAML int"),
        ("{null: a}", "reads as YAML null"),
        ("{on: a}", "reads as YAML bool"),
        ("{? [a]: 1}", "complex key"),
        ("{2026-01-01: a}", "reads as YAML timestamp"),
    ):
        with pytest.raises(SpecError, match=expect):
            load_document(tmp_path / "x.yaml", text)
    data, _ = load_document(tmp_path / "x.yaml", "{'1': a, base: &b {x: 1}, c: {<<: *b, y: 2}}")
    assert data == {"1": "a", "base": {"x": 1}, "c": {"x": 1, "y": 2}}
    assert yaml.safe_load("{'1': a}") == data.__class__({"1": "a"})


# -- the one shell path ------------------------------------------------------------------------


@pytest.mark.parametrize("flags", ["-O2 `touch {m}`", "-O2 $(shell touch {m})", "-O2; touch {m}"])
def test_build_flags_never_reach_a_shell(tmp_path, inventory, flags):
    marker = tmp_path / "pwned"
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "schema_version": 1,
                "campaign": "flags",
                "builds": {
                    "native": {"source": ".", "target": "all", "flags": flags.format(m=marker)}
                },
                "experiments": [{"name": "a", "build": "native", "command": "true"}],
            }
        )
    )
    rc, _, err = cli("run", spec, "--inventory", inventory, "--results", tmp_path / "r")
    one_line_error(rc, err, "builds.native.flags: character", "is not allowed")
    assert not marker.exists()


# -- a CPU or token list over a limit names the limit (not "expected a CPU list") ------------

LIMIT_LISTS = {
    "cpu_id": (
        "cpus: '0-4000000000'",
        "experiments[0].cpus: renders to '0-4000000000' on "
        "host localhost: CPU id 4000000000, over the limit of 1048576 "
        "(SOCKETLAB_LIMIT_CPU_ID raises it)",
    ),
    "cpu_id_digits": ("cpus: '0-" + "9" * 5000 + "'", "a 5000-digit CPU id, over the limit"),
    "cpu_count": (
        "cpus: '0-100000'",
        "experiments[0].cpus: renders to '0-100000' on host "
        "localhost: 100001 CPUs, over the limit of 65536 CPUs "
        "(SOCKETLAB_LIMIT_CPUS raises it)",
    ),
    "filter": (
        "env: {N: \"{{ '0-4000000000' | cpus | length }}\"}",
        "experiments[0].env.N: template",
        "its CPU list has CPU id 4000000000, over the "
        "limit of 1048576 (SOCKETLAB_LIMIT_CPU_ID raises it)",
    ),
}


@pytest.mark.parametrize("name", sorted(LIMIT_LISTS))
def test_a_cpu_list_over_a_limit_names_the_limit(name, tmp_path, inventory):
    field, *expect = LIMIT_LISTS[name]
    spec = tmp_path / "spec.yaml"
    spec.write_text(HEADER.replace("'true'}", f"'true', {field}}}"))
    rc, _, err = cli("plan", spec, "--inventory", inventory)
    one_line_error(rc, err, f"{spec}:4: ", *expect)
    assert "expected a CPU list" not in err


def test_a_raised_cpu_limit_lets_the_list_through(tmp_path, inventory, monkeypatch):
    spec = tmp_path / "spec.yaml"
    spec.write_text(HEADER.replace("'true'}", "'true', cpus: '0-100000'}"))
    monkeypatch.setenv("SOCKETLAB_LIMIT_CPUS", "0")
    rc, _, err = cli("plan", spec, "--inventory", inventory)
    one_line_error(rc, err, "SOCKETLAB_LIMIT_CPUS='0': expected a positive integer")
    monkeypatch.setenv("SOCKETLAB_LIMIT_CPUS", "200000")
    rc, _, err = cli("plan", spec, "--inventory", inventory)  # past the limit: not online
    one_line_error(rc, err, f"{spec}:4: experiments[0].cpus: CPUs ", "are not online on host")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs online")
def test_host_facts_over_a_cpu_limit_name_the_limit(tmp_path, inventory, monkeypatch):
    spec = tmp_path / "spec.yaml"
    spec.write_text(HEADER)
    monkeypatch.setenv("SOCKETLAB_LIMIT_CPUS", "1")
    rc, _, err = cli("plan", spec, "--inventory", inventory)
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "host facts: cpu_online: " in err and "CPUs, over the limit of 1 CPUs" in err, err


@pytest.mark.parametrize("ids", ["2-4000000000", "2-" + "9" * 5000])
def test_suppressed_token_ids_are_counted_before_they_are_made(ids, tmp_path):
    """suppress_token_ids became a dict of one key per id: 4 billion keys hung `plan`."""
    spec = tmp_path / "serving.yaml"
    text = (HERE.parent / "experiments" / "serving-tiny.yaml").read_text()
    spec.write_text(text.replace('suppress_token_ids: "2-258"', f'suppress_token_ids: "{ids}"'))
    inv = tmp_path / "hosts.yml"
    inv.write_text(
        "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
        "      serve_python: python3\n      serve_model: /m.gguf\n"
    )
    rc, _, err = cli("plan", spec, "--inventory", inv)
    one_line_error(
        rc,
        err,
        f"{spec}:",
        "experiments[0].serving.suppress_token_ids: ",
        "token ids, over the limit of 1048576 token ids (SOCKETLAB_LIMIT_TOKEN_IDS",
    )
