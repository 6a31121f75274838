"""Experiment kinds: how one sweep point of an experiment becomes argv, env, cpus and extras.

`command` is built in (socketlab.spec.expand). Other kinds plug in here: a module named in
`PLUGINS` is imported the first time a spec uses its kind and calls `register_kind`. The schema
side is the `$defs/serving` entry of schemas/spec.schema.json.

A kind's `prepare(spec, experiment)` runs at load time: it checks the experiment (raise SpecError
naming spec.where(field)) and returns whatever it wants kept, e.g. compiled templates, which
`load_spec` stores in `Experiment.prepared`. Its `render(point: PointContext) -> Rendered` runs
once per sweep point and host and must be pure (no I/O): expansion is a function of the spec
and the host facts only. An optional `axes(spec, experiment)` returns parameter sets crossed
with the sweep (each sweep point once per set, e.g. once per serving arm).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from socketlab.errors import SpecError

#: kind -> module that registers it when imported
PLUGINS = {"command": "socketlab.spec.command", "serving": "socketlab.serve.spec"}


@dataclass(frozen=True)
class Rendered:
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    cpus: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PointContext:
    spec: Any  #: socketlab.spec.model.Spec
    experiment: Any  #: socketlab.spec.model.Experiment
    host: str
    params: dict[str, Any]
    context: dict[str, Any]  #: what templates see: facts, params, host, vars, ... and each param
    isolation_note: str = ""  #: why facts.workers etc. are missing, if they are


@dataclass(frozen=True)
class KindHandler:
    render: Callable[[PointContext], Rendered]
    prepare: Callable[[Any, Any], Any] | None = None
    #: extra parameter sets a kind crosses with the sweep (serving: one per arm), from the
    #: prepared experiment: (spec, experiment) -> [{"arm": "a", ...}, ...]
    axes: Callable[[Any, Any], list[dict[str, Any]]] | None = None


_HANDLERS: dict[str, KindHandler] = {}


def register_kind(
    kind: str,
    render: Callable[[PointContext], Rendered],
    prepare: Callable[[Any, Any], Any] | None = None,
    axes: Callable[[Any, Any], list[dict[str, Any]]] | None = None,
) -> None:
    _HANDLERS[kind] = KindHandler(render, prepare, axes)


def handler(kind: str, where: str) -> KindHandler:
    """The handler of `kind`, importing its plugin module on first use."""
    if kind not in _HANDLERS and kind in PLUGINS:
        try:
            importlib.import_module(PLUGINS[kind])
        except ModuleNotFoundError as exc:
            if exc.name and PLUGINS[kind].startswith(exc.name):
                raise SpecError(
                    f"{where}: kind '{kind}' is not available in this installation "
                    f"({PLUGINS[kind]} is missing)"
                ) from None
            raise
    if kind not in _HANDLERS:
        raise SpecError(
            f"{where}: kind '{kind}' has no expander; expected one of "
            f"{', '.join(sorted(_HANDLERS))}"
        )
    return _HANDLERS[kind]
