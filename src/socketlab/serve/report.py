"""The serving report: per arm and load level the seed's comparison columns, and the placement
A/B table (plow-campaign.md §5.9 and §5.1).

Values are medians over repetitions; a ``*`` marks a repeat spread (max - min over the median)
above 10%, as the seed's reports do. Ratios divide an arm by the baseline arm at the same load:
throughput (output tok/s in the measurement window), TPOT p99, TTFT p99, peak memory (sum of
PSS of the server tree during the level).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from socketlab.serve.runkind import PARSER
from socketlab.store.status import RunStatus

SPREAD = 0.10
COLUMNS = {  # metric -> short column name
    "window_output_tok_s": "tok_s",
    "median_ttft_ms": "ttft_p50",
    "p99_ttft_ms": "ttft_p99",
    "median_tpot_ms": "tpot_p50",
    "p99_tpot_ms": "tpot_p99",
    "peak_pss_bytes": "peak_pss",
    "completed": "completed",
    "failed": "failed",
}
RATIOS = {
    "throughput_ratio": "tok_s",
    "tpot_p99_ratio": "tpot_p99",
    "ttft_p99_ratio": "ttft_p99",
    "peak_memory_ratio": "peak_pss",
}


def cells(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (experiment, host, arm, placement, load): medians and spreads."""
    keys = ["experiment", "host", "arm", "placement", "load"]
    if frame.empty or "parser" not in frame or "dim.load" not in frame:
        return pd.DataFrame(columns=keys)
    f = frame[
        (frame["parser"] == PARSER)
        & frame["metric"].isin(list(COLUMNS))
        & (frame["dim.load"] != "all")
    ].copy()
    f = f.rename(columns={"dim.load": "load"})
    if f.empty:
        return pd.DataFrame(columns=keys)
    agg = f.groupby(keys + ["metric"], sort=False)["value"].agg(["median", "min", "max", "count"])
    agg["spread"] = (agg["max"] - agg["min"]) / agg["median"].where(agg["median"] != 0)
    med = agg["median"].unstack("metric").rename(columns=COLUMNS)
    spread = agg["spread"].unstack("metric").rename(columns=lambda m: COLUMNS[m] + "_spread")
    reps = agg["count"].groupby(level=keys).max().rename("reps")
    out = med.join(spread).join(reps).reset_index()
    out["_order"] = out["load"].map(_load_order)
    first = {a: i for i, a in enumerate(dict.fromkeys(f["arm"]))}  # arms in run order
    out["_arm"] = out["arm"].map(first)
    return out.sort_values(["experiment", "host", "_order", "_arm"]).drop(
        columns=["_order", "_arm"]
    )


def _load_order(label: str) -> tuple[int, float]:
    return (0 if label.startswith("c") else 1, float(label[1:]) if label[1:] else 0.0)


def comparison(cells_df: pd.DataFrame, baselines: dict[str, str]) -> pd.DataFrame:
    """Add the ratio columns against each experiment's baseline arm at the same load."""
    if cells_df.empty:
        return cells_df
    out = cells_df.copy()
    for ratio in RATIOS:
        out[ratio] = float("nan")
    for idx, row in out.iterrows():
        base_arm = baselines.get(row["experiment"])
        base = out[
            (out["experiment"] == row["experiment"])
            & (out["host"] == row["host"])
            & (out["load"] == row["load"])
            & (out["arm"] == base_arm)
        ]
        if base.empty:
            continue
        for ratio, col in RATIOS.items():
            if col in out and pd.notna(row.get(col)) and base.iloc[0].get(col):
                out.at[idx, ratio] = row[col] / base.iloc[0][col]
    return out


def _fmt(v: Any, digits: int = 2, spread: Any = None) -> str:
    if v is None or (isinstance(v, float) and pd.isna(v)):
        return "-"
    star = "*" if spread is not None and pd.notna(spread) and spread > SPREAD else ""
    return f"{v:,.{digits}f}{star}"


def comparison_table(cmp: pd.DataFrame) -> str:
    head = (
        "| experiment | arm | placement | load | out tok/s | TTFT p50 / p99 ms | "
        "TPOT p50 / p99 ms | peak MiB | throughput | TPOT P99 | TTFT P99 | peak memory |"
    )
    lines = [head, "|" + "---|" * 4 + "---:|" * 8]
    for _, r in cmp.iterrows():
        peak = r.get("peak_pss")
        lines.append(
            f"| {r['experiment']} | {r['arm']} | {r['placement']} | {r['load']} | "
            f"{_fmt(r.get('tok_s'), 1, r.get('tok_s_spread'))} | "
            f"{_fmt(r.get('ttft_p50'))} / {_fmt(r.get('ttft_p99'), 2, r.get('ttft_p99_spread'))} | "
            f"{_fmt(r.get('tpot_p50'))} / {_fmt(r.get('tpot_p99'), 2, r.get('tpot_p99_spread'))} | "
            f"{_fmt(peak / 2**20 if peak is not None and pd.notna(peak) else None, 1)} | "
            + " | ".join(f"{_fmt(r.get(k))}x" if pd.notna(r.get(k)) else "-" for k in RATIOS)
            + " |"
        )
    return "\n".join(lines)


def placement_table(cells_df: pd.DataFrame, reference: str = "workers") -> str:
    """Per experiment and load: each placement's TPOT p50 and its change against the
    reference placement (the seed's 13.83 -> 10.47 ms row pair)."""
    lines = [
        "| experiment | load | placement | arm | TPOT p50 ms | vs "
        + reference
        + " | TTFT p50 ms | out tok/s |",
        "|---|---|---|---|---:|---:|---:|---:|",
    ]
    for (exp, load), g in cells_df.groupby(["experiment", "load"], sort=False):
        ref = g[g["placement"] == reference]
        ref_tpot = ref.iloc[0]["tpot_p50"] if not ref.empty else None
        for _, r in g.iterrows():
            delta = "-"
            if ref_tpot and pd.notna(r.get("tpot_p50")):
                delta = f"{(r['tpot_p50'] / ref_tpot - 1) * 100:+.1f}%"
            lines.append(
                f"| {exp} | {load} | {r['placement']} | {r['arm']} | "
                f"{_fmt(r.get('tpot_p50'), 3)} | {delta} | {_fmt(r.get('ttft_p50'))} | "
                f"{_fmt(r.get('tok_s'), 1)} |"
            )
    return "\n".join(lines)


def serving_runs(store: Any, campaign: str) -> tuple[list[Any], dict[str, str]]:
    """The campaign's serving runs and each experiment's baseline arm (the first run that
    names one; imported runs may name none)."""
    runs = [r for r in store.runs(campaign) if "arm" in (r.extra or {})]
    baselines: dict[str, str] = {}
    for r in runs:
        if r.extra.get("baseline"):
            baselines.setdefault(r.experiment, r.extra["baseline"])
    return runs, baselines


def notes(runs: list[Any]) -> list[tuple[str, str, list[str]]]:
    """What the tables can't show, as (title, intro, items): runs whose client shared the
    server's CPUs, imports' limitations, runs not ok (markdown and HTML list them alike)."""
    out = []
    shared = sorted(
        {
            (r.experiment, r.extra["arm"], r.extra.get("placement", "?"))
            for r in runs
            if r.extra.get("client_shared")
        }
    )
    if shared:  # the client competed with the server for CPU: its timestamps carry that
        out.append(
            (
                "Load generator shared the server's CPUs",
                "No CPU was left free of the server, so the client ran on the server's "
                "CPUs (`client_shared`); its timestamps include that contention (tokens can "
                "arrive batched), so compare these rows with care:",
                [f"{exp} arm {arm} (placement {pl})" for exp, arm, pl in shared],
            )
        )
    limited = [r for r in runs if r.extra.get("limitations")]
    if limited:  # imports whose source lacks something: what was not computed, and why
        out.append(
            (
                "Limitations of imported runs",
                "",
                [
                    f"{r.experiment} arm {r.extra.get('arm')} {r.extra.get('load', '')} "
                    f"({r.extra.get('source_format', 'import')}): {line}"
                    for r in limited
                    for line in r.extra["limitations"]
                ],
            )
        )
    failed = [r for r in runs if r.status != RunStatus.OK]
    if failed:  # their numbers are in the tables above when they have any: say which
        out.append(
            (
                "Runs not ok",
                "",
                [
                    f"{r.experiment} arm {r.extra.get('arm')} rep "
                    f"{r.repetition}: {r.status}: {r.reason}"
                    for r in failed
                ],
            )
        )
    return out


def serving_report(store: Any, campaign: str) -> str:
    """The markdown report of a campaign's serving runs (runs that failed are listed)."""
    frame = store.metrics_frame(campaign)
    runs, baselines = serving_runs(store, campaign)
    c = cells(frame)
    parts = [f"# Serving report: {campaign}", ""]
    if c.empty:
        parts.append("No serving metrics stored.")
    else:
        parts += [
            "## Comparison (ratios: arm / baseline arm at the same load; * = repeat spread > 10%)",
            "",
            comparison_table(comparison(c, baselines)),
            "",
            "## Placement A/B",
            "",
            placement_table(c),
            "",
        ]
    for title, intro, items in notes(runs):
        parts += [
            f"## {title}",
            "",
            *([intro, ""] if intro else []),
            *[f"- {x}" for x in items],
            "",
        ]
    return "\n".join(parts).rstrip("\n") + "\n"
