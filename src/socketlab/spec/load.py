"""Load a spec file: YAML with line marks -> JSON Schema -> semantic checks -> `Spec`.

Every problem is a one-line SpecError "FILE:LINE: field.path: message (did you mean 'x'?)".
The YAML is composed into nodes first so each field path can be mapped back to its line.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import shlex
from functools import lru_cache
from itertools import product
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from socketlab.errors import SpecError
from socketlab.limits import limit, over
from socketlab.paths import COLLECTORS, NATIVE, SCHEMAS
from socketlab.spec import kinds
from socketlab.spec.buildargs import FORMS_EXPECTED, GOAL_EXPECTED, flag_problem, target_problem
from socketlab.spec.model import (
    CONTEXT_NAMES,
    Build,
    Experiment,
    Requirements,
    Spec,
    Sweep,
)
from socketlab.spec.points import ParserSpec, SanityRules
from socketlab.spec.profiles import apply_profile
from socketlab.spec.render import suggest
from socketlab.yamlload import field_path, line_of, load_document, read_text

SCHEMA_FILE = SCHEMAS / "spec.schema.json"
#: Settings an experiment may inherit from `defaults` (env is merged, the rest replaced).
SETTINGS = (
    "env",
    "cpus",
    "timeout_s",
    "repetitions",
    "warmup",
    "order",
    "seed",
    "sanity",
    "metrics",
    "collectors",
    "requires",
    "together",
)
DEFAULTS = {"timeout_s": 600.0, "repetitions": 1, "warmup": 0, "order": "sequential", "seed": 0}
REGEX_PARSER_VERSION = "1"
JSONL_PARSER_VERSION = "1"


@lru_cache(maxsize=1)
def collector_names() -> tuple[str, ...]:
    """Names a spec's `collectors` may list: collectors/<name>.py that speak the start/stop
    ``--out DIR`` contract (docs/architecture.md). Helpers (``_*.py``) and host tools that
    don't (host_facts.py, dma_latency_hold.py) are not collectors."""

    def speaks_contract(text: str) -> bool:  # runs the shared machinery, or its own --out parser
        # _collector.run, not any import of _collector: dma_latency_hold.py uses its helpers too
        return bool(re.search(r"\b_collector\.run\(", text)) or '"--out"' in text

    return tuple(
        p.stem
        for p in sorted(COLLECTORS.glob("*.py"))
        if not p.name.startswith("_") and speaks_contract(p.read_text(errors="replace"))
    )


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    return json.loads(SCHEMA_FILE.read_text())


@lru_cache(maxsize=1)
def _validator() -> Draft202012Validator:
    return Draft202012Validator(schema())


# --- YAML with marks -----------------------------------------------------------------------


def _read_yaml(path: Path, text: str) -> tuple[Any, dict[str, int]]:
    """Parse YAML (socketlab.yamlload: total, bounded); return the data and a map field path ->
    1-based line."""
    lines: dict[str, int] = {}
    data, node = load_document(path, text, lines=lines)
    if node is None:
        raise SpecError(
            f"{path}:1: the file is empty; expected a mapping with schema_version, "
            "campaign and experiments"
        )
    return data, lines


# --- schema errors -------------------------------------------------------------------------

_TYPE_WORDS = {
    "object": "a mapping",
    "array": "a list",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "null": "nothing",
}


def _describe(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref and ref.startswith("#/$defs/"):
        return _resolve(schema()["$defs"][ref.removeprefix("#/$defs/")])
    return node


def _known_keys(node: dict[str, Any]) -> list[str]:
    """Property names a schema object accepts, following $ref and allOf."""
    node = _resolve(node)
    keys = list(node.get("properties", {}))
    for sub in node.get("allOf", []):
        keys += _known_keys(sub)
    return keys


def _pick(errors: list[ValidationError]) -> ValidationError:
    """The most useful error: inside anyOf, the branch whose type matched."""
    error = min(errors, key=lambda e: (-len(e.absolute_path), str(e.absolute_path)))
    if error.validator in ("anyOf", "oneOf") and error.context:
        typed = [e for e in error.context if e.validator != "type"]
        if typed:
            return _pick(typed)
    return error


def _schema_message(error: ValidationError) -> tuple[list[Any], str]:
    """(path of the field at fault, message) for one schema error."""
    parts = list(error.absolute_path)
    validator, value, instance = error.validator, error.validator_value, error.instance
    expected = error.schema.get("x-expected") if isinstance(error.schema, dict) else None
    if "propertyNames" in error.absolute_schema_path and isinstance(instance, str):
        return [*parts, instance], f"invalid name {instance!r}; expected {expected or value}"
    if validator in ("additionalProperties", "unevaluatedProperties"):
        known = _known_keys(error.schema)
        unknown = [k for k in instance if k not in known]
        if not unknown:
            # unevaluatedProperties also fires when a known key failed its own check (its
            # annotations are dropped); that key's own error says what is wrong.
            return parts, ""
        key = unknown[0]
        hint = suggest(key, known) or f"; expected one of: {', '.join(sorted(known))}"
        return [*parts, key], f"unknown key '{key}'{hint}"
    if validator == "required":
        missing = [k for k in value if k not in instance]
        return parts, f"missing required key '{missing[0]}'"
    if validator == "const" and parts == ["schema_version"]:
        return parts, f"unsupported schema_version {_describe(instance)}; expected 1"
    if validator == "enum":
        hint = suggest(str(instance), value)
        choices = ", ".join(str(v) for v in value)
        return parts, f"{_describe(instance)} is not one of: {choices}{hint}"
    if validator == "type":
        types = [value] if isinstance(value, str) else value
        want = " or ".join(_TYPE_WORDS.get(t, t) for t in types)
        return parts, f"expected {want}, got {_describe(instance)}"
    if validator in ("minProperties", "minItems", "minLength") and value == 1:
        return parts, "must not be empty"
    if validator in ("minimum", "exclusiveMinimum"):
        op = ">=" if validator == "minimum" else ">"
        return parts, f"expected a number {op} {value}, got {_describe(instance)}"
    if validator == "uniqueItems":
        return parts, "lists a value twice"
    if expected:
        return parts, f"expected {expected}, got {_describe(instance)}"
    return parts, error.message


def _validate_schema(path: Path, data: Any, lines: dict[str, int]) -> None:
    if not isinstance(data, dict):
        raise SpecError(
            f"{path}:1: expected a mapping with schema_version, campaign and experiments, "
            f"got {_describe(data)}"
        )
    errors = list(_validator().iter_errors(data))
    if not errors:
        return
    # Report the first problem in the file: users fix top to bottom.
    located = []
    for error in errors:
        parts, message = _schema_message(_pick([error]))
        if not message:
            continue
        here = field_path(parts)
        line = line_of(lines, here)
        # A missing key is often explained by a misspelt one elsewhere: report that first.
        located.append((error.validator == "required", line, -len(parts), here, message))
    if not located:  # only follow-on errors: report the first as jsonschema words it
        located.append((False, 1, 0, field_path(errors[0].absolute_path), errors[0].message))
    _, line, _, here, message = min(located)
    raise SpecError(f"{path}:{line}: {here or '(top level)'}: {message}")


# --- building the model --------------------------------------------------------------------


class _Ctx:
    """Where errors point: the file and its line map."""

    def __init__(self, path: Path, lines: dict[str, int]):
        self.path, self.lines = path, lines

    def error(self, here: str, message: str) -> SpecError:
        return SpecError(f"{self.path}:{line_of(self.lines, here)}: {here}: {message}")


def load_spec(path: str | Path, profile: str | None = None) -> Spec:
    """Read, validate and build a spec. Raises SpecError naming file, line and field.

    ``profile`` applies the spec's ``profiles.<name>`` overrides first (socketlab.spec.profiles).
    """
    path = Path(path)
    raw, text = read_text(path, "the spec")
    data, lines = _read_yaml(path, text)
    experiments = data.get("experiments") if isinstance(data, dict) else None
    if isinstance(experiments, list) and len(experiments) > limit("EXPERIMENTS"):
        raise SpecError(
            f"{path}:{lines.get('experiments', 1)}: experiments: "
            f"{over('EXPERIMENTS', len(experiments), 'experiments')}; a sweep "
            "makes many points of one experiment"
        )
    _check_profiles(path, data, profile, lines)
    data = apply_profile(path, data, profile, lines)
    _validate_schema(path, data, lines)
    ctx = _Ctx(path, lines)

    builds = {
        name: Build(name, **{k: v for k, v in body.items()})
        for name, body in (data.get("builds") or {}).items()
    }
    for build in builds.values():
        _check_build(ctx, build)
    hosts = data.get("hosts") or {"pattern": "localhost"}
    spec = Spec(
        path=path,
        sha256=hashlib.sha256(raw).hexdigest(),
        campaign=data["campaign"],
        description=data.get("description", ""),
        hosts=hosts.get("pattern") or hosts.get("group"),
        isolation=dict(data.get("isolation") or {}),
        requires=_requirements([("requires", data.get("requires"))]),
        builds=builds,
        lines=lines,
    )
    experiments = []
    names: dict[str, int] = {}
    for index, body in enumerate(data["experiments"]):
        exp = _experiment(ctx, data, index, body, builds)
        if exp.name in names:
            raise ctx.error(
                f"experiments[{index}].name",
                f"duplicate experiment name '{exp.name}' (also experiments[{names[exp.name]}])",
            )
        names[exp.name] = index
        experiments.append(exp)
    _check_points(ctx, experiments)
    spec = dataclasses.replace(
        spec,
        experiments=tuple(experiments),
        probe=_probe(ctx, data),
        order=data.get("order", "by-experiment"),
    )
    prepared = []
    for exp in spec.experiments:
        handler = kinds.handler(exp.kind, spec.where(f"experiments[{exp.index}].kind"))
        state = handler.prepare(spec, exp) if handler.prepare else None
        prepared.append(dataclasses.replace(exp, prepared=state))
    return dataclasses.replace(spec, experiments=tuple(prepared))


def _probe(ctx: _Ctx, data: dict[str, Any]) -> dict[str, Any] | None:
    """The `probe:` block, its build one of the spec's builds (socketlab.probe)."""
    probe = data.get("probe")
    if probe is None:
        return None
    builds = data.get("builds") or {}
    if probe["build"] not in builds:
        known = ", ".join(sorted(builds)) or "none declared"
        raise ctx.error(
            "probe.build",
            f"no build '{probe['build']}' (the spec's builds: {known}); "
            "expected the build whose ladder runs the probe",
        )
    return dict(probe)


def _check_build(ctx: _Ctx, build: Build) -> None:
    """A build's source, target and flags: what reaches make and the compiler on the hosts
    (socketlab.spec.buildargs says what each may hold, and why)."""
    here = f"builds.{build.name}"
    source = Path(build.source)
    if source.is_absolute() or ".." in source.parts:
        raise ctx.error(f"{here}.source", "expected a directory inside native/ (relative, no '..')")
    folder = NATIVE
    for part in source.parts:  # the build sends native/'s own files, never a link's target
        folder = folder / part
        if folder.is_symlink():
            raise ctx.error(
                f"{here}.source",
                f"native/{folder.relative_to(NATIVE).as_posix()} "
                f"is a symbolic link (to {folder.readlink()}); expected a directory "
                "inside native/",
            )
    if not any((NATIVE / source / f).is_file() for f in ("GNUmakefile", "makefile", "Makefile")):
        raise ctx.error(
            f"{here}.source",
            f"native/{source.as_posix()} is not a directory with "
            "a Makefile (expected one inside native/)",
        )
    why = target_problem(build.target)
    if why:
        raise ctx.error(f"{here}.target", f"{why}; {GOAL_EXPECTED}")
    if build.flags and not _SAFE_FLAGS.fullmatch(build.flags):
        bad = next(c for c in build.flags if not _SAFE_FLAGS.fullmatch(c))
        # make's recipes hand $(CFLAGS) to a shell, and make itself expands $(...) in it
        raise ctx.error(
            f"{here}.flags",
            f"character {bad!r} is not allowed (make's shell "
            "would run it); expected compiler flags of letters, digits, spaces "
            "and _=+,.:/@%-",
        )
    why = flag_problem(build.flags)
    if why:
        raise ctx.error(f"{here}.flags", f"{why}; {FORMS_EXPECTED}")


def _check_profiles(path: Path, data: Any, chosen: str | None, lines: dict[str, int]) -> None:
    """Every profile, not only the one used, must give a valid spec: a typo in `quick` is
    found by the plan that doesn't use it, not by the run that does."""
    profiles = data.get("profiles") if isinstance(data, dict) else None
    if not isinstance(profiles, dict):
        return
    for name in profiles:
        if name == chosen or not isinstance(name, str):
            continue
        try:
            _validate_schema(path, apply_profile(path, data, name, lines), lines)
        except SpecError as exc:
            detail = str(exc).split(": ", 1)[-1]
            raise SpecError(
                f"{path}:{lines.get(f'profiles.{name}', 1)}: profiles.{name}: "
                f"applied, the spec is invalid: {detail}"
            ) from None


def _requirements(sources: list[tuple[str, dict[str, Any] | None]]) -> Requirements:
    flags: list[str] = []
    devices: list[str] = []
    isolation = False
    on_unmet = "skip"
    for _, body in sources:
        if not body:
            continue
        flags += [f for f in body.get("flags", []) if f not in flags]
        devices += [d for d in body.get("devices", []) if d not in devices]
        isolation = isolation or bool(body.get("isolation", False))
        on_unmet = body.get("on_unmet", on_unmet)
    return Requirements(tuple(flags), isolation, devices=tuple(devices), on_unmet=on_unmet)


def _settings(
    base: str, defaults: dict[str, Any], body: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, str]]:
    """(settings, origins): each setting from the experiment, else from the spec's defaults."""
    origins: dict[str, str] = {}
    settings: dict[str, Any] = {}
    for key in SETTINGS:
        if key in body:
            settings[key], origins[key] = body[key], f"{base}.{key}"
        elif key in defaults:
            settings[key], origins[key] = defaults[key], f"defaults.{key}"
    return settings, origins


def _check_build_name(ctx: _Ctx, base: str, build: Any, builds: dict[str, Build]) -> None:
    if build is not None and build not in builds:
        known = sorted(builds)
        hint = suggest(build, known) or (
            f"; declared builds: {', '.join(known)}" if known else "; the spec declares no builds"
        )
        raise ctx.error(f"{base}.build", f"unknown build '{build}'{hint}")


def _check_sweep_names(ctx: _Ctx, base: str, sweep: Sweep) -> None:
    """A swept parameter must not hide a name the templates already have."""
    for name in sweep.names:
        if name in CONTEXT_NAMES:
            where = f"{base}.sweep.{'matrix' if name in sweep.matrix else 'zip'}.{name}"
            raise ctx.error(where, f"parameter '{name}' would hide the template name '{name}'")


def _command(ctx: _Ctx, base: str, raw_command: Any, origins: dict[str, str]) -> list[str]:
    """The command as argv (a string is split like a shell would); each word's origin noted."""
    command: list[str] = []
    if isinstance(raw_command, str):
        try:
            command = split_command(raw_command)
        except ValueError as exc:
            raise ctx.error(f"{base}.command", f"cannot split the command: {exc}") from None
        if not command:
            raise ctx.error(f"{base}.command", "must not be empty")
        for j in range(len(command)):
            origins[f"command[{j}]"] = f"{base}.command"
    elif isinstance(raw_command, list):
        command = [str(v) for v in raw_command]
        for j in range(len(command)):
            origins[f"command[{j}]"] = f"{base}.command[{j}]"
    return command


def _env(
    base: str, defaults: dict[str, Any], body: dict[str, Any], origins: dict[str, str]
) -> dict[str, str]:
    """The defaults' environment, then the experiment's over it; each name's origin noted."""
    env: dict[str, str] = {}
    for source in ("defaults", base):
        block = defaults.get("env") if source == "defaults" else body.get("env")
        for name, value in (block or {}).items():
            env[name] = _env_text(value)
            origins[f"env.{name}"] = f"{source}.env.{name}"
    return env


def _check_collectors(ctx: _Ctx, collectors: tuple[str, ...], origins: dict[str, str]) -> None:
    known = collector_names()
    for i, name in enumerate(collectors):
        if name not in known:
            raise ctx.error(
                f"{origins['collectors']}[{i}]",
                f"unknown collector '{name}'{suggest(name, known)}; collectors: {', '.join(known)}",
            )


def _extra(
    ctx: _Ctx,
    base: str,
    body: dict[str, Any],
    build: Any,
    sweep: Sweep,
    parsers: tuple[ParserSpec, ...],
    sanity: SanityRules,
    settings: dict[str, Any],
) -> dict[str, Any]:
    """What the run kinds need beyond a command: serving, layer dump, runs_on, adaptive."""
    extra = {"serving": body["serving"]} if "serving" in body else {}
    if "layer_dump" in body:  # controller-generated input, shipped to the host (docs/spec.md)
        if "dump" in sweep.names:
            raise ctx.error(
                f"{base}.sweep", "parameter 'dump' would hide the layer dump's template name 'dump'"
            )
        extra["layer_dump"] = {k: str(v) for k, v in body["layer_dump"].items()}
    if body.get("runs_on", "host") != "host":
        if build is not None:  # a build is made on the host; the controller has none of it
            raise ctx.error(
                f"{base}.runs_on",
                "runs_on: controller can't use a build "
                f"('{build}' is built on the hosts); remove one of the two",
            )
        extra["runs_on"] = body["runs_on"]
    if "adaptive" in body:  # an upward sweep with a stop rule (socketlab.spec.adaptive)
        from socketlab.spec.adaptive import check as check_adaptive

        extra["adaptive"] = check_adaptive(
            ctx.error,
            base,
            body["adaptive"],
            sweep,
            parsers,
            sanity,
            settings.get("order", DEFAULTS["order"]),
        )
    return extra


def _experiment(
    ctx: _Ctx, data: dict[str, Any], index: int, body: dict[str, Any], builds: dict[str, Build]
) -> Experiment:
    base = f"experiments[{index}]"
    defaults = data.get("defaults") or {}
    settings, origins = _settings(base, defaults, body)
    build = body.get("build")
    _check_build_name(ctx, base, build, builds)
    _check_bounds(ctx, base, settings, origins)
    sweep = _sweep(ctx, base, body.get("sweep") or {})
    _check_sweep_names(ctx, base, sweep)
    command = _command(ctx, base, body.get("command"), origins)
    env = _env(base, defaults, body, origins)

    metrics = settings.get("metrics", {"parser": "jsonl"})
    parsers = _parsers(ctx, origins.get("metrics", f"{base}.metrics"), metrics)
    sanity = _sanity(ctx, origins.get("sanity", f"{base}.sanity"), settings.get("sanity") or {})
    _check_required_metrics(ctx, origins.get("sanity", ""), sanity, parsers)
    collectors = tuple(settings.get("collectors", ()))
    _check_collectors(ctx, collectors, origins)
    requires = _requirements(
        [
            ("requires", data.get("requires")),
            ("defaults", defaults.get("requires")),
            (base, body.get("requires")),
        ]
    )
    extra = _extra(ctx, base, body, build, sweep, parsers, sanity, settings)
    return Experiment(
        name=body["name"],
        index=index,
        kind=body.get("kind", "command"),
        description=body.get("description", ""),
        build=build,
        command=tuple(command),
        env=env,
        cpus=settings.get("cpus"),
        together=settings.get("together"),
        timeout_s=float(settings.get("timeout_s", DEFAULTS["timeout_s"])),
        sweep=sweep,
        repetitions=int(settings.get("repetitions", DEFAULTS["repetitions"])),
        warmup=int(settings.get("warmup", DEFAULTS["warmup"])),
        order=settings.get("order", DEFAULTS["order"]),
        seed=int(settings.get("seed", DEFAULTS["seed"])),
        sanity=sanity,
        parsers=parsers,
        collectors=collectors,
        requires=requires,
        extra=extra,
        origins=origins,
    )


#: what build flags may contain: no shell or make syntax (`, $, ;, quotes, globs, newlines)
_SAFE_FLAGS = re.compile(r"[A-Za-z0-9 _=+,.:/@%-]*")
_JINJA_BLOCK = re.compile(r"\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}", re.DOTALL)


def split_command(text: str) -> list[str]:
    """Split a command string like a shell would (shlex), before any rendering.

    Template blocks count as word characters, so `--n {{ threads }}` stays two words and a
    value rendered later can never become several arguments.
    """
    blocks: list[str] = []

    def hide(match: re.Match[str]) -> str:
        blocks.append(match.group(0))
        return f"\x00{len(blocks) - 1}\x00"

    words = shlex.split(_JINJA_BLOCK.sub(hide, text))
    return [re.sub("\x00(\\d+)\x00", lambda m: blocks[int(m.group(1))], w) for w in words]


def _env_text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _check_bounds(ctx: _Ctx, base: str, settings: dict[str, Any], origins: dict[str, str]) -> None:
    """Settings within the named limits (socketlab.limits), before anything is expanded."""
    for key, name, unit in (
        ("timeout_s", "TIMEOUT_S", "s"),
        ("repetitions", "REPETITIONS", ""),
        ("warmup", "WARMUP", ""),
    ):
        value = settings.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value > limit(name):
            shown = f"{value:g}" if isinstance(value, float) else str(value)
            if len(shown) > 20:
                shown = f"{shown[:6]}... ({len(shown)} digits)"
            raise ctx.error(origins.get(key, f"{base}.{key}"), f"{key} {over(name, shown, unit)}")


def _check_points(ctx: _Ctx, experiments: list[Experiment]) -> None:
    """Run points per host (sweep points x (repetitions + warm-ups)), summed over experiments,
    within the POINTS limit; counted from the sizes, nothing is expanded."""
    total = 0
    for exp in experiments:
        size = math.prod(len(v) for v in exp.sweep.matrix.values())
        if exp.sweep.zip:
            size *= len(next(iter(exp.sweep.zip.values())))
        total += size * (exp.repetitions + exp.warmup)
        if total > limit("POINTS"):
            raise ctx.error(
                f"experiments[{exp.index}]",
                f"the spec has, up to here, {over('POINTS', total, 'run points per host')}",
            )


def _sweep(ctx: _Ctx, base: str, body: dict[str, Any]) -> Sweep:
    here = f"{base}.sweep"
    matrix = {k: tuple(v) for k, v in (body.get("matrix") or {}).items()}
    zipped = {k: tuple(v) for k, v in (body.get("zip") or {}).items()}
    for name in zipped:
        if name in matrix:
            raise ctx.error(f"{here}.zip.{name}", f"'{name}' is already a matrix parameter")
    lengths = {name: len(values) for name, values in zipped.items()}
    if len(set(lengths.values())) > 1:
        detail = ", ".join(f"{n} has {c}" for n, c in lengths.items())
        raise ctx.error(f"{here}.zip", f"zip lists must have equal lengths ({detail})")
    for name, values in {**matrix, **zipped}.items():
        seen = set()
        for value in values:
            marker = json.dumps(value)
            if marker in seen:
                where = f"{here}.{'matrix' if name in matrix else 'zip'}.{name}"
                raise ctx.error(where, f"lists the value {value!r} twice")
            seen.add(marker)
    axes = {**matrix, **zipped}
    exclude = []
    for i, rule in enumerate(body.get("exclude") or []):
        normalized = {}
        for name, values in rule.items():
            if name not in axes:
                hint = suggest(name, axes) or f"; parameters: {', '.join(axes) or 'none'}"
                raise ctx.error(f"{here}.exclude[{i}].{name}", f"unknown parameter '{name}'{hint}")
            values = tuple(values) if isinstance(values, list) else (values,)
            for value in values:
                if value not in axes[name]:
                    raise ctx.error(
                        f"{here}.exclude[{i}].{name}",
                        f"{value!r} is not a value of '{name}' "
                        f"({', '.join(map(repr, axes[name]))})",
                    )
            normalized[name] = values
        exclude.append(normalized)
    sweep = Sweep(matrix, zipped, tuple(exclude))
    # Counted, not enumerated: a 10-million-point matrix is refused before it is built.
    size = math.prod(len(v) for v in matrix.values()) * (max(lengths.values()) if zipped else 1)
    if size > limit("POINTS"):
        raise ctx.error(here, f"the sweep has {over('POINTS', size, 'points')}")
    if exclude and not sweep_points(sweep):
        raise ctx.error(f"{here}.exclude", "excludes every point of the sweep")
    return sweep


def sweep_points(sweep: Sweep) -> list[dict[str, Any]]:
    """Every parameter combination: the matrix's cross product (first key outermost), each
    crossed with the zip rows, minus excluded ones. No sweep = one point with no parameters."""
    names = list(sweep.matrix)
    combos = [dict(zip(names, values, strict=True)) for values in product(*sweep.matrix.values())]
    if sweep.zip:
        znames = list(sweep.zip)
        rows = [
            dict(zip(znames, vals, strict=True)) for vals in zip(*sweep.zip.values(), strict=True)
        ]
        combos = [{**combo, **row} for combo in combos for row in rows]
    if not sweep.exclude:
        return combos
    return [
        point
        for point in combos
        if not any(all(point[k] in vals for k, vals in rule.items()) for rule in sweep.exclude)
    ]


def _parsers(ctx: _Ctx, here: str, body: Any) -> tuple[ParserSpec, ...]:
    bodies = body if isinstance(body, list) else [body]
    out = []
    for i, item in enumerate(bodies):
        where = f"{here}[{i}]" if isinstance(body, list) else here
        if item["parser"] == "jsonl":
            out.append(ParserSpec("jsonl", {}, JSONL_PARSER_VERSION))
            continue
        patterns = {}
        for name, metric in item["patterns"].items():
            group = metric.get("group", "value")
            compiled = _regex(ctx, f"{where}.patterns.{name}.pattern", metric["pattern"])
            if group not in compiled.groupindex:
                raise ctx.error(
                    f"{where}.patterns.{name}.pattern",
                    f"has no named group '{group}'; write (?P<{group}>...) or set group",
                )
            patterns[name] = {
                "pattern": metric["pattern"],
                "unit": metric["unit"],
                "group": group,
                "stream": metric.get("stream", "stdout"),
            }
        out.append(ParserSpec("regex", patterns, REGEX_PARSER_VERSION))
    return tuple(out)


def _regex(ctx: _Ctx, here: str, pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern, re.MULTILINE)
    except re.error as exc:
        raise ctx.error(here, f"invalid regular expression: {exc}") from None


def _sanity(ctx: _Ctx, here: str, body: dict[str, Any]) -> SanityRules:
    for i, pattern in enumerate(body.get("must_not_match", [])):
        _regex(ctx, f"{here}.must_not_match[{i}]", pattern)
    return SanityRules(
        exit_codes=tuple(body.get("exit_codes", (0,))),
        required_metrics=tuple(body.get("required_metrics", ())),
        must_not_match=tuple(body.get("must_not_match", ())),
    )


def _check_required_metrics(
    ctx: _Ctx, here: str, sanity: SanityRules, parsers: tuple[ParserSpec, ...]
) -> None:
    """With only regex parsers the metric names are known: a required one must be declared."""
    if any(p.kind != "regex" for p in parsers):
        return
    declared = [name for p in parsers for name in p.options]
    for i, name in enumerate(sanity.required_metrics):
        if name not in declared:
            raise ctx.error(
                f"{here}.required_metrics[{i}]",
                f"metric '{name}' is not produced by any parser{suggest(name, declared)}",
            )
