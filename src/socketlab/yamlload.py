"""The one YAML document loader for specs and published-values files. It is total: any byte
sequence in, either (data, root node) or one SpecError line out.

PyYAML alone is not: a control character raises ReaderError from the loader's constructor, deep
nesting a RecursionError, a recursive alias a RecursionError later (in whoever walks the data),
"billion laughs" aliases expand to gigabytes in the schema check, a complex key (``? [a, b]``)
gives a TypeError, and ``yes: 1`` a boolean key. So, before the document is built: the size is
bounded, the text must be UTF-8 without control characters, the event stream is checked for
depth and alias expansion (without expanding), and the node graph for non-string keys. Number
scalars must be finite: ``.nan`` and ``.inf`` are never a valid setting or published value.
A key given twice is refused (PyYAML keeps the last silently), and every field path is mapped
to its line, so that a later check (the schema, the model) can name the line at fault.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import yaml

from socketlab.errors import SpecError
from socketlab.limits import limit, over

# Characters YAML 1.1 forbids in a stream (PyYAML's Reader.NON_PRINTABLE): C0 controls but
# tab/LF/CR, DEL, C1 controls but NEL, surrogates, U+FFFE/U+FFFF.
_NON_PRINTABLE = re.compile(
    "[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]"
)
_STR = "tag:yaml.org,2002:str"
_MERGE = "tag:yaml.org,2002:merge"
_FLOAT = "tag:yaml.org,2002:float"
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C parser: 5 MB in well under 1 s


def read_text(path: Path, what: str) -> tuple[bytes, str]:
    """The file's bytes and text; one line when unreadable, too big or not UTF-8."""
    try:
        size = path.stat().st_size
        if size > limit("SPEC_BYTES"):
            raise SpecError(f"{path}: {what} is {over('SPEC_BYTES', size, 'bytes')}")
        raw = path.read_bytes()
    except OSError as exc:
        raise SpecError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    return raw, decode(path, raw)


def decode(path: Path, raw: bytes) -> str:
    if len(raw) > limit("SPEC_BYTES"):
        raise SpecError(f"{path}: the file is {over('SPEC_BYTES', len(raw), 'bytes')}")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise SpecError(
            f"{path}:{line}: not UTF-8 text (byte {exc.start}); expected a UTF-8 YAML file"
        ) from None


def load_document(
    path: Path, text: str, *, syntax: str = "YAML syntax error", lines: dict | None = None
) -> tuple[Any, Any]:
    """(data, root node) of the single YAML document in ``text``; (None, None) when empty.

    ``syntax`` is the words a syntax error starts with (the callers' messages differ);
    ``lines`` receives field path (``field_path``) -> 1-based line, for ``line_of``.
    """
    bad = _NON_PRINTABLE.search(text)
    if bad:
        line = text.count("\n", 0, bad.start()) + 1
        raise SpecError(
            f"{path}:{line}: control character U+{ord(bad.group()):04X} in the "
            "file; expected printable text (write it as an escape in a quoted string)"
        )
    try:
        _check_events(path, text)
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None, None
            _check_nodes(path, node)
            _walk(path, node, [], {} if lines is None else lines)  # before merge keys fold in
            data = loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        problem = exc.problem or exc.context or "invalid YAML"
        what = "unsupported YAML" if isinstance(exc, yaml.constructor.ConstructorError) else syntax
        raise SpecError(f"{path}:{line}: {what}: {problem}") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"{path}:1: {syntax}: {exc}".splitlines()[0]) from None
    except (ValueError, TypeError, OverflowError) as exc:  # e.g. a date 2026-02-30
        raise SpecError(f"{path}:1: unsupported YAML value: {exc}".splitlines()[0]) from None
    return data, node


def field_path(parts: Any) -> str:
    """["experiments", 0, "sweep"] -> "experiments[0].sweep"."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def line_of(lines: dict[str, int], field_path: str) -> int:
    """Line of a field path, or of its nearest parent that has one (1 when none does)."""
    probe = field_path
    while probe:
        if probe in lines:
            return lines[probe]
        cut = max(probe.rfind("."), probe.rfind("["))
        probe = probe[:cut] if cut > 0 else ""
    return 1


def _walk(path: Path, node: yaml.Node, parts: list[Any], lines: dict[str, int]) -> None:
    """Record each field's line, and refuse duplicate keys."""
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value
            if key == "<<":  # merge key: its fields belong to this mapping
                continue
            line = key_node.start_mark.line + 1
            here = field_path([*parts, key])
            if key in seen:
                raise SpecError(
                    f"{path}:{line}: {here}: duplicate key '{key}' (first given on "
                    f"line {seen[key]})"
                )
            seen[key] = lines[here] = line
            _walk(path, value_node, [*parts, key], lines)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[field_path([*parts, index])] = item.start_mark.line + 1
            _walk(path, item, [*parts, index], lines)


def _check_events(path: Path, text: str) -> None:
    """Depth and expanded size from the event stream (iterative: no recursion, no expansion).

    An anchored collection's size is known when it ends; an alias adds that size. An alias to
    a collection still open is a recursive alias.
    """
    max_depth, max_nodes = limit("YAML_DEPTH"), limit("YAML_NODES")
    open_: list[tuple[str | None, int]] = []  # (anchor, node count at start)
    sizes: dict[str, int] = {}
    count = 0
    for event in yaml.parse(text, Loader=_Loader):
        line = event.start_mark.line + 1
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in (a for a, _ in open_):
                raise SpecError(
                    f"{path}:{line}: recursive alias *{event.anchor} (it refers to "
                    "a value that contains it); expected a tree"
                )
            count += sizes.get(event.anchor, 1)
        elif isinstance(event, yaml.ScalarEvent):
            count += 1
            if event.anchor:
                sizes[event.anchor] = 1
        elif isinstance(event, yaml.CollectionStartEvent):
            count += 1
            open_.append((event.anchor, count))
            if len(open_) > max_depth:
                raise SpecError(
                    f"{path}:{line}: nesting depth {over('YAML_DEPTH', len(open_), 'levels')}"
                )
        elif isinstance(event, yaml.CollectionEndEvent) and open_:
            anchor, start = open_.pop()
            if anchor:
                sizes[anchor] = count - start + 1
        if count > max_nodes:
            raise SpecError(
                f"{path}:{line}: the document, with its aliases expanded, has "
                f"{over('YAML_NODES', count, 'values')}"
            )


def _check_nodes(path: Path, root: yaml.Node) -> None:
    """Keys are plain strings; floats are finite; no NUL in a string. Each node once (aliases
    share nodes)."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        line = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if key.tag == _MERGE:
                    stack.append(value)
                    continue
                if not isinstance(key, yaml.ScalarNode):
                    raise SpecError(
                        f"{path}:{key.start_mark.line + 1}: a complex key (a list "
                        "or mapping as a key); expected a string key"
                    )
                if key.tag != _STR:
                    kind = key.tag.rsplit(":", 1)[-1]
                    raise SpecError(
                        f"{path}:{key.start_mark.line + 1}: key {key.value!r} reads "
                        f"as YAML {kind}, not a string; quote it: '{key.value}'"
                    )
                stack.extend((key, value))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
        elif "\x00" in node.value:
            raise SpecError(
                f"{path}:{line}: a NUL character (\\0) in a string; expected text "
                "without NUL (it can't reach a command line, an environment or a file "
                "name)"
            )
        elif node.tag in _SCALARS:
            try:  # constructed here too, so that a bad one is reported with its line
                value = _SCALARS[node.tag](_CONSTRUCTOR, node)
            except (ValueError, OverflowError) as exc:
                raise SpecError(
                    f"{path}:{line}: {_short(node.value)} is not a valid YAML "
                    f"{node.tag.rsplit(':', 1)[-1]}: {exc}".splitlines()[0]
                ) from None
            if isinstance(value, float) and not math.isfinite(value):
                raise SpecError(
                    f"{path}:{line}: {node.value!r} is not a finite number; "
                    "expected a number (no .nan or .inf)"
                )


def _short(text: str) -> str:
    return repr(text) if len(text) <= 40 else repr(text[:37]) + "..."


_CONSTRUCTOR = yaml.SafeLoader("")
_SCALARS = {
    _FLOAT: yaml.SafeLoader.construct_yaml_float,
    "tag:yaml.org,2002:int": yaml.SafeLoader.construct_yaml_int,
    "tag:yaml.org,2002:timestamp": yaml.SafeLoader.construct_yaml_timestamp,
}
