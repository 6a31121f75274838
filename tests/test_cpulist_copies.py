"""The CPU-list parser has one definition and two stdlib copies shipped to hosts
(collectors/_collector.py, playbooks/module_utils/socketlab_isolation.py): one corpus runs
through all three, and results and error messages must be identical."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from socketlab import cpulist

REPO = Path(__file__).resolve().parents[1]
COPIES = {
    "collector": REPO / "collectors" / "_collector.py",
    "module_utils": REPO / "playbooks" / "module_utils" / "socketlab_isolation.py",
}


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(f"cpulist_copy_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


IMPLEMENTATIONS = {"package": cpulist, **{k: _load(k, p) for k, p in COPIES.items()}}

VALID = [
    "", "   ", "0", "7\n", "0-3,8,10-11", "3,3,1-3", " 5,1-2 \n",
    "0-15:2/4", "0-31:1/8,40", "4-4:1/1",  # the kernel's used/group strides
    "0-1 96-97", "0-1  4,6", "1, 2 ,3",  # blanks: systemd prints "0-1 96-97"
    "007,0010",
]  # fmt: skip
INVALID = [
    "3-1", "4-3", "5-0:1/2",  # backwards ranges
    "0-7:0/4", "0-7:5/4", "0-7:1/0",  # bad strides
    "a", "1-", "-1", "1,,2", "1,", ",1", "0x3", "1-2-3", "1:2/4", "0-3:2", "½", "1;2",
]  # fmt: skip


def _outcome(impl, text: str) -> tuple[str, object]:
    try:
        return "ok", impl.parse_cpulist(text)
    except ValueError as exc:
        return "error", str(exc)


@pytest.mark.parametrize("text", VALID + INVALID)
def test_every_copy_parses_like_the_package(text):
    outcomes = {name: _outcome(impl, text) for name, impl in IMPLEMENTATIONS.items()}
    assert len(set(map(repr, outcomes.values()))) == 1, outcomes
    assert outcomes["package"][0] == ("ok" if text in VALID else "error")


def test_the_corpus_means_what_it_says():
    assert cpulist.parse_cpulist("0-15:2/4") == [0, 1, 4, 5, 8, 9, 12, 13]
    assert cpulist.parse_cpulist("0-1 96-97") == [0, 1, 96, 97]
    assert "runs backwards" in _outcome(cpulist, "3-1")[1]


@pytest.mark.parametrize("cpus", [[], [0], [0, 1], [5, 1, 2, 3, 9], [0, 2, 4], list(range(96, 128)),
                                  [0, 1, 2, 7, 9, 10, 11, 64, 191]])
def test_every_copy_formats_like_the_package(cpus):
    texts = {name: impl.format_cpulist(cpus) for name, impl in IMPLEMENTATIONS.items()}
    assert len(set(texts.values())) == 1, texts
    assert cpulist.parse_cpulist(texts["package"]) == sorted(set(cpus))


def _block(path: Path) -> str:
    text = path.read_text()
    found = re.search(r"^# CPU lists: a stdlib copy.*?^    return \",\"\.join\(out\)$", text,
                      re.S | re.M)
    assert found, f"{path}: no CPU-list block"
    return found.group()


def test_the_two_shipped_copies_are_the_same_text():
    # a fix made in one copy only would pass the corpus above until the corpus learns the case
    blocks = {name: _block(path) for name, path in COPIES.items()}
    assert blocks["collector"] == blocks["module_utils"]
