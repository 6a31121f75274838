"""A validated spec as frozen dataclasses (what `load_spec` returns, what expansion reads).

Templates stay as source strings here; `socketlab.spec.render` compiles them once per spec.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from socketlab.spec.points import ParserSpec, SanityRules
from socketlab.yamlload import line_of

#: Names a template sees besides the experiment's parameters. Parameters may not shadow them.
CONTEXT_NAMES = (
    "facts",
    "params",
    "host",
    "vars",
    "python",
    "experiment",
    "campaign",
    "tools",
    "inventory",
    "build",
)


@dataclass(frozen=True)
class Build:
    name: str
    source: str = "."  #: directory under native/
    target: str = "all"  #: make target
    flags: str = ""  #: extra compiler flags (CFLAGS)
    cc: str = ""  #: the compiler (make's CC); "" = the host's `cc`

    @property
    def dir(self) -> str:
        """Where make puts the binaries, under the source directory: the toolkit passes it as
        BUILD= (socketlab.build), by the Makefile's own rule build/$(notdir CC), so a run
        names ``{{ build.dir }}/ladder`` and a manual ``make -C native`` agrees."""
        return f"build/{(self.cc or 'cc').rsplit('/', 1)[-1]}"


@dataclass(frozen=True)
class Requirements:
    flags: tuple[str, ...] = ()  #: CPU flags the host must have (/proc/cpuinfo names)
    isolation: bool = False  #: the isolation plan must be applied on the host
    #: device paths the host must have (one of collectors/host_facts.py DEVICE_PATHS)
    devices: tuple[str, ...] = ()
    on_unmet: str = "skip"  #: "skip" (record why) or "fail" (refuse to plan)


@dataclass(frozen=True)
class Sweep:
    matrix: dict[str, tuple[Any, ...]] = field(default_factory=dict)  #: cross product
    zip: dict[str, tuple[Any, ...]] = field(default_factory=dict)  #: lock-step, crossed w/ matrix
    exclude: tuple[dict[str, tuple[Any, ...]], ...] = ()  #: drop points matching every key

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.matrix) + tuple(self.zip)


@dataclass(frozen=True)
class Experiment:
    name: str
    index: int  #: position in the spec's experiments list
    kind: str = "command"
    description: str = ""
    build: str | None = None
    command: tuple[str, ...] = ()  #: argv templates (a command string is shlex-split first)
    env: dict[str, str] = field(default_factory=dict)  #: name -> value template
    cpus: str | None = None  #: CPU list template; None = unpinned
    #: group-name template: points of one group (same experiment, parameters and repetition)
    #: start at the same moment on all their hosts (socketlab.runner); None = independent
    together: str | None = None
    timeout_s: float = 600.0
    sweep: Sweep = field(default_factory=Sweep)
    repetitions: int = 1
    warmup: int = 0
    order: str = "sequential"
    seed: int = 0
    sanity: SanityRules = field(default_factory=SanityRules)
    parsers: tuple[ParserSpec, ...] = (ParserSpec("jsonl"),)
    collectors: tuple[str, ...] = ()
    requires: Requirements = field(default_factory=Requirements)
    #: kind-specific block as written (e.g. the `serving:` mapping)
    extra: dict[str, Any] = field(default_factory=dict)
    #: setting name -> field path it came from ("defaults.cpus" or "experiments[0].cpus");
    #: also "command[j]" and "env.NAME" for each argv element and variable
    origins: dict[str, str] = field(default_factory=dict)
    #: what the kind's prepare() returned at load time (e.g. compiled templates)
    prepared: Any = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class Spec:
    path: Path
    sha256: str  #: of the file's bytes
    campaign: str
    description: str = ""
    hosts: str = "localhost"  #: Ansible host pattern (a group name is a pattern too)
    isolation: dict[str, Any] = field(default_factory=dict)  #: plan_isolation() keyword args
    requires: Requirements = field(default_factory=Requirements)
    builds: dict[str, Build] = field(default_factory=dict)
    experiments: tuple[Experiment, ...] = ()
    #: the interference probe: {"build": name, "below": fraction} or None (socketlab.probe)
    probe: dict[str, Any] | None = None
    #: "by-experiment", or "interleaved": repetition k of every point before k+1 of any
    order: str = "by-experiment"
    #: field path ("experiments[0].command[2]") -> 1-based line, for errors found after loading
    lines: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def where(self, field_path: str) -> str:
        """`FILE:LINE: field` for a message about a field (line of the nearest known parent)."""
        return f"{self.path}:{line_of(self.lines, field_path)}: {field_path}"

    def experiment(self, name: str) -> Experiment:
        for exp in self.experiments:
            if exp.name == name:
                return exp
        raise KeyError(name)
