"""Size limits on user input, one place: every loader and renderer checks against these.

A spec is code the user runs, but a typo in it (an extra zero on a sweep, a stray range) must
be refused at once with one line, not run the controller out of memory after a minute. Each
limit is a named setting: ``SOCKETLAB_LIMIT_<NAME>=<n>`` in the environment raises (or lowers)
it, and every refusal names the variable. docs/spec.md lists them.
"""

from __future__ import annotations

import os

#: name -> (default, what it bounds)
DEFAULTS: dict[str, tuple[int, str]] = {
    "SPEC_BYTES": (8 << 20, "bytes in a spec or published-values file"),
    "YAML_DEPTH": (64, "nesting depth of YAML mappings and lists"),
    "YAML_NODES": (100_000, "YAML values after alias expansion (composing costs ~25 µs each)"),
    "EXPERIMENTS": (2_000, "experiments in one spec (each costs about 1 ms to validate)"),
    "POINTS": (50_000, "run points per host (sweep points x (repetitions + warm-ups))"),
    "REPETITIONS": (100_000, "repetitions of one experiment"),
    "WARMUP": (10_000, "warm-up runs per sweep point"),
    "TIMEOUT_S": (7 * 24 * 3600, "seconds in a timeout_s"),
    "CPUS": (65_536, "CPUs in one CPU list"),
    "CPU_ID": (1 << 20, "the highest CPU id in a CPU list or mask"),
    "TOKEN_IDS": (1 << 20, "token ids in a serving block's suppress_token_ids"),
    # each request's prompt is made (and held) before its level starts
    "REQUESTS": (1_000_000, "requests (and warm-up requests) per load level of a serving block"),
    "RENDER_BYTES": (
        128 << 10,
        "bytes one rendered template value may have (Linux MAX_ARG_STRLEN)",
    ),
    "RENDER_STEPS": (1_000_000, "loop iterations one template render may make"),
    "RENDER_INT_BITS": (4096, "bits in an integer a template computes"),
}


def limit(name: str) -> int:
    """The limit ``name`` (a key of DEFAULTS), with the environment's override applied."""
    default, _ = DEFAULTS[name]
    raw = os.environ.get(f"SOCKETLAB_LIMIT_{name}")
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 1:
        from .errors import SocketlabError

        raise SocketlabError(f"SOCKETLAB_LIMIT_{name}={raw!r}: expected a positive integer")
    return value


def over(name: str, value: object, unit: str = "") -> str:
    """ "<value> <unit>, over the limit of N <unit> (SOCKETLAB_LIMIT_<name> raises it)"."""
    unit = f" {unit}" if unit else ""
    return (
        f"{value}{unit}, over the limit of {limit(name)}{unit} (SOCKETLAB_LIMIT_{name} raises it)"
    )
