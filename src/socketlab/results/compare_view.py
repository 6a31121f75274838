"""A Comparison as markdown, as standalone HTML with a plot of every ratio and its interval,
and as JSON lines (one per point, the points on one side only included)."""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd

from socketlab.plots import figure, png_base64, template_env
from socketlab.results.comparison import (
    FASTER,
    HIGHER,
    INCONCLUSIVE,
    LOWER,
    ONLY_A,
    ONLY_B,
    SAME,
    SLOWER,
    Comparison,
)
from socketlab.results.schema import DIM

#: a verdict's colour in the plot and the HTML (red: worse, green: better, grey: no change)
COLOURS = {
    SLOWER: "#c0392b",
    FASTER: "#27ae60",
    LOWER: "#8e6c3a",
    HIGHER: "#3a6c8e",
    SAME: "#7f8c8d",
    INCONCLUSIVE: "#e5a50a",
}
#: verdicts in the order the tables list them: what a reader must see first
ORDER = {v: i for i, v in enumerate((SLOWER, FASTER, INCONCLUSIVE, LOWER, HIGHER, SAME))}


def point_text(row: Any, point: list[str], skip: tuple[str, ...] = ()) -> str:
    """'kernel=avx2-read size=16K; stat=rep' (parameters; dimensions after ';', those that
    repeat a parameter left out)."""
    fixed = ("experiment", "metric", "unit", "parser", *skip)
    params = {
        c: row[c] for c in point if c not in fixed and not c.startswith(DIM) and not pd.isna(row[c])
    }
    dims = [
        f"{c[len(DIM) :]}={row[c]}"
        for c in point
        if c.startswith(DIM)
        and not pd.isna(row[c])
        and str(params.get(c[len(DIM) :], "\0")) != str(row[c])
    ]
    params = [f"{c}={v}" for c, v in params.items()]
    return " ".join(params) + ("; " + " ".join(dims) if dims else "")


def num(x: Any) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    ax = abs(x)
    return f"{x:,.0f}" if ax >= 1000 else f"{x:.4g}"


def _rows(c: Comparison) -> list[dict[str, Any]]:
    out = []
    for _, r in c.rows.iterrows():
        interval = "—" if math.isnan(r["ci_low"]) else f"{r['ci_low']:.3g}–{r['ci_high']:.3g}"
        out.append(
            {
                "experiment": r["experiment"],
                "point": point_text(r, c.point),
                "metric": r["metric"],
                "unit": r["unit"],
                "a": num(r["median_a"]),
                "b": num(r["median_b"]),
                "n": f"{r['n_a']} / {r['n_b']}",
                "ratio": "—" if math.isnan(r["ratio"]) else f"{r['ratio']:.3g}",
                "interval": interval,
                "verdict": r["verdict"],
                "why": r["why"],
                "collector": str(r["parser"]).startswith("collector:"),
            }
        )
    return sorted(out, key=lambda x: (x["experiment"], x["collector"], ORDER[x["verdict"]]))


def _only(frame: pd.DataFrame, c: Comparison) -> list[str]:
    return sorted(
        f"{r['experiment']} {point_text(r, c.point)} {r['metric']} [{r['unit']}]"
        for _, r in frame.iterrows()
    )


def context(c: Comparison) -> dict[str, Any]:
    s = c.settings
    counts = c.counts()
    return {
        "a": c.a,
        "b": c.b,
        "rows": _rows(c),
        "only_a": _only(c.only_a, c),
        "only_b": _only(c.only_b, c),
        "notes": c.notes,
        "counts": ", ".join(f"{n} {v}" for v, n in counts.items()) or "nothing matched",
        "settings": f"ratio = B / A of the medians; {s.confidence:.0%} interval by "
        f"bootstrap over repetitions ({s.resamples} resamples, seed {s.seed}); "
        f"same within ±{s.tolerance:.0%}",
    }


def render_markdown(c: Comparison) -> str:
    return (
        template_env("socketlab.results", html=False)
        .get_template("compare.md.j2")
        .render(context(c))
    )


def render_html(c: Comparison) -> str:
    return (
        template_env("socketlab.results", html=True)
        .get_template("compare.html.j2")
        .render({**context(c), "plot": plot(c), "colours": COLOURS})
    )


def plot(c: Comparison) -> str | None:
    """Ratio B/A with its interval per point of a metric that has a better direction (log
    scale, the ±tolerance band shaded), coloured by verdict; base64 PNG, None if none."""
    rows = c.rows[(c.rows["better"] != "none") & c.rows["ci_low"].notna()]
    if rows.empty:
        return None
    rows = rows.assign(
        label=[
            f"{r['experiment']} {point_text(r, c.point)} {r['metric']}" for _, r in rows.iterrows()
        ]
    ).sort_values("label")
    fig, ax = figure(8.5, 1.2 + 0.24 * len(rows))
    y = range(len(rows))
    t = c.settings.tolerance
    ax.axvspan(1 - t, 1 + t, color="#dddddd", zorder=0, label=f"same (±{t:.0%})")
    ax.axvline(1.0, color="#555555", lw=0.8)
    for i, (_, r) in zip(y, rows.iterrows(), strict=True):
        colour = COLOURS[r["verdict"]]
        ax.plot([r["ci_low"], r["ci_high"]], [i, i], color=colour, lw=2.2)
        ax.plot(r["ratio"], i, "o", color=colour, ms=4)
    ax.set_yticks(list(y), list(rows["label"]), fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel(f"{c.b} / {c.a} (median ratio, {c.settings.confidence:.0%} interval)")
    ax.invert_yaxis()
    ax.grid(True, axis="x", which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    return png_base64(fig)


def json_lines(c: Comparison) -> list[str]:
    """One JSON object per point: its columns, the medians, ratio, interval and verdict; the
    points of one side only with verdict ONLY_A / ONLY_B."""

    def clean(d: dict[str, Any]) -> dict[str, Any]:
        return {
            k: (
                None
                if v is None or (not isinstance(v, str) and pd.isna(v))
                else v.item()
                if hasattr(v, "item")
                else v
            )
            for k, v in d.items()
        }

    lines = [
        json.dumps(clean({"a": c.a, "b": c.b, **r}), default=str) for r in c.rows.to_dict("records")
    ]
    for frame, verdict in ((c.only_a, ONLY_A), (c.only_b, ONLY_B)):
        lines += [
            json.dumps(clean({"a": c.a, "b": c.b, **r, "verdict": verdict}), default=str)
            for r in frame.to_dict("records")
        ]
    return lines
