"""Expansion: a spec and the facts of its hosts -> every run point, in run order. Pure.

`expand_points` does no I/O: the same spec and facts always give the same plan, which is what
makes run keys stable and `orchestrate plan` a faithful preview of `orchestrate run`.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from socketlab.build import misplaced
from socketlab.errors import PlanError, SpecError
from socketlab.safepath import inside
from socketlab.spec import kinds
from socketlab.spec.load import sweep_points
from socketlab.spec.model import Experiment, Requirements, Spec
from socketlab.spec.points import RunPoint
from socketlab.spec.render import ENV, base_context

#: Topology facts that are host state, not identity: IRQ placement and daemon pids change while
#: a host runs; THP, NUMA balancing, hugepages, the workqueue mask and cpufreq governors are
#: knobs that an operator (or playbooks/isolate.yml) sets. They stay out of the host profile, so
#: flipping one doesn't change every run key (a resume would run the whole campaign again). The
#: fingerprint taken before and after each run (collectors/fingerprint.py) records them on the run
#: and marks it invalid when one changes during it; whether the isolation plan is applied is
#: part of the profile (``isolation_applied``).
VOLATILE_FACTS = (
    "irqs",
    "irqbalance",
    "thp",
    "numa_balancing",
    "hugepages_2m",
    "workqueue_cpumask",
)


@dataclass(frozen=True)
class Skip:
    host: str
    experiment: str
    reason: str


@dataclass(frozen=True)
class Plan:
    spec: Spec
    points: list[RunPoint]  #: per host (in the order given), experiments in spec order
    skipped: list[Skip]
    hosts: tuple[str, ...]
    #: host -> {"topology": stable topology facts, "isolation": plan facts or None,
    #: "isolation_applied": bool}; the runner hashes it into run keys (host_profile_hash)
    host_profiles: dict[str, dict[str, Any]] = field(default_factory=dict)

    def profile_hash(self, host: str) -> str:
        return host_profile_hash(self.host_profiles[host])

    def counts(self) -> dict[str, dict[str, dict[str, int]]]:
        """host -> experiment -> {"points": sweep points, "runs": measured, "warmups": n}."""
        out: dict[str, dict[str, dict[str, int]]] = {}
        runs: Counter[tuple[str, str]] = Counter()
        warm: Counter[tuple[str, str]] = Counter()
        seen: dict[tuple[str, str], set[str]] = {}
        for p in self.points:
            key = (p.host, p.experiment)
            (warm if p.warmup else runs)[key] += 1
            seen.setdefault(key, set()).add(json.dumps(p.params, sort_keys=True, default=str))
        for (host, exp), params in seen.items():
            out.setdefault(host, {})[exp] = {
                "points": len(params),
                "runs": runs[(host, exp)],
                "warmups": warm[(host, exp)],
            }
        return out


def host_profile(entry: dict[str, Any]) -> dict[str, Any]:
    topology = {k: v for k, v in (entry.get("topology") or {}).items() if k not in VOLATILE_FACTS}
    if isinstance(topology.get("cpufreq"), dict):  # the driver is the host's; governors are set
        topology["cpufreq"] = {k: v for k, v in topology["cpufreq"].items() if k != "governors"}
    return {
        "topology": topology,
        "isolation": entry.get("isolation"),
        "isolation_applied": bool(entry.get("isolation_applied", False)),
    }


def host_profile_hash(profile: dict[str, Any]) -> str:
    canonical = json.dumps(profile, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def template_facts(entry: dict[str, Any]) -> dict[str, Any]:
    """What templates see as `facts`: topology facts, the isolation plan's lists on top."""
    facts = dict(entry.get("topology") or {})
    facts.update(entry.get("isolation") or {})
    facts["isolation_applied"] = bool(entry.get("isolation_applied", False))
    return facts


#: why a required device path is missing, when nothing more specific is known
_DEVICE_WHY = {
    "/dev/pseudo_lock": "pseudo-lock driver not loaded; playbooks/sram_driver.yml loads it",
    "/dev/cpu/0/msr": "msr driver not loaded (modprobe msr)",
    "/dev/cpu_dma_latency": "kernel without PM QoS (CONFIG_PM)",
    "/sys/fs/resctrl": "resctrl not mounted",
    "/proc/modules": "kernel without module support",
}
#: devices a kernel without module support can't gain: their driver is a module
_MODULE_DEVICES = {"/dev/pseudo_lock": "pseudo-lock driver", "/dev/cpu/0/msr": "msr driver"}


def device_why(dev: str, devices: set[str]) -> str:
    """The precise reason a host lacks `dev`, from the device paths it has."""
    if dev in _MODULE_DEVICES and "/proc/modules" not in devices:
        return f"{_MODULE_DEVICES[dev]} not loaded: kernel without module support"
    return _DEVICE_WHY.get(dev, "not present")


def unmet(requires: Requirements, entry: dict[str, Any], host: str) -> str | None:
    """Why the host doesn't meet the requirements, or None when it does."""
    topology = entry.get("topology") or {}
    flags = set(topology.get("flags") or ())
    devices = set(topology.get("devices") or ())
    missing = [f for f in requires.flags if f not in flags]
    lacks = [f"CPU flags {', '.join(missing)}"] if missing else []
    # every missing device with its own reason: a driver not loaded is the fix a user can act on
    lacks += [f"{d} ({device_why(d, devices)})" for d in requires.devices if d not in devices]
    if lacks:
        return f"host {host} lacks {' and '.join(lacks)}"
    if requires.isolation and not entry.get("isolation_applied"):
        why = entry.get("isolation_error")
        return f"isolation is not applied on host {host}" + (f" ({why})" if why else "")
    return None


def expand_points(
    spec: Spec, host_facts: dict[str, dict[str, Any]], *, repetitions: int | None = None
) -> Plan:
    """Every run point of `spec` on every host in `host_facts` (inventory name -> entry).

    An entry is {"topology": Topology.facts(), "isolation": IsolationPlan.facts() or None,
    "isolation_applied": bool} and may add "vars" (inventory variables, `vars` in templates)
    and "isolation_error" (why there is no plan). `repetitions` overrides every experiment's.
    Raises SpecError for templates that fail on a host, PlanError for unmet requirements
    whose on_unmet is "fail".
    """
    if repetitions is not None and repetitions < 1:
        raise PlanError(f"--repetitions must be at least 1, got {repetitions}")
    check_build_paths(spec)
    sweeps = {exp.name: sweep_points(exp.sweep) for exp in spec.experiments}
    handlers = {
        exp.name: kinds.handler(exp.kind, spec.where(f"experiments[{exp.index}].kind"))
        for exp in spec.experiments
    }
    for exp in spec.experiments:  # a kind may cross its own axes with the sweep (serving arms)
        kind_axes = handlers[exp.name].axes
        if kind_axes:
            sweeps[exp.name] = [{**p, **a} for p in sweeps[exp.name] for a in kind_axes(spec, exp)]
    points: list[RunPoint] = []
    skipped: list[Skip] = []
    profiles: dict[str, dict[str, Any]] = {}
    inventory = inventory_context(host_facts)
    for host, entry in host_facts.items():
        profiles[host] = host_profile(entry)
        facts = template_facts(entry)
        note = ""
        if entry.get("isolation") is None:
            note = "the host has no isolation plan" + (
                f": {entry['isolation_error']}" if entry.get("isolation_error") else ""
            )
        base = base_context(
            facts=facts,
            host=host,
            vars=entry.get("vars") or {},
            campaign=spec.campaign,
            # the host's interpreter (the controller's for local hosts): a command that needs
            # socketlab on the host, such as `-m socketlab.cli layer-stage`, starts with it
            python=entry.get("python") or "python3",
            # the host's copy of collectors/ (the runner installs it before any run), and the
            # other hosts of the plan: a two-host point names its peer's address
            tools=tools_dir(host, entry.get("vars") or {}),
            inventory=inventory,
        )
        for exp in spec.experiments:
            reason = unmet(exp.requires, entry, host)
            if reason:
                if exp.requires.on_unmet == "fail":
                    where = spec.where(exp.origins.get("requires", "requires"))
                    raise PlanError(f"{where}: {reason}, and on_unmet is 'fail'")
                skipped.append(Skip(host, exp.name, reason))
                continue
            render = handlers[exp.name].render
            context = {**base, "experiment": exp.name, "build": build_context(spec, exp)}
            rendered = []
            for params in sweeps[exp.name]:
                point_ctx = {**context, **params, "params": params}
                rendered.append(
                    (params, render(kinds.PointContext(spec, exp, host, params, point_ctx, note)))
                )
            reps = repetitions if repetitions is not None else exp.repetitions
            for index, rep in _order(exp, len(rendered), reps):
                params, r = rendered[index]
                points.append(
                    RunPoint(
                        campaign=spec.campaign,
                        experiment=exp.name,
                        host=host,
                        params=dict(params),
                        repetition=rep,
                        argv=r.argv,
                        env=r.env,
                        cpus=r.cpus,
                        timeout_s=exp.timeout_s,
                        build=exp.build,
                        sanity=exp.sanity,
                        parsers=exp.parsers,
                        collectors=exp.collectors,
                        kind=exp.kind,
                        extra=_with_probe(_with_adaptive(r.extra, exp), spec, exp, r, entry),
                    )
                )
    return Plan(spec, _campaign_order(spec, points), skipped, tuple(host_facts), profiles)


def _with_probe(
    extra: dict[str, Any], spec: Spec, exp: Experiment, rendered: Any, entry: dict[str, Any]
) -> dict[str, Any]:
    """A point of the probe's build carries what the runner runs around it (socketlab.probe)."""
    if spec.probe is None or exp.build is None or extra.get("runs_on") == "controller":
        return extra
    from socketlab.probe import point_probe

    probe = point_probe(
        spec.probe,
        exp.build,
        spec.builds[exp.build].dir,
        rendered.cpus,
        rendered.argv,
        entry.get("topology") or {},
    )
    return {**extra, "probe": probe} if probe else extra


def _campaign_order(spec: Spec, points: list[RunPoint]) -> list[RunPoint]:
    """`order: interleaved`: per host, round k (repetition k of every point of every
    experiment) before round k+1; within a round the experiments' own order. Warm-ups stay
    right before their point's first run (they sort with round 0)."""
    if spec.order != "interleaved":
        return points
    hosts = {h: i for i, h in enumerate(dict.fromkeys(p.host for p in points))}
    return sorted(points, key=lambda p: (hosts[p.host], max(p.repetition, 0)))


def build_context(spec: Spec, exp: Experiment) -> Any:
    """`build` in templates: the experiment's build, whose ``dir`` is where its binaries are,
    relative to the working directory of its runs (socketlab.build: make gets BUILD=dir)."""
    if exp.build is None:
        known = ", ".join(sorted(spec.builds)) or "none declared"
        return ENV.undefined(
            hint=f"experiment '{exp.name}' has no build, so 'build' is "
            f"undefined; expected `build: NAME` naming one of the spec's "
            f"builds ({known})"
        )
    build = spec.builds[exp.build]
    return {"name": build.name, "dir": build.dir, "cc": build.cc or "cc"}


def check_build_paths(spec: Spec) -> None:
    """A literal path into another build folder than the build's own is a SpecError."""
    for build in spec.builds.values():
        found = misplaced(build, build.target)
        if found:
            raise SpecError(
                f"{spec.where(f'builds.{build.name}.target')}: '{found[0]}' is not "
                f"in this build's folder {build.dir} (from cc: {build.cc}); "
                f"expected a target such as 'all' or '{build.dir}/{found[1]}'"
            )
    for exp in spec.experiments:
        if exp.build is None:
            continue
        build = spec.builds[exp.build]
        for j, source in enumerate(exp.command):
            found = misplaced(build, source)
            if found:
                where = spec.where(exp.origins.get(f"command[{j}]", f"experiments[{exp.index}]"))
                raise SpecError(
                    f"{where}: '{found[0]}' is not where build '{build.name}' puts "
                    f"its binaries ({build.dir}, from cc: {build.cc}); write "
                    f"'{{{{ build.dir }}}}/{found[1]}'"
                )


def _with_adaptive(extra: dict[str, Any], exp: Experiment) -> dict[str, Any]:
    """An adaptive experiment's points carry its ladder and rules for the runner."""
    if exp.extra.get("adaptive") is None:
        return extra
    from socketlab.spec.adaptive import as_extra

    return {**extra, "adaptive": as_extra(exp.extra["adaptive"])}


def tools_dir(host: str, host_vars: dict[str, Any]) -> str:
    """Where the runner puts collectors/*.py on the host (socketlab.execute.Executor.tools)."""
    from socketlab.execute import default_workroot

    return inside(
        str(host_vars.get("socketlab_workroot") or default_workroot()),
        host,
        "tools",
        what="host name",
    )


def inventory_context(host_facts: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """`inventory` in templates: every planned host's address and inventory variables."""
    out = {}
    for name, entry in host_facts.items():
        host_vars = entry.get("vars") or {}
        address = entry.get("address") or host_vars.get("ansible_host") or name
        out[name] = {
            "address": "127.0.0.1" if address == "localhost" else address,
            "vars": host_vars,
        }
    return out


def _order(exp: Experiment, npoints: int, reps: int) -> list[tuple[int, int]]:
    """(sweep point index, repetition) in run order; warm-ups (-w..-1) right before a point's
    first measured run.

    sequential: each point's repetitions back to back. interleaved: round r runs every point
    once, so slow drift spreads over all points. shuffled: a random order seeded by the
    experiment's seed (the same on every host, so hosts stay comparable).
    """
    if exp.order == "interleaved":
        measured = [(i, r) for r in range(reps) for i in range(npoints)]
    else:
        measured = [(i, r) for i in range(npoints) for r in range(reps)]
    if exp.order == "shuffled":
        random.Random(f"{exp.seed}/{exp.name}").shuffle(measured)
    if not exp.warmup:
        return measured
    out: list[tuple[int, int]] = []
    warmed: set[int] = set()
    for i, r in measured:
        if i not in warmed:
            warmed.add(i)
            out.extend((i, w) for w in range(-exp.warmup, 0))
        out.append((i, r))
    return out
