"""The CPU-list parser has one definition for the controller (socketlab.cpulist) and one
stdlib file shipped to hosts (collectors/_cpulist.py: imported by collectors/_collector.py,
and by the collection's plugins/module_utils/isolation.py through its symlink
plugins/module_utils/cpulist.py). One corpus runs through the package and every way a host
gets the file: results and error messages must be identical."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

from socketlab import cpulist

REPO = Path(__file__).resolve().parents[1]
HOST_FILE = REPO / "collectors" / "_cpulist.py"
MODULE_UTILS = REPO / "ansible_collections" / "socketlab" / "lab" / "plugins" / "module_utils"
LINK = MODULE_UTILS / "cpulist.py"
COPIES = {
    "host_file": HOST_FILE,
    "collector": REPO / "collectors" / "_collector.py",
}


def _load(name: str, path: Path):
    sys.path.insert(0, str(path.parent))  # as the collectors run: their folder on the path
    try:
        spec = importlib.util.spec_from_file_location(f"cpulist_copy_{name}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module


IMPLEMENTATIONS = {
    "package": cpulist,
    **{k: _load(k, p) for k, p in COPIES.items()},
    # as Ansible's collection loader names it (the checkout's root is on sys.path here)
    "module_utils": importlib.import_module(
        "ansible_collections.socketlab.lab.plugins.module_utils.isolation"
    ),
}
COPIES["module_utils"] = MODULE_UTILS / "isolation.py"

VALID = [
    "",
    "   ",
    "0",
    "7\n",
    "0-3,8,10-11",
    "3,3,1-3",
    " 5,1-2 \n",
    "0-15:2/4",
    "0-31:1/8,40",
    "4-4:1/1",  # the kernel's used/group strides
    "0-1 96-97",
    "0-1  4,6",
    "1, 2 ,3",  # blanks: systemd prints "0-1 96-97"
    "007,0010",
]
INVALID = [
    "3-1",
    "4-3",
    "5-0:1/2",  # backwards ranges
    "0-7:0/4",
    "0-7:5/4",
    "0-7:1/0",  # bad strides
    "a",
    "1-",
    "-1",
    "1,,2",
    "1,",
    ",1",
    "0x3",
    "1-2-3",
    "1:2/4",
    "0-3:2",
    "½",
    "1;2",
]


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


@pytest.mark.parametrize(
    "cpus",
    [
        [],
        [0],
        [0, 1],
        [5, 1, 2, 3, 9],
        [0, 2, 4],
        list(range(96, 128)),
        [0, 1, 2, 7, 9, 10, 11, 64, 191],
    ],
)
def test_every_copy_formats_like_the_package(cpus):
    texts = {name: impl.format_cpulist(cpus) for name, impl in IMPLEMENTATIONS.items()}
    assert len(set(texts.values())) == 1, texts
    assert cpulist.parse_cpulist(texts["package"]) == sorted(set(cpus))


def test_one_file_reaches_the_hosts():
    # one physical file: the module_utils name is a symlink to the collectors' file, and
    # neither _collector.py nor module_utils/isolation.py carries a parser of its own
    assert LINK.is_symlink() and os.readlink(LINK) == "../../../../../collectors/_cpulist.py"
    assert LINK.resolve() == HOST_FILE.resolve()
    for name in ("collector", "module_utils"):
        text = COPIES[name].read_text()
        assert "def parse_cpulist" not in text and "def format_cpulist" not in text, name
        parse = IMPLEMENTATIONS[name].parse_cpulist
        assert Path(parse.__code__.co_filename).resolve() == HOST_FILE.resolve(), name
