"""The `serving` experiment kind: one run point per arm (x sweep point x repetition).

Registered with socketlab.spec.kinds. ``prepare`` parses the `serving:` block and compiles its
templates (arm commands, env, cpus); ``axes`` adds the `arm` and `placement` parameters, so
each arm is its own run with its placement recorded as a parameter; ``render`` resolves the
arm's command and the placement's CPU lists from the host facts (pure). The run itself - the
server started once per run, every load level in order - is socketlab.serve.runkind.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from socketlab.errors import PlanError, SpecError
from socketlab.serve import placement as placement_mod
from socketlab.serve.config import ServingConfig, parse
from socketlab.spec.kinds import PointContext, Rendered, register_kind
from socketlab.spec.render import Field, allowed_names, compile_field, render_field

#: parameters this kind adds to every point
AXES = ("arm", "placement")


@dataclass(frozen=True)
class ArmTemplates:
    argv: tuple[Field, ...]
    env: tuple[tuple[str, Field], ...]
    cpus: Field | None
    client_cpus: Field | None


@dataclass(frozen=True)
class PreparedServing:
    config: ServingConfig
    arms: dict[str, ArmTemplates]


def prepare(spec: Any, exp: Any) -> PreparedServing:
    base = f"experiments[{exp.index}].serving"
    clash = sorted(set(exp.sweep.names) & set(AXES))
    if clash:
        raise SpecError(
            f"{spec.where(f'experiments[{exp.index}].sweep')}: parameter "
            f"{clash[0]!r} is set by the serving kind (one run per arm)"
        )
    config = parse(exp.extra.get("serving") or {}, spec.where, base)
    allowed = allowed_names(tuple(exp.sweep.names) + AXES)
    arms = {}
    for j, arm in enumerate(config.arms):
        at = f"{base}.arms[{j}]"

        def comp(path: str, source: str) -> Field:
            return compile_field(spec.where(path), path, source, allowed)

        arms[arm.name] = ArmTemplates(
            argv=tuple(comp(f"{at}.command", s) for s in arm.command),
            env=tuple((k, comp(f"{at}.env.{k}", v)) for k, v in arm.env.items()),
            cpus=comp(f"{at}.cpus", arm.cpus) if arm.cpus else None,
            client_cpus=comp(f"{at}.client_cpus", arm.client_cpus) if arm.client_cpus else None,
        )
    return PreparedServing(config, arms)


def axes(spec: Any, exp: Any) -> list[dict[str, Any]]:
    """Extra parameters crossed with the experiment's sweep: one set per arm."""
    config: ServingConfig = exp.prepared.config
    return [
        {"arm": a.name, "placement": "explicit" if a.cpus else a.placement} for a in config.arms
    ]


def render(point: PointContext) -> Rendered:
    prepared: PreparedServing = point.experiment.prepared
    config = prepared.config
    name = point.params.get("arm")
    if name is None:
        if len(config.arms) > 1:
            raise SpecError(
                f"{point.spec.where(f'experiments[{point.experiment.index}].kind')}: "
                "this orchestrator does not expand serving arms; use one arm"
            )
        name = config.arms[0].name
    arm, tpl = config.arm(name), prepared.arms[name]
    ctx = {**point.context, "arm": name, "placement": arm.placement}
    spec, host, note = point.spec, point.host, point.isolation_note

    def r(f: Field) -> str:
        return render_field(f, ctx, spec.where(f.path), host, note)

    argv = tuple(r(f) for f in tpl.argv)
    env = {k: r(f) for k, f in tpl.env}
    try:
        place = placement_mod.resolve(
            arm.placement,
            ctx.get("facts") or {},
            explicit=r(tpl.cpus) if tpl.cpus else None,
            client=r(tpl.client_cpus) if tpl.client_cpus else None,
            host=host,
        )
    except (PlanError, ValueError) as exc:
        at = f"experiments[{point.experiment.index}].serving.arms[{config.arms.index(arm)}]"
        raise SpecError(f"{spec.where(at)}: {exc}") from None
    extra = {
        "serving": config.as_json(),
        "arm": name,
        "placement": place.facts(),
        "seed": point.experiment.seed,
    }
    return Rendered(argv, env, place.facts()["server_cpus"], extra)


register_kind("serving", render, prepare, axes)
