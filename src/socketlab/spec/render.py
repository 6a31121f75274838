"""Jinja2 templates in specs: compiled once, checked at load, rendered per point.

Templates run in a sandboxed environment with StrictUndefined, so a typo is an error at plan
time, never an empty string in a command. Each argv element is rendered on its own and stays
one argv element: nothing is ever passed through a shell.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any

from jinja2 import StrictUndefined, TemplateSyntaxError, meta, nodes
from jinja2.exceptions import SecurityError, UndefinedError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from socketlab.cpulist import format_cpulist, parse_cpulist
from socketlab.errors import SpecError
from socketlab.spec.model import CONTEXT_NAMES

#: Keys an isolation plan adds to `facts`; when one is missing, say why there is no plan.
ISOLATION_KEYS = (
    "housekeeping",
    "workers",
    "siblings",
    "housekeeping_list",
    "workers_list",
    "siblings_list",
    "workers_by_node",
    "workqueue_mask",
    "isolated",
    "isolated_list",
)


def _cpulist_filter(value: Any) -> str:
    if isinstance(value, str):
        return format_cpulist(parse_cpulist(value))
    return format_cpulist(int(v) for v in value)


def _cpus_filter(value: Any) -> list[int]:
    return parse_cpulist(value) if isinstance(value, str) else sorted(int(v) for v in value)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        undefined=StrictUndefined, autoescape=False, keep_trailing_newline=False
    )
    env.filters["cpulist"] = _cpulist_filter  # [2, 3, 4] -> "2-4"
    env.filters["cpus"] = _cpus_filter  # "2-4" -> [2, 3, 4]
    return env


ENV = _environment()


def is_template(text: str) -> bool:
    return "{{" in text or "{%" in text or "{#" in text


@dataclass(frozen=True)
class Field:
    """One templated value: where it came from, and either a compiled template or a literal."""

    path: str  #: field path in the spec, e.g. "experiments[0].command"
    source: str
    template: Any = None  #: jinja2.Template, None for a literal

    def render(self, context: dict[str, Any]) -> str:
        """Render with `context` as the template's whole namespace (see `base_context`).

        shared=True skips copying the environment's globals into every context, which is
        most of Jinja's per-render cost; base_context puts them in once per host instead.
        """
        if self.template is None:
            return self.source
        template = self.template
        return ENV.concat(template.root_render_func(template.new_context(context, shared=True)))


def base_context(**names: Any) -> dict[str, Any]:
    """The namespace templates render in: Jinja's globals (range, dict, ...) plus `names`."""
    return {**ENV.globals, **names}


def compile_field(where: str, path: str, source: str, allowed: set[str]) -> Field:
    """Compile `source`; check its syntax and that every name it uses is known.

    `where` is the "FILE:LINE: path" prefix for errors; `allowed` the names a template may use.
    """
    if not is_template(source):
        return Field(path, source)
    try:
        ast = ENV.parse(source)
    except TemplateSyntaxError as exc:
        raise SpecError(f"{where}: template syntax error: {exc.message} in {source!r}") from None
    for node in ast.find_all(nodes.Filter):
        if node.name not in ENV.filters:
            raise SpecError(
                f"{where}: unknown filter '{node.name}'{suggest(node.name, ENV.filters)}"
            )
    for node in ast.find_all(nodes.Test):
        if node.name not in ENV.tests:
            raise SpecError(f"{where}: unknown test '{node.name}'{suggest(node.name, ENV.tests)}")
    try:
        unknown = sorted(meta.find_undeclared_variables(ast) - allowed)
        template = ENV.from_string(ast)
    except TemplateSyntaxError as exc:
        raise SpecError(f"{where}: template error: {exc.message} in {source!r}") from None
    if unknown:
        name = unknown[0]
        raise SpecError(f"{where}: undefined variable '{name}'{suggest(name, allowed)}")
    params = allowed - set(CONTEXT_NAMES)
    for node in ast.find_all(nodes.Getattr):
        target = node.node
        if isinstance(target, nodes.Name) and target.name == "params" and node.attr not in params:
            hint = suggest(node.attr, params, prefix="params.")
            raise SpecError(f"{where}: undefined parameter 'params.{node.attr}'{hint}")
    return Field(path, source, template)


def allowed_names(params: tuple[str, ...]) -> set[str]:
    return set(params) | set(CONTEXT_NAMES)


def render_field(
    field: Field, context: dict[str, Any], where: Any, host: str, isolation_note: str = ""
) -> str:
    """Render one field; turn every template failure into a one-line SpecError.

    `where` is the "FILE:LINE: field" prefix, or the Spec, whose where(field.path) is then
    worked out only when there is an error (most renders never need it).
    """
    try:
        return field.render(context)
    except UndefinedError as exc:
        message = _undefined_message(exc, field.source, context, host, isolation_note)
        raise SpecError(f"{_where(where, field)}: {message}") from None
    except SecurityError as exc:
        raise SpecError(f"{_where(where, field)}: not allowed in a template: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - any template failure is the spec's fault
        raise SpecError(
            f"{_where(where, field)}: template {field.source!r} failed on host {host}: "
            f"{type(exc).__name__}: {exc}"
        ) from None


def _where(where: Any, field: Field) -> str:
    return where if isinstance(where, str) else where.where(field.path)


def _undefined_message(
    exc: UndefinedError, source: str, context: dict[str, Any], host: str, isolation_note: str
) -> str:
    text = str(exc)
    match = re.search(r"has no (?:attribute|element) '([^']+)'", text)
    if not match:
        return f"undefined value on host {host}: {text}"
    name = re.escape(match.group(1))
    owner = re.search(rf"(\w+)\s*(?:\.\s*{name}\b|\[\s*['\"]{name}['\"]\s*\])", source)
    name = match.group(1)
    if owner and owner.group(1) == "facts":
        why = f"; {isolation_note}" if name in ISOLATION_KEYS and isolation_note else ""
        hint = suggest(name, context.get("facts", {}), prefix="facts.")
        return f"undefined fact 'facts.{name}' on host {host}{why}{hint}"
    if owner and owner.group(1) == "vars":
        hint = suggest(name, context.get("vars", {}), prefix="vars.")
        return f"undefined inventory variable 'vars.{name}' on host {host}{hint}"
    if owner:
        return f"undefined '{owner.group(1)}.{name}' on host {host}"
    return f"undefined '{name}' on host {host}: {text}"


def suggest(name: str, choices: Any, prefix: str = "") -> str:
    """' (did you mean 'x'?)' for the nearest choice, or '' when nothing is close."""
    close = difflib.get_close_matches(name, [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean '{prefix}{close[0]}'?)" if close else ""
