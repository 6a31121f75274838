"""The platform report: host vs guest with ratios, network by streams, S3 aggregates, facts, AMX.

Pure functions of the store's ok runs and each machine's inventory variables
(``results/<campaign>/hosts/<name>.json``): ``socketlab_tier`` (host or guest) and, on a guest,
``socketlab_host`` (the host it runs on). A guest is compared with its own host (CPU, disk); the
network and S3 rows compare the tiers (a guest pair against the host pair, all guests' clients
against all hosts' clients). Ratios are guest / host: below 1 the guest is slower.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from socketlab.store.status import RunStatus


@dataclass
class Data:
    tiers: dict[str, str]  #: machine -> "host" | "guest"
    host_of: dict[str, str]  #: guest -> its host
    #: (experiment, metric) -> [(machine, params, dims, repetition, value, run_key)]
    values: dict[tuple[str, str], list[tuple[str, dict, dict, int, float, str]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    #: adaptive sweeps: (machine, experiment) -> the stop the runner recorded
    stops: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    #: stored runs that are not ok: (machine, experiment, params, status, reason), e.g. a host
    #: tool's "not available on this host: boto3 is not installed" (exit 3)
    not_ok: list[tuple[str, str, dict, str, str]] = field(default_factory=list)


def load(store, campaign: str, results_dir: Path) -> Data:
    tiers, host_of = {}, {}
    for path in sorted((results_dir / "hosts").glob("*.json")):
        entry = json.loads(path.read_text())
        host_vars = entry.get("vars") or {}
        tiers[path.stem] = str(host_vars.get("socketlab_tier", "host"))
        if host_vars.get("socketlab_host"):
            host_of[path.stem] = str(host_vars["socketlab_host"])
    data = Data(tiers, host_of)
    from socketlab.spec.adaptive import META_PREFIX

    for key, value in store.meta_items(META_PREFIX).items():
        machine, experiment = key.removeprefix(META_PREFIX).split(":", 2)[:2]
        data.stops[(machine, experiment)] = json.loads(value)
    stored = store.runs(campaign)
    runs = {r.run_key: r for r in stored if r.status == RunStatus.OK}
    data.not_ok = [
        (r.host, r.experiment, dict(r.params), r.status, r.reason or "")
        for r in stored
        if r.status != RunStatus.OK
    ]
    for row in store.metric_rows(campaign):
        run = runs.get(row["run_key"])
        if run is None:
            continue
        dims = json.loads(row["dims"] or "{}")
        data.values[(run.experiment, row["name"])].append(
            (run.host, dict(run.params), dims, run.repetition, float(row["value"]), run.run_key)
        )
    return data


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _ratio(guest: float | None, host: float | None) -> str:
    return "-" if guest is None or not host else f"{guest / host:.3f}"


def per_machine(data: Data, experiment: str, metric: str, keys: tuple[str, ...]) -> dict:
    """(machine, key values) -> median over repetitions; keys are parameters or dimensions."""
    groups: dict[tuple, list[float]] = defaultdict(list)
    for machine, params, dims, _, value, _ in data.values.get((experiment, metric), []):
        both = {**params, **dims}
        groups[(machine, tuple(both.get(k) for k in keys))].append(value)
    return {k: statistics.median(v) for k, v in groups.items()}


def host_vs_guest(data: Data) -> list[list[str]]:
    """Rows: measurement, condition, guest, host, guest value, host value, guest/host."""
    rows = []
    cases = [
        ("CPU sysbench events/s", "sysbench-cpu", "events_per_second", ("threads",), "threads"),
        ("disk fio read MiB/s", "fio", "read_bw", ("pattern", "bs"), "pattern/bs"),
    ]
    for label, experiment, metric, keys, key_label in cases:
        medians = per_machine(data, experiment, metric, keys)
        for guest, host in sorted(data.host_of.items()):
            conditions = sorted({k for (m, k) in medians if m in (guest, host)}, key=str)
            for cond in conditions:
                g, h = medians.get((guest, cond)), medians.get((host, cond))
                text = f"{key_label}={'/'.join(map(str, cond))}"
                rows.append([label, text, guest, host, _fmt(g), _fmt(h), _ratio(g, h)])
    return rows


def network(data: Data) -> list[list[str]]:
    """Rows: streams, host-pair Gbit/s, guest-pair Gbit/s, guest/host (medians over clients)."""
    per = per_machine(data, "iperf3", "throughput", ("streams",))
    tiers: dict[tuple[str, Any], list[float]] = defaultdict(list)
    for (machine, (streams,)), value in per.items():
        tiers[(data.tiers.get(machine, "host"), streams)].append(value)
    rows = []
    for streams in sorted({s for _, s in tiers}, key=lambda s: float(s)):
        h, g = _median(tiers.get(("host", streams), [])), _median(tiers.get(("guest", streams), []))
        rows.append([str(streams), _fmt(h, 2), _fmt(g, 2), _ratio(g, h)])
    return rows


def s3_aggregates(data: Data) -> dict[tuple[str, str], list[float]]:
    """(tier, direction) -> aggregate MiB/s per repetition: sum(bytes) / (last end - first start)
    over the clients that ran together (every machine of the tier)."""
    parts: dict[tuple, dict[str, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    for metric in ("bytes", "t_start", "t_end"):
        for machine, params, dims, rep, value, _ in data.values.get(("s3", metric), []):
            tier = str(dims.get("group") or data.tiers.get(machine, "host"))
            ident = (
                tier,
                params.get("direction"),
                rep,
                json.dumps({k: v for k, v in params.items() if k != "direction"}, sort_keys=True),
            )
            parts[ident][machine][metric] = value
    out: dict[tuple[str, str], list[float]] = defaultdict(list)
    for (tier, direction, _, _), clients in parts.items():
        full = [c for c in clients.values() if len(c) == 3]
        if not full:
            continue
        span = max(c["t_end"] for c in full) - min(c["t_start"] for c in full)
        if span > 0:
            out[(tier, direction)].append(sum(c["bytes"] for c in full) / 2**20 / span)
    return out


def s3_rows(data: Data) -> list[list[str]]:
    agg = s3_aggregates(data)
    clients = defaultdict(set)
    for machine, _, dims, _, _, _ in data.values.get(("s3", "bytes"), []):
        clients[str(dims.get("group") or data.tiers.get(machine, "host"))].add(machine)
    rows = []
    for direction in ("read", "write"):
        h, g = _median(agg.get(("host", direction), [])), _median(agg.get(("guest", direction), []))
        if h is None and g is None:
            continue
        rows.append(
            [
                direction,
                _fmt(h),
                _fmt(g),
                _ratio(g, h),
                f"{len(clients['host'])} / {len(clients['guest'])}",
            ]
        )
    return rows


def facts_rows(data: Data) -> list[list[str]]:
    got: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)
    for metric in ("mtu", "virtio", "queues_combined"):
        for machine, _, dims, _, value, _ in data.values.get(("netfacts", metric), []):
            cell = got[(machine, str(dims.get("iface")))]
            cell[metric] = ("yes" if value else "no") if metric == "virtio" else f"{value:g}"
            if metric == "queues_combined":
                cell["source"] = str(dims.get("source", ""))
    return [
        [
            m,
            data.tiers.get(m, "host"),
            iface,
            c.get("mtu", "-"),
            c.get("virtio", "-"),
            c.get("queues_combined", "-") + (f" ({c['source']})" if c.get("source") else ""),
        ]
        for (m, iface), c in sorted(got.items())
    ]


def amx_rows(data: Data) -> list[list[str]]:
    rows = []
    for machine, _, dims, _, _, _ in data.values.get(("amx", "amx_executing"), []):
        rows.append(
            [
                machine,
                str(dims.get("run")),
                str(dims.get("precision")),
                str(dims.get("verdict")),
                str(dims.get("implementation")),
                str(dims.get("isa")),
                str(dims.get("reason")),
            ]
        )
    return sorted(rows)


def sweep_rows(data: Data, experiment: str = "concurrency") -> list[list[str]]:
    """Rows: machine, workers, p95 ms, throughput 1/s, and where/why the sweep stopped."""
    p95 = per_machine(data, experiment, "latency_p95", ("workers",))
    tput = per_machine(data, experiment, "throughput", ("workers",))
    rows = []
    for machine, (workers,) in sorted(p95, key=lambda k: (k[0], float(k[1][0]))):
        stop = data.stops.get((machine, experiment))
        note = ""
        if stop and float(stop["value"]) == float(workers):
            note = f"{stop['kind']}: {stop['reason']}"
        rows.append(
            [
                machine,
                str(workers),
                _fmt(p95[(machine, (workers,))]),
                _fmt(tput.get((machine, (workers,)))),
                note,
            ]
        )
    return rows


def not_ok_rows(data: Data) -> list[list[str]]:
    """Rows: machine, experiment, parameters, status, reason (one line) of each run not ok."""
    rows = []
    for machine, experiment, params, status, reason in data.not_ok:
        cond = ", ".join(f"{k}={v}" for k, v in sorted(params.items())) or "-"
        rows.append(
            [machine, experiment, cond, status, " ".join(reason.split()).replace("|", "/") or "-"]
        )
    return sorted(rows)


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    if not rows:
        return ["(no ok runs)"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def render(campaign: str, data: Data, extra: list[str] | None = None) -> str:
    lines = [
        f"# Platform report: {campaign}",
        "",
        "Ratios are guest / host (below 1: the guest is slower); medians over repetitions.",
        "",
        "## Host vs guest (each guest against its own host)",
        "",
    ]
    lines += _table(
        ["measurement", "condition", "guest", "host", "guest value", "host value", "guest/host"],
        host_vs_guest(data),
    )
    lines += ["", "## Network: iperf3 Gbit/s by streams (host pair vs guest pair)", ""]
    lines += _table(["streams", "hosts", "guests", "guest/host"], network(data))
    lines += ["", "## S3 aggregate MiB/s (clients started together, bytes / span)", ""]
    lines += _table(
        [
            "direction",
            "host aggregate",
            "guest aggregate",
            "guest/host",
            "clients (hosts / guests)",
        ],
        s3_rows(data),
    )
    lines += ["", "## Concurrency sweep (stops at the first breach or at its cap)", ""]
    lines += _table(["machine", "workers", "p95 ms", "throughput 1/s", "stopped"], sweep_rows(data))
    lines += ["", "## Network facts", ""]
    lines += _table(
        ["machine", "tier", "iface", "MTU", "virtio", "combined queues"], facts_rows(data)
    )
    lines += ["", "## AMX: oneDNN kernel-selection verdicts", ""]
    lines += _table(
        ["machine", "run", "precision", "verdict", "implementation", "oneDNN ISA", "reason"],
        amx_rows(data),
    )
    missing = not_ok_rows(data)
    if missing:  # e.g. "exit code 3 ...: not available on this host: <reason>" (host tools)
        lines += ["", "## Points that did not run ok", ""]
        lines += _table(["machine", "experiment", "parameters", "status", "reason"], missing)
    return "\n".join(lines + (extra or [])) + "\n"
