"""The planner's verdicts on this campaign's hosts (issue 13 item 5, docs/planner.md): every
real-layer stage a host measured (`native/layer` runs without --slice, through `orchestrate
layer-stage` or direct) next to the planner's prediction of the same stage from the constants
the same host measured (`constants_from_store`: layer --slice, exchange, kvstream), with the
prediction error and the terms. Computed when the report is built, from stored runs only (the
predictions are arithmetic on them, so they need no run of their own); a host without the
constants gets one line naming the experiment that gives them.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from socketlab.errors import SocketlabError
from socketlab.plan.stage import Budget, Prediction, layer_stage
from socketlab.plan.stage_constants import (
    constants_from_store,
    measured_constants,
    native_arg,
    native_binary,
    stored_runs,
)
from socketlab.plan.stage_model import layer_model, units

KERNELS = {"avx512": "avx512", "amx": "amx", "avx2": "avx2", "scalar": "scalar"}


@dataclass(frozen=True)
class Verdict:
    host: str
    experiment: str
    shape: str
    context: int
    batch: int
    workers: int
    kernel: str
    measured_us: float
    runs: int
    predicted: Prediction | None
    note: str  #: why there is no prediction, or what the prediction assumed

    @property
    def error(self) -> float | None:
        if self.predicted is None or self.measured_us <= 0:
            return None
        return self.predicted.total_us / self.measured_us - 1


def _dims(run: dict, name: str) -> dict:
    return next((d for n, _, d in run["metrics"] if n == name), {})


def stage_verdicts(results: Path, campaign: str, hosts: list[str]) -> list[Verdict]:
    out: list[Verdict] = []
    for host in hosts:
        runs = [
            r
            for r in stored_runs(results, host)
            if r["campaign"] == campaign
            and native_binary(r) == "layer"
            and not native_arg(r, "--slice")
        ]
        groups: dict[tuple, list[float]] = {}
        for r in runs:
            step = [v for n, v, _ in r["metrics"] if n == "step_p50"]
            d = _dims(r, "step_p50")
            if not step or "shape" not in d:
                continue
            key = (
                r["experiment"],
                str(d["shape"]),
                int(d.get("ctx", 0)),
                int(d.get("batch", 1)),
                int(d.get("workers", 1)),
                str(d.get("gemv", native_arg(r, "--gemv") or "avx2")),
                bool(d.get("nobcast", False)),
            )
            groups.setdefault(key, []).append(step[0])
        for (exp, shape, ctx, b, w, kernel, nobcast), vals in sorted(groups.items()):
            pred, note = (
                None,
                "nobcast: the all-gather is left out of the timing" if nobcast else "",
            )
            try:
                c = constants_from_store(
                    host, results=results, kernel=KERNELS.get(kernel, kernel), batch=b
                )
                us = units(layer_model(shape))
                nbytes = sum(x.bytes for x in us) // w
                g = measured_constants(
                    host, results=results, kernel=kernel, bytes_per_core=nbytes, batch=b
                )
                if "gemv_gbps_per_core" in g:  # the slice run nearest this stage's bytes/core
                    c = c.replace(gemv_gbps_per_core=g["gemv_gbps_per_core"].value)
                if nobcast:
                    c = c.replace(act_gbps=float("inf"))
                if w == 1:  # one worker has no peer to wait for or gather from
                    c = c.replace(exchange_us=0.0, act_gbps=float("inf"))
                    note = "one worker: no sync or all-gather term"
                pred = layer_stage(us, 0, Budget(cores=w, batch=b, context=max(ctx, 1)), c)
            except SocketlabError as exc:
                note = f"not predicted: {exc}"
            out.append(
                Verdict(
                    host,
                    exp,
                    shape,
                    ctx,
                    b,
                    w,
                    kernel,
                    statistics.median(vals),
                    len(vals),
                    pred,
                    note,
                )
            )
    return out


def planner_markdown(results: Path, campaign: str, hosts: list[str]) -> str:
    """The section, or "" when no host measured a stage."""
    rows = stage_verdicts(results, campaign, hosts)
    if not rows:
        return ""
    out = [
        "### Planner: predicted vs measured real-layer stages (same host)",
        "",
        "Prediction: `socketlab.plan.stage.layer_stage` of the stage's shape with the "
        "constants measured on the same host (`orchestrate stage-plan --host H` prints their "
        "run keys); measured: the median step p50 of the stage's runs.",
        "",
        "| host | experiment | stage | ctx | B | workers | kernel | predicted µs | measured "
        "p50 µs | error | predicted gemv / sync / kv / act | note |",
        "|---|---|---|---:|---:|---:|---|---:|---:|---:|---|---|",
    ]
    for v in rows:
        p = v.predicted
        terms = f"{p.gemv_us:.1f} / {p.sync_us:.1f} / {p.kv_us:.1f} / {p.act_us:.1f}" if p else "—"
        out.append(
            f"| {v.host} | {v.experiment} | {v.shape} | {v.context} | {v.batch} | "
            f"{v.workers} | {v.kernel} | {p.total_us:.1f} | "
            if p
            else f"| {v.host} | {v.experiment} | {v.shape} | {v.context} | {v.batch} | "
            f"{v.workers} | {v.kernel} | — | "
        )
        out[-1] += (
            f"{v.measured_us:.1f} | "
            + (f"{v.error:+.1%}" if v.error is not None else "—")
            + f" | {terms} | {v.note.replace('|', '/')} |"
        )
    return "\n".join(out) + "\n"
