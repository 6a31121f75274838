"""One command line (issue 26 item 6): every command that picks hosts takes -i/--inventory and
-l/--limit (--hosts, the older spelling, too); every command takes -v/-q/--log-file; a shipped
spec is found by name; `orchestrate completion bash` completes commands and flags."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from socketlab import paths
from socketlab.cli import _commands, build_parser, main

BIN = Path(sys.executable).parent


def parsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {p.prog.removeprefix("orchestrate "): p for p in _commands(sub)}


def flags(parser: argparse.ArgumentParser) -> set[str]:
    return {f for a in parser._actions for f in a.option_strings}


def test_every_command_that_picks_hosts_spells_it_alike():
    picking = {name: p for name, p in parsers().items() if "--inventory" in flags(p)}
    assert {"run", "plan", "hosts", "cpuset"} <= set(picking), sorted(picking)
    for name, parser in picking.items():
        assert {"-i", "--inventory", "-l", "--limit", "--hosts"} <= flags(parser), name


def test_every_command_takes_the_logging_flags():
    for name, parser in parsers().items():
        assert {"-v", "--verbose", "-q", "--log-file"} <= flags(parser), name


def test_old_and_new_spellings_mean_the_same(tmp_path, capsys):
    spec = paths.EXPERIMENTS / "quickstart.yaml"
    out = {}
    for flag in ("--hosts", "-l", "--limit"):
        assert main(["plan", str(spec), flag, "localhost", "--json", "-q"]) == 0
        out[flag] = capsys.readouterr().out
    assert out["--hosts"] == out["-l"] == out["--limit"]


def test_a_shipped_spec_by_name_says_which_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no such file here
    assert main(["plan", "quickstart", "--json"]) == 0
    err = capsys.readouterr().err
    assert f"spec quickstart: no such file here; using the shipped {paths.EXPERIMENTS}" in err
    # a file of that name here wins, and nothing is said
    (tmp_path / "campaign-oct.yaml").write_text((paths.EXPERIMENTS / "quickstart.yaml").read_text())
    assert main(["plan", "campaign-oct.yaml", "--json"]) == 0
    assert "using the shipped" not in capsys.readouterr().err
    # -q: only warnings and errors
    assert main(["plan", "serving-tiny", "--json", "-q"]) in (0, 2)
    assert "using the shipped" not in capsys.readouterr().err


def test_no_such_spec_is_one_line_naming_the_shipped_ones(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "quikstart"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("orchestrate: error: quikstart: no such spec file")
    assert "quickstart" in err and "campaign-oct" in err
    assert main(["run", "elsewhere/quickstart.yaml"]) == 2  # a path is never a shipped name


def test_log_file_takes_every_record(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    log = tmp_path / "orchestrate.log"
    assert main(["-q", "plan", "quickstart", "--json", "--log-file", str(log)]) == 0
    assert "using the shipped" not in capsys.readouterr().err
    assert " INFO socketlab.shipped: spec quickstart: no such file here" in log.read_text()
    assert main(["plan", "quickstart", "--log-file", str(tmp_path / "no" / "x.log")]) == 2
    assert "--log-file" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_bash_completion_completes_commands_and_flags(tmp_path):
    script = tmp_path / "orchestrate.bash"
    script.write_text(
        subprocess.run(
            [str(BIN / "orchestrate"), "completion", "bash"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )

    def complete(*words: str) -> list[str]:
        line = " ".join(("orchestrate", *words))
        code = (
            f"source {script}; COMP_WORDS=({line}); COMP_CWORD={len(words)}; "
            f"COMP_LINE='{line}'; COMP_POINT=${{#COMP_LINE}}; _shtab_orchestrate; "
            'printf "%s\\n" "${COMPREPLY[@]}"'
        )
        return subprocess.run(
            ["bash", "-c", code], capture_output=True, text=True, check=True
        ).stdout.split()

    assert "run" in complete("ru") and "report" in complete("rep")
    assert complete("run", "--inv") == ["--inventory"]
    assert "--log-file" in complete("hosts", "--log")
