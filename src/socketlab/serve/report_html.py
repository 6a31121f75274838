"""The serving report as standalone HTML with plots (`orchestrate serving-report --format
html`): the same cells as the markdown (socketlab.serve.report.cells, medians over repetitions)
as tables, and four figures drawn from them: TTFT and TPOT percentiles by load level,
output throughput against concurrency, and the placement A/B of TPOT p50.
"""

from __future__ import annotations

import time
from typing import Any

import pandas as pd

from socketlab.plots import figure, png_base64, template_env
from socketlab.serve.report import RATIOS, _load_order, cells, comparison, notes, serving_runs


def _series(c: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(label, its rows in load order) per experiment, host, arm and placement."""
    out = []
    for (exp, host, arm, placement), g in c.groupby(
        ["experiment", "host", "arm", "placement"], sort=False
    ):
        label = (
            f"{exp} {arm}"
            + (f" ({placement})" if placement != arm else "")
            + (f" on {host}" if c["host"].nunique() > 1 else "")
        )
        out.append((label, g.sort_values("load", key=lambda s: s.map(_load_order))))
    return out


def latency_plot(c: pd.DataFrame, metric: str, title: str) -> str | None:
    """p50 (solid) and p99 (dashed) of ``metric`` (ttft, tpot) per load level and series."""
    if f"{metric}_p50" not in c:
        return None
    loads = sorted(c["load"].unique(), key=_load_order)
    fig, ax = figure(6.4, 3.6)
    for label, g in _series(c):
        x = [loads.index(v) for v in g["load"]]
        (line,) = ax.plot(x, g[f"{metric}_p50"], "o-", label=f"{label} p50")
        if f"{metric}_p99" in g:
            ax.plot(x, g[f"{metric}_p99"], "s--", color=line.get_color(), label=f"{label} p99")
    ax.set_xticks(range(len(loads)), loads)
    ax.set_xlabel("load level (c: concurrency, r: request rate)")
    ax.set_ylabel(f"{title} [ms]")
    ax.set_title(f"{title} percentiles by load", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    return png_base64(fig)


def throughput_plot(c: pd.DataFrame) -> str | None:
    """Output tokens/s in the measurement window against concurrency (closed-loop levels)."""
    closed = c[c["load"].str.match(r"^c\d+$")]
    if closed.empty or "tok_s" not in closed:
        return None
    fig, ax = figure(6.4, 3.6)
    for label, g in _series(closed):
        ax.plot(g["load"].str[1:].astype(int), g["tok_s"], "o-", label=label)
    ax.set_xticks(sorted(closed["load"].str[1:].astype(int).unique()))
    ax.set_xlabel("concurrency (requests in flight)")
    ax.set_ylabel("output tokens/s (window)")
    ax.set_title("Throughput vs concurrency", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    return png_base64(fig)


def placement_plot(c: pd.DataFrame) -> str | None:
    """TPOT p50 per placement, grouped by experiment and load (the A/B)."""
    if "tpot_p50" not in c or c["placement"].nunique() < 2:
        return None
    groups = [(f"{e} {lv}", g) for (e, lv), g in c.groupby(["experiment", "load"], sort=False)]
    places = list(dict.fromkeys(c["placement"]))
    width = 0.8 / len(places)
    fig, ax = figure(6.4, 3.6)
    for i, place in enumerate(places):
        ys = [g.loc[g["placement"] == place, "tpot_p50"].median() for _, g in groups]
        ax.bar([k + i * width for k in range(len(groups))], ys, width, label=place)
    ax.set_xticks(
        [k + 0.4 - width / 2 for k in range(len(groups))], [n for n, _ in groups], fontsize=8
    )
    ax.set_ylabel("TPOT p50 [ms]")
    ax.set_title("Placement A/B: TPOT p50", fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7, title="placement", title_fontsize=7)
    return png_base64(fig)


def _table(frame: pd.DataFrame) -> str:
    return frame.to_html(
        index=False, na_rep="-", float_format=lambda v: f"{v:,.3g}", border=0, classes="cells"
    )


def serving_html(store: Any, campaign: str) -> str:
    """The HTML report of a campaign's serving runs: plots, the comparison table, the notes."""
    frame = store.metrics_frame(campaign)
    runs, baselines = serving_runs(store, campaign)
    c = cells(frame)
    plots = (
        []
        if c.empty
        else [
            p
            for p in (
                latency_plot(c, "ttft", "TTFT"),
                latency_plot(c, "tpot", "TPOT"),
                throughput_plot(c),
                placement_plot(c),
            )
            if p
        ]
    )
    table = ""
    if not c.empty:
        cmp = comparison(c, baselines)
        shown = [
            k
            for k in (
                "experiment",
                "host",
                "arm",
                "placement",
                "load",
                "reps",
                "tok_s",
                "ttft_p50",
                "ttft_p99",
                "tpot_p50",
                "tpot_p99",
                "peak_pss",
                "completed",
                "failed",
                *RATIOS,
            )
            if k in cmp
        ]
        table = _table(cmp[shown])
    return (
        template_env("socketlab.serve", html=True)
        .get_template("serving-report.html.j2")
        .render(
            campaign=campaign,
            plots=plots,
            table=table,
            runs=len(runs),
            notes=notes(runs),
            generated=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        )
    )
