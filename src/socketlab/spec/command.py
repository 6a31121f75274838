"""The `command` experiment kind: argv, env and CPU list rendered from templates per point."""

from __future__ import annotations

import posixpath
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path

from socketlab.cpulist import CpuListLimit, format_cpulist, parse_cpulist
from socketlab.errors import SocketlabError, SpecError
from socketlab.layer.cache import DumpRef, dump_ref
from socketlab.limits import limit
from socketlab.safepath import inside
from socketlab.spec.kinds import PointContext, Rendered, register_kind
from socketlab.spec.model import Experiment, Spec
from socketlab.spec.render import Field, allowed_names, compile_field, render_field


@dataclass(frozen=True)
class CommandTemplates:
    argv: tuple[Field, ...]
    env: tuple[tuple[str, Field], ...]
    cpus: Field | None
    together: Field | None = None
    #: the `layer_dump:` block's fields (shape, context, batch, seed, kv_cap), or ()
    layer_dump: tuple[tuple[str, Field], ...] = ()


def prepare(spec: Spec, exp: Experiment) -> CommandTemplates:
    """Compile every template of the experiment; unknown names and bad syntax fail here."""
    allowed = allowed_names(exp.sweep.names)
    dump_block = exp.extra.get("layer_dump") or {}
    base = f"experiments[{exp.index}]"
    # the dump's fields see the sweep; the command sees the dump they name as `dump`
    layer_dump = tuple(
        (
            key,
            compile_field(
                spec.where(f"{base}.layer_dump.{key}"), f"{base}.layer_dump.{key}", source, allowed
            ),
        )
        for key, source in dump_block.items()
    )
    if dump_block:
        allowed = allowed | {"dump"}

    def compile_at(path: str, source: str) -> Field:
        return compile_field(spec.where(path), path, source, allowed)

    argv = tuple(
        compile_at(exp.origins[f"command[{j}]"], source) for j, source in enumerate(exp.command)
    )
    env = tuple((name, compile_at(exp.origins[f"env.{name}"], v)) for name, v in exp.env.items())
    cpus = compile_at(exp.origins["cpus"], exp.cpus) if exp.cpus is not None else None
    together = None
    if getattr(exp, "together", None) is not None:
        together = compile_at(exp.origins["together"], exp.together)
    return CommandTemplates(argv, env, cpus, together, layer_dump)


def render(point: PointContext) -> Rendered:
    templates: CommandTemplates = point.experiment.prepared
    spec, ctx, host, note = point.spec, point.context, point.host, point.isolation_note
    extra: dict = {}
    if point.experiment.extra.get("runs_on") == "controller":
        # host-independent work on the controller (socketlab.runner): its interpreter, which
        # has socketlab; a fresh host has only its image's python3
        ctx = {**ctx, "python": sys.executable}
        extra["runs_on"] = "controller"
    if templates.layer_dump:
        ref = _dump_ref(templates.layer_dump, ctx, spec, host, note)
        extra["layer_dump"] = ref.as_dict()
        ctx = {**ctx, "dump": {**ref.as_dict(), "dir": dump_dir(ctx["tools"], ref.key)}}
    argv = tuple(render_field(f, ctx, spec, host, note) for f in templates.argv)
    if not argv[0]:
        path = templates.argv[0].path
        raise SpecError(f"{spec.where(path)}: the program name renders empty on host {host}")
    env = {name: render_field(f, ctx, spec, host, note) for name, f in templates.env}
    cpus = None
    if templates.cpus is not None:
        field = templates.cpus
        text = render_field(field, ctx, spec, host, note)
        where = partial(spec.where, field.path)
        cpus = check_cpus(where, text, host, ctx.get("facts", {}))
    if templates.together is not None:
        group = render_field(templates.together, ctx, spec, host, note)
        if not group:
            path = templates.together.path
            raise SpecError(
                f"{spec.where(path)}: renders empty on host {host}; expected a group name"
            )
        extra["together"] = group
    return Rendered(argv, env, cpus, extra)


def dump_dir(tools: str, key: str) -> str:
    """Where a host keeps a dump: <workdir>/layer-dumps/<key> (the runner copies it there).
    The key starts with the shape file's own name: one that would leave the folder is refused
    here, when the plan is made, before the controller's cache or a host is touched."""
    return inside(posixpath.dirname(tools), "layer-dumps", key, what="layer dump key")


def _dump_ref(
    fields: tuple[tuple[str, Field], ...], ctx: dict, spec: Spec, host: str, note: str
) -> DumpRef:
    values: dict[str, object] = {}
    for key, f in fields:
        text = render_field(f, ctx, spec, host, note).strip()
        if key in ("shape", "variant"):
            values[key] = text
            continue
        if key == "checkpoint":  # a folder on the controller; relative: to the spec's folder
            values[key] = str((Path(spec.path).parent / text).resolve())
            continue
        try:
            values[key] = int(text)
        except ValueError:
            raise SpecError(
                f"{spec.where(f.path)}: renders to {_short(text)} on host {host}; "
                "expected a whole number"
            ) from None
    try:
        return dump_ref(**values)
    except SocketlabError as exc:
        path = next(f.path for k, f in fields if k == "shape")
        raise SpecError(f"{spec.where(path)}: on host {host}: {exc}") from None


def check_cpus(where: str | Callable[[], str], text: str, host: str, facts: dict) -> str:
    """A rendered CPU list: valid, not empty, and only CPUs that are online on the host."""
    cpus = _parse(text)
    if isinstance(cpus, str):  # well-formed, over a size limit: say which, not "malformed"
        raise SpecError(f"{_at(where)}: renders to {_short(text)} on host {host}: {cpus}")
    if cpus is None:
        raise SpecError(
            f"{_at(where)}: renders to {text!r} on host {host}; expected a CPU list like '2-5,8'"
        )
    if not cpus:
        raise SpecError(f"{_at(where)}: renders to an empty CPU list on host {host}")
    online = facts.get("cpu_online")
    if isinstance(online, str) and online:
        known = _parse(online)
        missing = cpus - (known if isinstance(known, frozenset) else frozenset())
        if missing:
            raise SpecError(
                f"{_at(where)}: CPUs {format_cpulist(missing)} are not online on host {host} "
                f"(online: {online})"
            )
    return _format(cpus)


def _at(where: str | Callable[[], str]) -> str:
    return where if isinstance(where, str) else where()


def _parse(text: str) -> frozenset[int] | str | None:
    """parse_cpulist, memoized: a sweep renders the same few lists thousands of times. None
    for a malformed list, the reason for one over a limit."""
    return _parse_within(text, limit("CPU_ID"), limit("CPUS"))


@lru_cache(maxsize=4096)
def _parse_within(text: str, *_limits: int) -> frozenset[int] | str | None:
    """_parse, keyed by the limits too: a raised limit must not get the old refusal."""
    try:
        return frozenset(parse_cpulist(text))
    except CpuListLimit as exc:
        return exc.reason
    except ValueError:
        return None


def _short(text: str) -> str:
    return repr(text) if len(text) <= 60 else repr(text[:57]) + "..."


@lru_cache(maxsize=4096)
def _format(cpus: frozenset[int]) -> str:
    return format_cpulist(cpus)


register_kind("command", render, prepare)
