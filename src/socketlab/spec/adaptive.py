"""Adaptive sweeps: sweep one parameter upward and stop when a rule breaches (docs/spec.md).

An experiment's ``adaptive: {param, stop: [rules]}`` makes the values of one ``sweep.matrix``
parameter a ladder (ascending numbers, e.g. workers per instance 1..N); every other parameter
combination is its own ladder. After each step's repetitions are all stored, its median of each
rule's metric is compared:

- ``{metric: m, above: k}``: stop when median(m) > k x median(m) at the ladder's first step
  (p95 latency more than double the single-worker baseline: ``above: 2``);
- ``{metric: m, min_gain: g}``: stop when median(m) / median(m) at the previous step - 1 < g
  (aggregate throughput improving by less than 5%: ``min_gain: 0.05``).

Higher steps are then not run. A step with a run that is not ok stops the ladder too (it can't
be judged), and a ladder that never breaches stops at its cap (its last value). The decision is a
pure function of the stored runs (``decide``), so a resumed campaign (after SIGKILL, say)
recomputes where it stands and continues from the first step not yet complete. The runner
writes each decision to the store's meta table (``adaptive_stops``), which is what the report
and ``orchestrate status`` read.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from typing import Any

from socketlab.store.status import RunStatus

META_PREFIX = "adaptive:"


@dataclass(frozen=True)
class StopRule:
    metric: str
    above: float | None = None  #: x the first step's median
    min_gain: float | None = None  #: relative gain over the previous step

    def describe(self) -> str:
        if self.above is not None:
            return f"{self.metric} > {self.above:g} x first step"
        return f"{self.metric} gain < {self.min_gain:.0%} over previous step"


@dataclass(frozen=True)
class Adaptive:
    param: str
    values: tuple[float, ...]  #: the ladder, ascending
    rules: tuple[StopRule, ...]

    def describe(self) -> str:
        ladder = ", ".join(f"{v:g}" for v in self.values)
        return (
            f"sweep {self.param} upward over [{ladder}]; stop when "
            + " or ".join(r.describe() for r in self.rules)
            + "; else at the cap"
        )


@dataclass(frozen=True)
class Stop:
    value: float  #: the step the ladder stopped at (no higher step runs)
    kind: str  #: "breach", "failed" or "cap"
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {"value": self.value, "kind": self.kind, "reason": self.reason}


def check(error, base: str, body: dict[str, Any], sweep, parsers, sanity, order: str) -> Adaptive:
    """Validate an experiment's ``adaptive`` block at load time; ``error(field, message)`` makes
    the SpecError. The rules' metrics must be ones the experiment is known to produce."""
    here = f"{base}.adaptive"
    param = body["param"]
    if param not in sweep.matrix:
        names = ", ".join(sweep.matrix) or "none"
        raise error(f"{here}.param", f"'{param}' is not a sweep.matrix parameter (matrix: {names})")
    values = sweep.matrix[param]
    if (
        not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
        or list(values) != sorted(values)
        or len(set(values)) != len(values)
    ):
        raise error(
            f"{base}.sweep.matrix.{param}",
            "an adaptive parameter's values must be "
            f"distinct numbers in ascending order, got {list(values)}",
        )
    if order != "sequential":
        raise error(
            f"{base}.order",
            f"an adaptive sweep runs its steps in order; expected 'sequential', got '{order}'",
        )
    known = set(sanity.required_metrics)
    for parser in parsers:
        if parser.kind == "regex":
            known |= set(parser.options.get("patterns", {}))
    rules = []
    for i, rule in enumerate(body["stop"]):
        where = f"{here}.stop[{i}]"
        if rule["metric"] not in known:
            listed = ", ".join(sorted(known)) or "none: list them in sanity.required_metrics"
            raise error(
                f"{where}.metric",
                f"unknown metric '{rule['metric']}'; expected one the "
                f"experiment produces ({listed})",
            )
        if ("above" in rule) == ("min_gain" in rule):
            raise error(where, "expected exactly one of 'above' (x first step) or 'min_gain'")
        rules.append(StopRule(rule["metric"], rule.get("above"), rule.get("min_gain")))
    return Adaptive(param, tuple(float(v) for v in values), tuple(rules))


def ladder_of(params: dict[str, Any], param: str) -> str:
    """The ladder a point belongs to: every parameter but the adaptive one."""
    return json.dumps({k: v for k, v in params.items() if k != param}, sort_keys=True, default=str)


def decide(adaptive: Adaptive, steps: dict[float, dict[str, Any]]) -> Stop | None:
    """Where the ladder stops, from its steps so far: value -> {"expected": runs per step,
    "ok": number stored ok, "bad": reason of a stored run that is not ok or "",
    "metrics": {name: [values of its ok runs]}}. None: go on (the next step is not complete)."""
    first: dict[str, float] = {}
    previous: dict[str, float] = {}
    for value in adaptive.values:
        step = steps.get(value)
        if step is None:
            return None
        if step.get("bad"):
            return Stop(
                value, "failed", f"{adaptive.param}={value:g} did not run ok: {step['bad']}"
            )
        if step["ok"] < step["expected"]:
            return None
        medians = {}
        for rule in adaptive.rules:
            got = step["metrics"].get(rule.metric) or []
            if not got:
                return Stop(
                    value,
                    "failed",
                    f"{adaptive.param}={value:g}: the runs produced no '{rule.metric}'",
                )
            medians[rule.metric] = statistics.median(got)
        for rule in adaptive.rules:
            now = medians[rule.metric]
            if rule.above is not None and rule.metric in first:
                limit = rule.above * first[rule.metric]
                if now > limit:
                    return Stop(
                        value,
                        "breach",
                        f"{rule.metric} {now:.4g} > {rule.above:g} x "
                        f"{first[rule.metric]:.4g} = {limit:.4g} at "
                        f"{adaptive.param}={value:g}",
                    )
            if rule.min_gain is not None and rule.metric in previous:
                base = previous[rule.metric]
                gain = now / base - 1 if base else float("inf")
                if gain < rule.min_gain:
                    return Stop(
                        value,
                        "breach",
                        f"{rule.metric} gain {gain:+.1%} < "
                        f"{rule.min_gain:.0%} at {adaptive.param}={value:g} "
                        f"({base:.4g} -> {now:.4g})",
                    )
        for metric, median in medians.items():
            first.setdefault(metric, median)
            previous[metric] = median
    last = adaptive.values[-1]
    return Stop(last, "cap", f"cap reached at {adaptive.param}={last:g}; no rule breached")


def as_extra(adaptive: Adaptive) -> dict[str, Any]:
    """What a run point carries (plain data: points are dumped as JSON in places)."""
    return {
        "param": adaptive.param,
        "values": list(adaptive.values),
        "rules": [r.__dict__ for r in adaptive.rules],
    }


def from_extra(data: dict[str, Any]) -> Adaptive:
    return Adaptive(
        data["param"], tuple(data["values"]), tuple(StopRule(**r) for r in data["rules"])
    )


def meta_key(host: str, experiment: str, ladder: str) -> str:
    return f"{META_PREFIX}{host}:{experiment}:{ladder}"


def stored_steps(
    store,
    campaign: str,
    host: str,
    experiment: str,
    adaptive: Adaptive,
    ladder: str,
    expected: dict[float, int],
) -> dict[float, dict[str, Any]]:
    """The ladder's steps as ``decide`` reads them, from the runs and metrics stored so far."""
    steps = {v: {"expected": n, "ok": 0, "bad": "", "metrics": {}} for v, n in expected.items()}
    ok_keys: dict[str, float] = {}
    for run in store.runs(campaign):
        if run.host != host or run.experiment != experiment or run.repetition < 0:
            continue
        if ladder_of(run.params, adaptive.param) != ladder:
            continue
        value = float(run.params.get(adaptive.param))
        if value not in steps:
            continue
        if run.status == RunStatus.OK:
            steps[value]["ok"] += 1
            ok_keys[run.run_key] = value
        elif not steps[value]["bad"]:
            steps[value]["bad"] = f"{run.status}: {run.reason}"
    wanted = {r.metric for r in adaptive.rules}
    for row in store.metric_rows(campaign) if ok_keys else ():
        value = ok_keys.get(row["run_key"])
        if value is not None and row["name"] in wanted:
            steps[value]["metrics"].setdefault(row["name"], []).append(float(row["value"]))
    return steps
