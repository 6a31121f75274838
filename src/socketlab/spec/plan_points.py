"""Points files for `orchestrate stage-plan --points NAME|FILE`: many plans in one run.

A points file is YAML with ``points:``, a list of mappings; each point sets ``model`` and any
of the flags in ``POINT_KEYS`` (by their names with underscores), and its keys become the
dimensions of the metric records that point's plan prints. Shipped ones live in
experiments/models/points/NAME.yaml.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from socketlab.errors import SpecError
from socketlab.paths import EXPERIMENTS

#: what a point may set (the stage-plan flags of the same names), and each one's type
POINT_KEYS = {
    "model": str,
    "layer": int,
    "gather_output": bool,
    "split": str,
    "budget_kib": int,
    "experts": str,
    "batch": int,
    "context": int,
    "project": bool,
    "hop_us": float,
    "allreduce_us": float,
}


def points_file(name: str) -> Path:
    """A shipped points file by NAME (no suffix, no folder), else the path given."""
    if not Path(name).suffix and "/" not in name:
        return EXPERIMENTS / "models" / "points" / f"{name}.yaml"
    return Path(name)


def load_points(name: str) -> list[dict[str, Any]]:
    """The points of a points file, checked: one SpecError line naming the file, the point
    and the key where one is unknown, missing or of the wrong type."""
    path = points_file(name)
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise SpecError(
            f"{path}: can't read the points file ({str(exc).splitlines()[0]})"
        ) from None
    points = doc.get("points") if isinstance(doc, dict) else None
    if not isinstance(points, list) or not points:
        raise SpecError(f"{path}: points: expected a list of mappings")
    for i, point in enumerate(points):
        _check(path, i, point)
    return points


def _check(path: Path, i: int, point: Any) -> None:
    bad = sorted(set(point) - set(POINT_KEYS)) if isinstance(point, dict) else ["(not a mapping)"]
    if bad or "model" not in point:
        raise SpecError(
            f"{path}: points[{i}]: "
            + (
                f"unknown key '{bad[0]}' (expected one of: {', '.join(POINT_KEYS)})"
                if bad
                else "model: missing"
            )
        )
    for key, kind in POINT_KEYS.items():
        value = point.get(key)
        number = kind is float and isinstance(value, int) and not isinstance(value, bool)
        if key in point and not isinstance(value, kind) and not number:
            raise SpecError(f"{path}: points[{i}].{key}: expected {kind.__name__}, got {value!r}")
