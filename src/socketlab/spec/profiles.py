"""Profiles: named overrides of a spec's durations and sizes (``--profile quick``).

A spec may carry::

    profiles:
      quick:
        description: shrink everything to run on a small machine
        isolation: {housekeeping_per_node: 1}      # merged into the spec's isolation
        defaults: {repetitions: 1}                 # merged into the spec's defaults
        experiments:
          ladder: {sweep: {matrix: {mib_per_core: [1.0, 64]}}, repetitions: 1}
        only: [ladder]                             # run these experiments, leave out the rest
        order: interleaved                         # replaces the spec's campaign order
        probe: {build: native, below: 0.8}         # replaces the spec's probe settings

Mappings merge key by key; any other value (lists included) replaces the spec's. The merged
document is then validated like any spec, so an override can't smuggle in an unknown key. Pure.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from socketlab.errors import SpecError

PROFILE_KEYS = ("description", "isolation", "defaults", "experiments", "only", "order", "probe")


def merge(base: Any, override: Any) -> Any:
    """``override`` on top of ``base``: mappings merge recursively, anything else replaces."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for key, value in override.items():
            out[key] = merge(base.get(key), value) if key in base else copy.deepcopy(value)
        return out
    return copy.deepcopy(override)


def apply_profile(
    path: Path, data: Any, profile: str | None, lines: dict[str, int] | None = None
) -> Any:
    """The spec document with profile ``profile`` applied (and ``profiles`` removed)."""
    if not isinstance(data, dict):
        return data
    profiles = data.get("profiles")
    lines = lines or {}
    doc = {k: v for k, v in data.items() if k != "profiles"}
    if profile is None:
        return doc
    if not isinstance(profiles, dict) or profile not in profiles:
        known = ", ".join(sorted(profiles)) if isinstance(profiles, dict) and profiles else "none"
        raise SpecError(
            f"{path}:{lines.get('profiles', 1)}: profiles: no profile '{profile}' "
            f"(this spec has: {known})"
        )
    body = profiles[profile]
    here = f"profiles.{profile}"
    where = f"{path}:{lines.get(here, 1)}: {here}"
    if not isinstance(body, dict):
        raise SpecError(f"{where}: expected a mapping with {', '.join(PROFILE_KEYS)}")
    unknown = sorted(set(body) - set(PROFILE_KEYS))
    if unknown:
        raise SpecError(
            f"{where}: unknown key '{unknown[0]}' (expected one of: {', '.join(PROFILE_KEYS)})"
        )
    if body.get("isolation") is not None:
        doc["isolation"] = merge(doc.get("isolation") or {}, body["isolation"])
    if body.get("defaults") is not None:
        doc["defaults"] = merge(doc.get("defaults") or {}, body["defaults"])
    for key in ("order", "probe"):  # campaign-wide settings: the profile's replace the spec's
        if body.get(key) is not None:
            doc[key] = copy.deepcopy(body[key])
    overrides = body.get("experiments") or {}
    if not isinstance(overrides, dict):
        raise SpecError(f"{where}.experiments: expected a mapping of experiment name -> overrides")
    experiments = list(doc.get("experiments") or [])
    names = [e.get("name") if isinstance(e, dict) else None for e in experiments]
    for name, override in overrides.items():
        if name not in names:
            line = lines.get(f"{here}.experiments.{name}", lines.get(here, 1))
            raise SpecError(
                f"{path}:{line}: {here}.experiments.{name}: no experiment named "
                f"'{name}' in the spec"
            )
        if not isinstance(override, dict):
            raise SpecError(f"{where}.experiments.{name}: expected a mapping of overrides")
        i = names.index(name)
        experiments[i] = merge(experiments[i], override)
    only = body.get("only")
    if only is not None:  # the experiments this profile runs; the rest are left out
        if not isinstance(only, list) or not all(isinstance(x, str) for x in only):
            raise SpecError(f"{where}.only: expected a list of experiment names")
        for name in only:
            if name not in names:
                line = lines.get(f"{here}.only", lines.get(here, 1))
                raise SpecError(
                    f"{path}:{line}: {here}.only: no experiment named '{name}' in the spec"
                )
        experiments = [e for e, n in zip(experiments, names, strict=True) if n in only]
    doc["experiments"] = experiments
    return doc
