"""A run point: one fully resolved run of one experiment on one host.

This is the contract between planning (spec -> points, pure) and execution (points -> runs).
Everything here is already rendered: templates resolved, argv split, CPU list concrete.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SanityRules:
    exit_codes: tuple[int, ...] = (0,)  #: accepted exit codes
    required_metrics: tuple[str, ...] = ()  #: metric names that must be parsed
    must_not_match: tuple[str, ...] = ()  #: regexes that must not appear in stdout/stderr


@dataclass(frozen=True)
class ParserSpec:
    kind: str  #: "jsonl" (native contract) or "regex"
    #: for regex: metric name -> {"pattern": str with named groups, "unit": str, "group": str}
    options: dict[str, Any] = field(default_factory=dict)
    version: str = "1"


@dataclass(frozen=True)
class RunPoint:
    campaign: str
    experiment: str
    host: str  #: inventory name
    params: dict[str, Any]  #: resolved sweep parameters of this point
    repetition: int  #: 0-based; warm-up runs are negative (-1, -2, ...) and never stored as results
    argv: tuple[str, ...]  #: the command, never passed through a shell
    env: dict[str, str] = field(default_factory=dict)
    cpus: str | None = None  #: CPU list the command is pinned to (taskset -c), None = unpinned
    timeout_s: float = 600.0
    build: str | None = None  #: name of the build this point needs, if any
    sanity: SanityRules = field(default_factory=SanityRules)
    parsers: tuple[ParserSpec, ...] = ()
    collectors: tuple[str, ...] = ()  #: collector names (collectors/<name>.py)
    kind: str = "command"  #: "command" or "serving"
    extra: dict[str, Any] = field(default_factory=dict)  #: kind-specific resolved settings

    @property
    def warmup(self) -> bool:
        return self.repetition < 0

    def key(self, build_hash: str | None, host_profile_hash: str) -> str:
        """Run key: sha256 of canonical (experiment, params, repetition, build, host profile)."""
        canonical = json.dumps(
            {
                "campaign": self.campaign,
                "experiment": self.experiment,
                "params": self.params,
                "repetition": self.repetition,
                "build": build_hash,
                "host_profile": host_profile_hash,
            },
            sort_keys=True,
            separators=(",", ":"),
            default=str,
        )
        return hashlib.sha256(canonical.encode()).hexdigest()
