"""A spec as users type it: a file path, or the name of a spec the project ships.

`orchestrate run campaign-oct.yaml` from the repository root (where the file is
experiments/campaign-oct.yaml) or `orchestrate run quickstart` from anywhere with an installed
wheel: a path that exists is used as given; otherwise a shipped spec of that name
(experiments/<name> or experiments/<name>.yaml, socketlab.paths.EXPERIMENTS), and the command
says which file it used.
"""

from __future__ import annotations

import logging
from pathlib import Path

from socketlab import paths
from socketlab.errors import SpecError

log = logging.getLogger(__name__)


def shipped_specs() -> list[str]:
    """Names of the specs the project ships (experiments/*.yaml)."""
    return sorted(p.stem for p in paths.EXPERIMENTS.glob("*.yaml"))


def spec_path(given: str) -> Path:
    """The spec file ``given`` names; SpecError (one line) when there is none."""
    path = Path(given).expanduser()
    if path.is_file():
        return path
    # only a bare name or file name can mean a shipped spec (a path elsewhere is a typo there)
    if path.name == given and given not in ("", ".", ".."):
        names = [given] if path.suffix in (".yaml", ".yml") else [f"{given}.yaml", given]
        for name in names:
            candidate = paths.EXPERIMENTS / name
            if candidate.is_file():
                log.info("spec %s: no such file here; using the shipped %s", given, candidate)
                return candidate
    raise SpecError(
        f"{given}: no such spec file; expected a path to a spec (YAML) or the name "
        f"of a shipped one ({', '.join(shipped_specs())})"
    )
