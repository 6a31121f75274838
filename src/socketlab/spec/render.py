"""Jinja2 templates in specs: compiled once, checked at load, rendered per point.

Templates run in a sandboxed environment with StrictUndefined, so a typo is an error at plan
time, never an empty string in a command. Each argv element is rendered on its own and stays
one argv element: nothing is ever passed through a shell.
"""

from __future__ import annotations

import difflib
import functools
import re
import threading
from dataclasses import dataclass
from typing import Any

from jinja2 import StrictUndefined, TemplateSyntaxError, meta, nodes
from jinja2.exceptions import SecurityError, UndefinedError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from socketlab.cpulist import CpuListLimit, format_cpulist, parse_cpulist
from socketlab.errors import SpecError
from socketlab.limits import limit, over
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
        return format_cpulist(_parsed(value))
    return format_cpulist(int(v) for v in value)


def _cpus_filter(value: Any) -> list[int]:
    return _parsed(value) if isinstance(value, str) else sorted(int(v) for v in value)


def _parsed(text: str) -> list[int]:
    try:
        return parse_cpulist(text)
    except CpuListLimit as exc:  # a limit, said as the other render limits are
        raise TemplateLimit(f"its CPU list has {exc.reason}") from None


class TemplateLimit(Exception):
    """A template went over a render limit (socketlab.limits); the message says which."""


class _Budget(threading.local):
    steps = 0  #: loop iterations of the render in progress (runners render in threads)


_BUDGET = _Budget()
#: width or precision in a format string: "%0200000000d", "%.200000000f", "{:>200000000}"
_FORMAT_WIDTH = re.compile(r"%[-+ #0*]*(\d{6,})|%[-+ #0*\d]*\.(\d{6,})|\{[^{}]*:[^{}]*?(\d{6,})")
_WIDTH_METHODS = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs"})
#: jinja filters whose int arguments size what they make (center(10**9), batch(10**9))
_WIDTH_FILTERS = frozenset({"do_center", "do_indent", "do_wordwrap", "do_batch", "do_slice"})


def _steps(iterable: Any) -> Any:
    """Wraps every {% for %}'s iterable (see compile_field): each item costs one step, so
    nested range(100000) loops stop at RENDER_STEPS instead of running for hours."""
    cap = limit("RENDER_STEPS")
    for item in iterable:
        _BUDGET.steps += 1
        if _BUDGET.steps > cap:
            raise TemplateLimit(
                f"its loops make {over('RENDER_STEPS', f'more than {cap}', 'steps')}"
            )
        yield item


def _check_size(value: Any) -> Any:
    if isinstance(value, str | list | tuple | dict) and len(value) > limit("RENDER_BYTES"):
        raise TemplateLimit(f"a value of {over('RENDER_BYTES', len(value), 'items')}")
    if isinstance(value, int) and value.bit_length() > limit("RENDER_INT_BITS"):
        raise TemplateLimit(f"an integer of {over('RENDER_INT_BITS', value.bit_length(), 'bits')}")
    return value


def _check_format(text: Any) -> None:
    if isinstance(text, str):
        for groups in _FORMAT_WIDTH.findall(text):
            width = next(g for g in groups if g)
            if int(width) > limit("RENDER_BYTES"):
                raise TemplateLimit(
                    f"a format width of {over('RENDER_BYTES', int(width), 'bytes')}"
                )


def _check_width_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    for arg in (*args, *kwargs.values()):
        if isinstance(arg, int) and not isinstance(arg, bool) and arg > limit("RENDER_BYTES"):
            raise TemplateLimit(f"a width or count of {over('RENDER_BYTES', arg)}")


class _BoundedEnvironment(ImmutableSandboxedEnvironment):
    """The sandbox with sizes bounded before they are made: `'x' * 200000000` and
    `10 ** 3000000000` are refused from their operands, not computed. Intercepted operators
    are also never constant-folded at compile time."""

    intercepted_binops = frozenset({"*", "**", "%", "+", "//"})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        ints = isinstance(left, int) and isinstance(right, int)
        if operator == "**" and ints and right > 0 and abs(left) > 1:
            bits = (abs(left).bit_length() - 1) * right
            if bits > limit("RENDER_INT_BITS"):
                raise TemplateLimit(
                    f"{left} ** {right} has {over('RENDER_INT_BITS', bits, 'bits')}"
                )
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                sized = isinstance(seq, str | list | tuple) and isinstance(n, int)
                if sized and len(seq) * n > limit("RENDER_BYTES"):
                    raise TemplateLimit(f"a value of {over('RENDER_BYTES', len(seq) * n, 'items')}")
            bits = left.bit_length() + right.bit_length() if ints else 0
            if bits > limit("RENDER_INT_BITS"):
                raise TemplateLimit(f"a product of {over('RENDER_INT_BITS', bits, 'bits')}")
        if operator == "%":
            _check_format(left)
        return _check_size(super().call_binop(context, operator, left, right))

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        name = getattr(__obj, "__name__", "")
        # the sandbox hands out str.format wrapped (functools.update_wrapper: __wrapped__)
        owner = getattr(getattr(__obj, "__wrapped__", __obj), "__self__", None)
        if isinstance(owner, str):
            if name in _WIDTH_METHODS:
                _check_width_args(args, kwargs)
            elif name in ("format", "format_map"):
                _check_format(owner)
        return _check_size(super().call(__context, __obj, *args, **kwargs))


def _bounded_filter(func: Any) -> Any:
    """A filter whose width/count arguments and result are size-checked (`center(10**9)`,
    `'%0200000000d' | format(1)`); jinja calls filters directly, not through `call`."""

    # jinja passes a context, eval context or environment first to the filters marked so;
    # the mark, not the argument, says which (an Undefined argument raises on any hasattr,
    # which broke `vars.x | default(3)`)
    skip = 1 if getattr(func, "jinja_pass_arg", None) is not None else 0

    @functools.wraps(func)
    def bounded(*args: Any, **kwargs: Any) -> Any:
        values = args[skip:]
        if values and func.__name__ == "do_format":  # `'%0200000000d' | format(1)`
            _check_format(values[0])
        if func.__name__ in _WIDTH_FILTERS:
            _check_width_args(tuple(values[1:]), kwargs)
        result = func(*args, **kwargs)
        if isinstance(result, str | list | tuple):
            _check_size(result)
        return result

    return bounded


def _layer_matrices_filter(shape: Any, part: Any = "layer") -> str:
    """`'gemma4-e2b-l0' | layer_matrices`: the shape's GEMV matrices as `gemv --layer` takes
    them, read here on the controller (a host needs no shape files and no socketlab);
    `layer_matrices('expert')`: one MoE expert's (gate, up, down)."""
    from socketlab.errors import SocketlabError
    from socketlab.layer.shapes import load_shape

    try:
        return load_shape(str(shape)).gemv_layer_arg(str(part))
    except SocketlabError as exc:
        raise TemplateLimit(f"layer_matrices: {exc}") from None


def _kv_cold_mib_filter(facts: Any) -> int:
    """`facts | kv_cold_mib`: path A's rotated-KV target for the host (3.2 x its L3, in MiB;
    socketlab.layer.kvpolicy)."""
    from socketlab.layer.kvpolicy import cold_mib

    try:
        return cold_mib(facts)
    except ValueError as exc:
        raise TemplateLimit(f"kv_cold_mib: {exc}") from None


def _environment() -> ImmutableSandboxedEnvironment:
    env = _BoundedEnvironment(
        undefined=StrictUndefined, autoescape=False, keep_trailing_newline=False
    )
    env.filters["cpulist"] = _cpulist_filter  # [2, 3, 4] -> "2-4"
    env.filters["cpus"] = _cpus_filter  # "2-4" -> [2, 3, 4]
    env.filters["layer_matrices"] = _layer_matrices_filter  # shape -> "ROWSxCOLS,..."
    env.filters["kv_cold_mib"] = _kv_cold_mib_filter  # facts -> MiB of rotated KV (path A)
    env.filters = {name: _bounded_filter(f) for name, f in env.filters.items()}
    env.filters[_STEPS_FILTER] = _steps
    return env


_STEPS_FILTER = "socketlab_steps"  # not a name: a spec can't write it (it checks filter names)


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
        _BUDGET.steps = 0
        cap, size, pieces = limit("RENDER_BYTES"), 0, []
        for piece in template.root_render_func(template.new_context(context, shared=True)):
            size += len(piece)
            if size > cap:  # checked as it grows: a loop can't print gigabytes first
                raise TemplateLimit(
                    f"the rendered value has {over('RENDER_BYTES', f'more than {cap}', 'bytes')}"
                )
            pieces.append(piece)
        return ENV.concat(pieces)


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
    except (ValueError, OverflowError, RecursionError, MemoryError) as exc:  # 5,000-digit literal
        raise SpecError(
            f"{where}: template {_short(source)} can't be compiled: "
            f"{type(exc).__name__}: {str(exc)[:120]}"
        ) from None
    for node in ast.find_all(nodes.Filter):
        if node.name not in ENV.filters:
            raise SpecError(
                f"{where}: unknown filter '{node.name}'{suggest(node.name, ENV.filters)}"
            )
    for node in ast.find_all(nodes.Test):
        if node.name not in ENV.tests:
            raise SpecError(f"{where}: unknown test '{node.name}'{suggest(node.name, ENV.tests)}")
    for node in ast.find_all(nodes.For):  # every loop pays its steps (see _steps)
        node.iter = nodes.Filter(node.iter, _STEPS_FILTER, [], [], None, None, lineno=node.lineno)
    try:
        unknown = sorted(meta.find_undeclared_variables(ast) - allowed)
        template = ENV.from_string(ast)
    except TemplateSyntaxError as exc:
        raise SpecError(f"{where}: template error: {exc.message} in {source!r}") from None
    except (ValueError, OverflowError, RecursionError, MemoryError) as exc:
        raise SpecError(
            f"{where}: template {_short(source)} can't be compiled: "
            f"{type(exc).__name__}: {str(exc)[:120]}"
        ) from None
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
        text = field.render(context)
        if "\x00" in text:  # argv, env and file names are C strings: NUL would cut them short
            raise TemplateLimit("it renders a NUL character; expected text without NUL")
        return text
    except UndefinedError as exc:
        message = _undefined_message(exc, field.source, context, host, isolation_note)
        raise SpecError(f"{_where(where, field)}: {message}") from None
    except SecurityError as exc:
        raise SpecError(f"{_where(where, field)}: not allowed in a template: {exc}") from None
    except TemplateLimit as exc:
        raise SpecError(
            f"{_where(where, field)}: template {_short(field.source)} on host {host}: {exc}"
        ) from None
    except (MemoryError, RecursionError) as exc:
        raise SpecError(
            f"{_where(where, field)}: template {_short(field.source)} on host "
            f"{host}: too big to render ({type(exc).__name__})"
        ) from None
    except Exception as exc:  # noqa: BLE001 - any template failure is the spec's fault
        raise SpecError(
            f"{_where(where, field)}: template {field.source!r} failed on host {host}: "
            f"{type(exc).__name__}: {exc}"
        ) from None


def _short(source: str) -> str:
    return repr(source) if len(source) <= 60 else repr(source[:57]) + "..."


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
