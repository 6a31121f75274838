"""What a build's `target` and `flags` may hold: the words the spec hands to make and, through
make's shell, to the compiler on every host (docs/spec.md, "Security").

make reads each word of its command line as an option (``-...``, ``--eval=...``), a variable
assignment (anything with ``=``: ``X:=$(shell ...)`` runs when make reads it) or a goal, so a
`target` must be a goal name and nothing else. `flags` become CFLAGS: options that change how
code is compiled are data, but some compiler options name files to write or read (``-MF``,
``-o``, ``@file``, ``-specs``) or programs to run (``-wrapper``, ``-B``, ``-fplugin``), and
those would let a spec that looks like data write anywhere or run anything on the host. So
flags are an allow-list of option forms; the refused ones get their reason. `cc` names the
program make runs (trusted like `command`); the schema keeps it a command or path, not an
option.
"""

from __future__ import annotations

import re

#: a make goal: no option (leading '-'), no assignment ('=', ':'), no shell or make syntax
_GOAL = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_./-]*")
GOAL_EXPECTED = (
    "expected a make goal: letters, digits, '_', '.', '/', '-', not starting with "
    "'-' or '/', no '..' part (e.g. all or build/cc/ladder)"
)


def target_problem(target: str) -> str | None:
    """Why ``target`` is not a make goal name that stays in the build's folder, or None."""
    if target.startswith("-"):
        return f"{target!r} starts with '-', so make would read it as an option"
    for char, what in (("=", "a variable assignment"), (":", "a variable assignment or rule")):
        if char in target:
            return f"{target!r} holds {char!r}, so make would read it as {what}"
    if target.startswith("/"):
        return f"{target!r} is an absolute path, outside the build's folder"
    if not _GOAL.fullmatch(target):
        bad = next((c for c in target if not re.fullmatch(r"[A-Za-z0-9_./-]", c)), target[:1])
        return f"character {bad!r} is not allowed in a make goal"
    if ".." in target.split("/"):
        return f"{target!r} has a '..' part, so it names a file outside the build's folder"
    return None


#: options refused whatever follows them, with why: they name files or programs
_REFUSED = (
    (r"-o.*", "names the output file"),
    (r"-M.*", "is dependency output (-MD, -MF FILE...): it writes files where it says"),
    (r"@.*", "reads more options from a file"),
    (
        r"-I.*|-L.*|-i.*|--?sysroot.*",
        "names files or folders to read (include and library paths belong in the Makefile)",
    ),
    (r"-save-temps.*|-dump.*", "writes files where it says"),
    (
        r"-wrapper.*|-B.*|--?specs.*|-fplugin.*|-fpass-plugin.*|-fuse-ld.*|--?ld-path.*|-X.*"
        r"|-W[alp](,.*)?|-mllvm.*",
        "runs another program, or hands words to one",
    ),
)
#: the option forms flags may hold (FORMS_EXPECTED says them in words)
_ALLOWED = re.compile(
    "|".join(
        (
            r"-O[0-3sgz]?|-Ofast",  # optimisation level
            r"-m(?:arch|tune|cpu)=[A-Za-z0-9_.+-]+",  # target CPU
            # ISA features (-mavx512f) and code generation (-fno-tree-vectorize); a value is a word,
            # never a path: no '/', no leading '.'
            r"-m(?:no-)?[a-z0-9][a-z0-9_-]*(?:=[A-Za-z0-9_,+-][A-Za-z0-9_.,+-]*)?",
            r"-f(?:no-)?[a-z0-9][a-z0-9_+-]*(?:=[A-Za-z0-9_,+-][A-Za-z0-9_.,+-]*)?",
            # macros
            r"-D[A-Za-z_][A-Za-z0-9_]*(?:=[A-Za-z0-9_=+,.:/@%-]*)?|-U[A-Za-z_][A-Za-z0-9_]*",
            r"-g[a-z0-9-]*(?:=[a-z0-9]+)?",  # debug information
            r"-W(?:no-)?[a-z0-9][a-z0-9_=-]*",  # warnings
            r"-std=[a-z0-9+]+|-pthread|-pipe|-w|-pedantic(?:-errors)?",
        )
    )
)
FORMS_EXPECTED = (
    "expected compiler options of the forms -O<level>, -march=/-mtune=/-mcpu=<cpu>, "
    "-m<feature>, -f<option>[=value], -D<macro>[=value], -U<macro>, -g<debug>, "
    "-W<warning>, -std=<standard>, -pthread, -pipe, -w, -pedantic (docs/spec.md, "
    "Security)"
)


def flag_problem(flags: str) -> str | None:
    """Why ``flags`` (CFLAGS, already free of shell and make syntax) holds an option outside
    the allowed forms, or None. Values never hold '/', so a file an -f option writes (e.g.
    -fdump-tree-all) lands in the build's own folder."""
    for word in flags.split():
        for pattern, why in _REFUSED:
            if re.fullmatch(pattern, word):
                return f"{word!r} {why}"
        if not _ALLOWED.fullmatch(word):
            if not word.startswith("-"):
                return f"{word!r} is not an option (the compiler would take it as an input file)"
            return f"{word!r} is not one of the allowed option forms"
    return None
