"""Metric parsers: raw run output in, metric records out. Pure and versioned.

Two kinds, named in a spec's ``parsers`` (socketlab.spec.points.ParserSpec):

- ``jsonl``: the native contract (docs/architecture.md): one ``{"type":"meta",...}`` record and
  ``{"type":"metric","name":...,"value":...,"unit":...,<dims>}`` records on stdout.
- ``regex``: named-group regexes for external tools (sysbench, fio text output).

Every metric carries the parser that produced it (``jsonl/1``), so a parser change that alters
numbers is visible in the store and old rows can be told apart from new ones.

What collectors leave in a run's folder is parsed by ``socketlab.parse.collectors``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from socketlab.parse.jsonl import VERSION as JSONL_VERSION
from socketlab.parse.jsonl import parse_jsonl
from socketlab.parse.regex import VERSION as REGEX_VERSION
from socketlab.parse.regex import parse_regex

#: parser kind -> implementation version (bump when output for the same input changes)
VERSIONS = {"jsonl": JSONL_VERSION, "regex": REGEX_VERSION}


@dataclass(frozen=True)
class Metric:
    name: str
    value: float
    unit: str
    dims: dict[str, Any] = field(default_factory=dict)  #: extra labels, e.g. {"kernel": "load"}
    parser: str = ""  #: "<kind>/<version>"


@dataclass
class Parsed:
    metrics: list[Metric] = field(default_factory=list)
    meta: list[dict[str, Any]] = field(default_factory=list)  #: jsonl meta records, as printed
    errors: list[str] = field(default_factory=list)  #: malformed records, one line each


def parse_output(parsers, stdout: str, stderr: str = "") -> Parsed:
    """Run every parser of a point over its output.

    ``parsers`` is a sequence of ParserSpec-like objects (``kind``, ``options``).
    """
    result = Parsed()
    for spec in parsers:
        kind = spec.kind
        if kind == "jsonl":
            metrics, meta, errors = parse_jsonl(stdout)
        elif kind == "regex":
            metrics, meta, errors = parse_regex(dict(spec.options or {}), stdout, stderr)
        else:
            result.errors.append(f"unknown parser kind {kind!r} (expected jsonl or regex)")
            continue
        tag = f"{kind}/{VERSIONS[kind]}"
        result.metrics.extend(
            Metric(m["name"], m["value"], m["unit"], m["dims"], tag) for m in metrics
        )
        result.meta.extend(meta)
        result.errors.extend(errors)
    return result
