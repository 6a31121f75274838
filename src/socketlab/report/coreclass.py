"""Does a measured host have the published core? The "core class" match behind per-core verdicts.

A user who rents a slice of the published CPU (a 2-vCPU guest, a small instance of the same
family) has the published core but not the published socket. Hypervisors mask the model name
("Intel(R) Xeon(R) Processor") and often the model number, so the match is on what a guest still
shows: the CPUID vendor, the family and the per-core L1d and L2 sizes (a core's private caches are
what its per-core figures depend on). A host whose model name is the published one matches too.
The ISA flags a cell needs are checked per cell (``missing_flags``).

Pure: published ``host`` mapping and topology facts (``Topology.facts()``) in, a match out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

KIB = 1024


def short_model(model: str) -> str:
    """A CPU model name, short.

    'Intel(R) Xeon(R) 6975P-C' -> 'Xeon 6975P-C';
    'AMD EPYC 9R14 96-Core Processor' -> 'AMD EPYC 9R14'.
    """
    s = re.sub(r"\((R|TM)\)", "", model or "unknown CPU", flags=re.I)
    s = re.sub(r"\b\d+-Core Processor\b|\bProcessor\b|\bCPU\b|@.*$", "", s, flags=re.I)
    s = re.sub(r"^\s*Intel\s+", "", s, flags=re.I)
    return " ".join(s.split()) or "unknown CPU"


def same_model(a: str, b: str) -> bool:
    return short_model(a).lower() == short_model(b).lower()


def vendor_model(topology: Mapping[str, Any]) -> str:
    """The host's CPU as people name it, with the vendor: 'AMD EPYC', 'Intel Xeon'."""
    name = short_model(str(topology.get("cpu_model") or "unknown CPU"))
    if topology.get("vendor") == "GenuineIntel" and not name.lower().startswith("intel"):
        name = f"Intel {name}"
    return name


def _kib(size_bytes: Any) -> int | None:
    try:
        return int(size_bytes) // KIB
    except (TypeError, ValueError):
        return None


def _size(kib: int) -> str:
    return f"{kib // KIB} MiB" if kib % KIB == 0 and kib >= KIB else f"{kib} KiB"


@dataclass(frozen=True)
class CoreMatch:
    matches: bool
    basis: str  #: what matched: "model name Xeon 6975P-C" or "vendor GenuineIntel, family 6, ..."
    differs: str  #: "AMD EPYC vs Intel Xeon 6975P-C" when it does not match, else ""
    detail: str  #: one line for the report's provenance


def core_class(published_host: Mapping[str, Any], topology: Mapping[str, Any]) -> CoreMatch:
    """Whether ``topology``'s cores are the published host's (see the module doc)."""
    pub_model = str(published_host.get("model", "?"))
    model = str(topology.get("cpu_model") or "unknown CPU")
    differs = f"{vendor_model(topology)} vs {pub_model}"
    if same_model(model, pub_model):
        basis = f"model name {short_model(pub_model)}"
        return CoreMatch(True, basis, "", f"core class of {pub_model}: matched on {basis}")
    core = published_host.get("core")
    if not core:
        return CoreMatch(
            False,
            "",
            differs,
            f"core class: {differs} (the published file names "
            "no core class, so only the model name could match)",
        )
    caches = topology.get("caches") or {}
    seen = {
        "vendor": (topology.get("vendor"), core["vendor"]),
        "family": (str(topology.get("family")), str(core["family"])),
        "L1d": (_kib((caches.get("L1d") or {}).get("size_bytes")), core["l1d_kib"]),
        "L2": (_kib((caches.get("L2") or {}).get("size_bytes")), core["l2_kib"]),
    }
    wrong = [
        f"{k} {_show(k, got)} vs {_show(k, want)}" for k, (got, want) in seen.items() if got != want
    ]
    if wrong:
        return CoreMatch(
            False, "", differs, f"core class differs from {pub_model}: " + ", ".join(wrong)
        )
    basis = (
        f"vendor {core['vendor']}, family {core['family']}, L1d {_size(core['l1d_kib'])}, "
        f"L2 {_size(core['l2_kib'])}"
    )
    masked = f"model name '{model}'"
    if (
        topology.get("model") is not None
        and "model" in core
        and str(topology.get("model")) != str(core["model"])
    ):
        masked += f", model {topology.get('model')} (published {core['model']})"
    return CoreMatch(
        True,
        basis,
        "",
        f"core class of {pub_model}: matched on {basis}; {masked} not part of the match",
    )


def _show(key: str, value: Any) -> str:
    if key in ("L1d", "L2"):
        return _size(value) if isinstance(value, int) else "unknown"
    return str(value)


def missing_flags(needed: Iterable[str], topology: Mapping[str, Any]) -> list[str]:
    flags = set(topology.get("flags") or ())
    return [f for f in needed if f not in flags]
