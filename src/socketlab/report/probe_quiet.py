"""Recorded quiet probe rates per core class: a reference for the interference probe that does
not come from the campaign it judges.

The probe's quiet reference used to be only the campaign's own best reading, so a neighbour on
the core for a whole campaign (or a guest whose clock runs below the metal's) moved every
reading together and no run read as disturbed. experiments/probe/quiet.yaml records, per core
class (vendor, family, per-core L1d and L2: what a hypervisor leaves visible), the best rate per
probe unit and CPU that a quiet machine of that class gave; the reference becomes the higher of
that and the campaign's best, so such a campaign's runs read disturbed and its verdicts say
"inconclusive" rather than "deviates".

Pure apart from ``load`` (one YAML file); errors name the file and the field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from socketlab.errors import SpecError
from socketlab.paths import EXPERIMENTS
from socketlab.report.coreclass import core_class

QUIET_FILE = EXPERIMENTS / "probe" / "quiet.yaml"
FORMAT = "socketlab.probe-quiet/1"
CORE_KEYS = ("vendor", "family", "l1d_kib", "l2_kib")


@dataclass(frozen=True)
class QuietClass:
    id: str
    core: Mapping[str, Any]  #: vendor, family, l1d_kib, l2_kib
    units: Mapping[str, float]  #: probe unit -> best quiet rate per CPU (GB/s)
    measured: str  #: where and when, in words


def _fail(path: Path, where: str, expected: str) -> SpecError:
    return SpecError(f"{path}: {where}: expected {expected}")


def _class(path: Path, i: int, entry: Any) -> QuietClass:
    where = f"classes[{i}]"
    if not isinstance(entry, Mapping):
        raise _fail(path, where, "a mapping with id, core, units, measured")
    unknown = sorted(set(entry) - {"id", "core", "units", "measured", "probe_bytes"})
    if unknown:
        raise _fail(path, f"{where}.{unknown[0]}", "one of id, core, units, measured, probe_bytes")
    if not isinstance(entry.get("id"), str) or not entry["id"]:
        raise _fail(path, f"{where}.id", "a name")
    core = entry.get("core")
    if not isinstance(core, Mapping) or sorted(core) != sorted(CORE_KEYS):
        raise _fail(path, f"{where}.core", "a mapping of exactly " + ", ".join(CORE_KEYS))
    units = entry.get("units")
    if not isinstance(units, Mapping) or not units:
        raise _fail(path, f"{where}.units", "a mapping of probe unit to GB/s per CPU")
    for unit, value in units.items():
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or not math.isfinite(value) or value <= 0:
            raise _fail(path, f"{where}.units.{unit}", "a positive number (GB/s per CPU)")
    size = entry.get("probe_bytes", 1)
    if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
        raise _fail(path, f"{where}.probe_bytes", "a positive whole number of bytes")
    if not isinstance(entry.get("measured"), str) or not entry["measured"].strip():
        raise _fail(path, f"{where}.measured", "where and when it was measured, in words")
    return QuietClass(
        entry["id"], dict(core), {str(k): float(v) for k, v in units.items()}, entry["measured"]
    )


def load(path: Path = QUIET_FILE) -> list[QuietClass]:
    """The recorded classes; none when the file is absent (then the campaign's best decides)."""
    from socketlab.yamlload import load_document, read_text

    if not path.is_file():
        return []
    _, text = read_text(path, "probe reference")
    doc, _ = load_document(path, text)
    if not isinstance(doc, Mapping) or doc.get("format") != FORMAT:
        raise _fail(path, "format", FORMAT)
    classes = doc.get("classes")
    if not isinstance(classes, list):
        raise _fail(path, "classes", "a list of core classes")
    out = [_class(path, i, c) for i, c in enumerate(classes)]
    ids = [c.id for c in out]
    if len(set(ids)) != len(ids):
        raise _fail(path, "classes", "ids used once each")
    return out


def class_of(topology: Mapping[str, Any], classes: list[QuietClass]) -> QuietClass | None:
    """The recorded class whose vendor, family, L1d and L2 the host's topology facts show (the
    report's own core-class match, ``socketlab.report.coreclass``)."""
    for c in classes:
        if core_class({"model": c.id, "core": c.core}, topology).matches:
            return c
    return None


def recorded_references(
    hosts: Mapping[str, Mapping[str, Any]], classes: list[QuietClass]
) -> dict[str, QuietClass]:
    """host -> its recorded class, for the hosts whose facts match one. ``hosts``: name -> facts
    (``{"topology": ...}``) or topology facts directly."""
    out = {}
    for name, facts in hosts.items():
        topo = facts.get("topology", facts) if isinstance(facts, Mapping) else {}
        found = class_of(topo or {}, classes)
        if found is not None:
            out[str(name)] = found
    return out
