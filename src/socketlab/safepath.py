"""Paths built from names: the one check that such a path stays inside its parent folder.

Inventory host names, campaigns, experiment names and run keys become folder and file names:
``results/<campaign>/hosts/<host>.json``, ``<workroot>/<host>/``, ``results/<campaign>/runs/<run
key>/``. A name with a ``/``, or one that is ``..``, would put those files elsewhere; a leading
``-`` makes the path an option to the commands it is handed to (``rm -rf``, ``mkdir -p``);
control characters hide what a log line says. ``inside`` refuses all of these, for a local
``Path`` and for a host's path as a string alike, so every such path is built through it.
"""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import TypeVar

from socketlab.errors import PathError

P = TypeVar("P", str, Path)

#: what a name used as one path part may not be or hold (said in every refusal)
EXPECTED = "expected a name without '/', control characters or a leading '-', and not '.' or '..'"


def part_problem(name: object) -> str | None:
    """Why ``name`` can't be one path part (a folder or file name), or None when it can."""
    if not isinstance(name, str) or not name:
        return "it is empty" if name == "" else f"it is not a string ({type(name).__name__})"
    if name in (".", ".."):
        return f"'{name}' is not a name of its own: it would be the folder or its parent"
    if "/" in name:
        return "it holds '/', so it would be a path of several folders"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):  # NUL, newline, escape sequences
        return "it holds a control character"
    if name.startswith("-"):
        return "it starts with '-', so a command given the path would read an option"
    return None


def check_part(name: str, what: str) -> str:
    """``name``, or PathError "<what> <name>: <why>; <expected>"."""
    why = part_problem(name)
    if why:
        raise PathError(f"{what} {name!r}: {why}; {EXPECTED}")
    return name


def inside(parent: P, *names: str, what: str = "name", links: bool = True) -> P:
    """``parent/names[0]/names[1]/...``: each name must be one plain path part
    (``part_problem``), so the path stays inside ``parent``. A ``str`` parent (a path on a
    host) gives a ``str``; a ``Path`` a ``Path``. ``links=False`` (local paths only) also
    refuses a part below ``parent`` that is a symbolic link now: files written there would
    land wherever the link points."""
    for name in names:
        check_part(name, what)
    if isinstance(parent, str):
        return posixpath.join(parent, *names)
    path = Path(parent)
    for name in names:
        path = path / name
        if not links and path.is_symlink():
            raise PathError(
                f"{path}: is a symbolic link (to {path.readlink()}); expected a "
                f"folder of its own under {parent} (remove the link)"
            )
    return path
