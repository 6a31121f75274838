"""Render the published-vs-measured comparison: markdown, and a standalone HTML with PNG plots.

Input is a ``Report`` (what ``socketlab.report.gather`` gathers from the store: comparison rows,
host facts, provenance); ``socketlab.report.view`` arranges it (judged cells as rows, the rest
one line per reason, counts per section) and the Jinja templates in ``templates/`` write it.
Plots are drawn with matplotlib's Agg backend and embedded as base64 PNGs, so the HTML file is
one self-contained file a person can mail or open anywhere; on a host with the published core a
table with per-core cells is drawn per core.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from socketlab.plots import template_env
from socketlab.report.compare import (
    DEVIATES,
    DEVIATES_PER_CORE,
    DISPUTED,
    INCONCLUSIVE,
    MEASURED_KINDS,
    NOT_COMPARABLE,
    NOT_RUN,
    RECOMPUTED,
    RECOMPUTED_DIFFERS,
    REPRODUCED,
    REPRODUCED_PER_CORE,
    SCALE_DIMS,
    Row,
    fmt,
    summary,
)
from socketlab.report.coreclass import core_class
from socketlab.report.published import Published, Table
from socketlab.report.view import file_views


@dataclass
class Report:
    campaign: str
    published: list[Published]
    rows: list[Row]  #: comparison rows of every published file, in file order
    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)  #: name -> facts entry
    provenance: dict[str, Any] = field(default_factory=dict)  #: spec, profile, builds, isolation
    generated: str = ""  #: UTC timestamp text
    extra_markdown: str = ""  #: more markdown for the end (the planner's section)
    #: the plain measured tables (socketlab.report.tables), written beside as measured.md
    measured_markdown: str = ""

    def rows_of(self, table: Table) -> list[Row]:
        return [r for r in self.rows if r.cell.table == table.id]


#: how the summary names each measured kind (the host's own measurements)
_MEASURED_WORDS = (
    (REPRODUCED, "reproduced"),
    (DEVIATES, "deviate"),
    (REPRODUCED_PER_CORE, "reproduced per core"),
    (DEVIATES_PER_CORE, "deviate per core"),
    (INCONCLUSIVE, "inconclusive"),
)


def _host_name(report: Report, host: str) -> str:
    topo = (report.hosts.get(host) or {}).get("topology") or {}
    if not topo:
        return host
    what = [f"{topo.get('cpu_model', '?')}, {topo.get('cores', '?')} cores"]
    for pub in report.published:
        if core_class(pub.host, topo).matches and topo.get("cores") != pub.host.get("cores"):
            what.append(f"the core class of {pub.host['model']}")
    return f"{host} ({'; '.join(dict.fromkeys(what))})"


def _headline(report: Report) -> list[str]:
    """What was measured on which host, apart from what was recomputed from published constants
    (the stage planner's arithmetic) and from what was not compared: never one pooled count."""
    counts = summary(report.rows)
    lines = [f"{len(report.rows)} published cells."]
    for host in sorted({r.host for r in report.rows if r.kind in MEASURED_KINDS}):
        by = summary(r for r in report.rows if r.host == host)
        parts = [f"{by[k]} {word}" for k, word in _MEASURED_WORDS if by[k]]
        lines.append(f"Measured on {_host_name(report, host)}: {', '.join(parts)}.")
    if counts[RECOMPUTED] or counts[RECOMPUTED_DIFFERS]:
        lines.append(
            "Recomputed from published constants (the stage planner's arithmetic, no "
            f"measurement): {counts[RECOMPUTED]} match, {counts[RECOMPUTED_DIFFERS]} "
            "differ."
        )
    rest = [f"{counts[DISPUTED]} disputed"] if counts[DISPUTED] else []
    rest += [f"{counts[NOT_COMPARABLE]} not comparable", f"{counts[NOT_RUN]} not run"]
    lines.append(", ".join(rest).capitalize() + ".")
    return lines


def _core_class_items(report: Report) -> list[tuple[str, str]]:
    """On what basis each host's cores match (or not) each published host's core class."""
    items = []
    for name, entry in sorted(report.hosts.items()):
        topo = entry.get("topology", entry) or {}
        if not topo:
            continue
        for pub in report.published:
            items.append((f"core class on {name}", core_class(pub.host, topo).detail))
    return items


def _host_lines(report: Report) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for name, entry in sorted(report.hosts.items()):
        topo = entry.get("topology", entry) or {}
        flags = set(topo.get("flags", ()))
        feats = (
            ", ".join(
                f
                for f in ("amx_bf16", "amx_tile", "avx512_bf16", "avx512f", "waitpkg", "cldemote")
                if f in flags
            )
            or "none of the AMX/AVX-512 flags"
        )
        iso = entry.get("isolation_applied")
        out.append(
            (
                name,
                (
                    f"{topo.get('cpu_model', '?')}; {topo.get('sockets', '?')} socket(s), "
                    f"{topo.get('nodes', '?')} NUMA node(s), {topo.get('cores', '?')} cores, "
                    f"{topo.get('threads_per_core', '?')} thread(s)/core; kernel "
                    f"{topo.get('kernel', '?')}; "
                    f"THP {topo.get('thp', '?')}; numa_balancing "
                    f"{topo.get('numa_balancing', '?')}; "
                    f"features: {feats}; isolation applied: {'yes' if iso else 'no'}"
                ),
            )
        )
    return out


def _provenance_items(report: Report) -> list[tuple[str, str]]:
    p = report.provenance
    items: list[tuple[str, str]] = []
    if p.get("spec"):
        items.append(("campaign file", f"{p['spec']} (sha256 {p.get('spec_sha256', '?')})"))
    elif p.get("spec_sha256"):
        items.append(("campaign file sha256", str(p["spec_sha256"])))
    if p.get("profile"):
        items.append(("profile", str(p["profile"])))
    for pub in report.published:
        items.append(("published values", f"{pub.path.name}: {pub.title}"))
    if p.get("store"):
        items.append(("results store", str(p["store"])))
    if p.get("runs"):
        items.append(("runs", ", ".join(f"{k} {v}" for k, v in sorted(p["runs"].items()))))
    for name, text in _host_lines(report):
        items.append((f"host {name}", text))
    items += _core_class_items(report)
    for host, iso in sorted((p.get("isolation") or {}).items()):
        items.append((f"isolation on {host}", str(iso)))
    for host, text in sorted((p.get("interference") or {}).items()):
        items.append((f"interference probe on {host}", text))
    for build in p.get("builds") or []:
        items.append(
            ("build", ", ".join(f"{k} {v}" for k, v in build.items() if v not in (None, "")))
        )
    if report.generated:
        items.append(("generated", report.generated))
    return list(dict.fromkeys(items))  # two published files of one host class: said once


# -- plots ------------------------------------------------------------------------------------


def _series_key(cond: dict[str, Any], series: Iterable[str]) -> str:
    return ", ".join(str(cond.get(k)) for k in series) or "published"


def _scale(rows: list[Row], xkey: str) -> str:
    """The run size every measured row of a series shares (threads=1), for its legend: a
    measured line from 1 worker beside a published 90-worker line must say so."""
    texts = {
        ", ".join(
            f"{k}={fmt(float(r.measured.dims[k]))}"
            for k in SCALE_DIMS
            if k != xkey and k in r.measured.dims and isinstance(r.measured.dims[k], int | float)
        )
        for r in rows
        if r.measured is not None
    }
    return texts.pop() if len(texts) == 1 else ""


def _x(value: Any, default: float) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def _per_core_view(rows: list[Row]) -> list[Row]:
    """The rows a per-core plot draws: per-core cells with a measured per-core figure."""
    return [
        r for r in rows if r.cell.per_core_reference is not None and r.per_core_measured is not None
    ]


def plot_table(table: Table, rows: list[Row], per_core: bool = False) -> bytes | None:
    """PNG of a table's plot spec: published points, measured medians (with min–max) on top.
    ``per_core``: the measuring host has the published core on fewer cores, so the table's
    per-core cells are drawn per core (published value or total / workers, and the measured
    per-core figure) instead of a 90-worker total against one core's."""
    if not table.plot:
        return None
    if per_core and _per_core_view(rows):
        rows = _per_core_view(rows)
    else:
        per_core = False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spec = table.plot
    column, xkey, series = spec["column"], spec["x"], spec.get("series", [])
    fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=110)
    groups: dict[str, list[Row]] = {}
    for r in rows:
        if r.cell.column == column:
            groups.setdefault(_series_key(r.cell.conditions, series), []).append(r)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (name, grp) in enumerate(sorted(groups.items())):
        color = colors[i % len(colors)]
        suffix = "" if name == "published" else f": {name}"
        pub = sorted(((float(r.cell.conditions[xkey]), r) for r in grp), key=lambda t: t[0])
        _draw_published(ax, pub, color, suffix, per_core)
        _draw_measured(ax, pub, xkey, color, suffix, per_core)
    _label_axes(ax, table, spec, column, xkey, per_core)
    _place_legend(fig, ax)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def _draw_published(
    ax: Any, pub: list[tuple[float, Row]], color: str, suffix: str, per_core: bool
) -> None:
    """One series' published points, with the published range as error bars."""
    xs = [x for x, _ in pub]
    if per_core:
        ys = [r.cell.per_core_reference for _, r in pub]
        lo = hi = [0.0] * len(pub)
    else:
        ys = [r.cell.reference for _, r in pub]
        lo = [r.cell.reference - r.cell.range[0] if r.cell.range else 0 for _, r in pub]
        hi = [r.cell.range[1] - r.cell.reference if r.cell.range else 0 for _, r in pub]
    ax.errorbar(
        xs,
        ys,
        yerr=[lo, hi],
        fmt="o-",
        color=color,
        label=f"published{' per core' if per_core else ''}{suffix}",
        capsize=3,
        markersize=5,
    )


def _draw_measured(
    ax: Any, pub: list[tuple[float, Row]], xkey: str, color: str, suffix: str, per_core: bool
) -> None:
    """One series' measured medians with min–max, if any were measured."""
    # measured at the x it really ran at when the run reports it (participants=2 on a
    # 2-core host), else at the published x
    meas = sorted(
        ((_x(r.measured.dims.get(xkey), x), r) for x, r in pub if r.measured is not None),
        key=lambda t: t[0],
    )
    if not meas:
        return
    mx = [x for x, _ in meas]
    ms = [r.per_core_measured if per_core else r.measured for _, r in meas]
    my = [m.median for m in ms]
    ylo = [m.median - m.minimum for m in ms]
    yhi = [m.maximum - m.median for m in ms]
    hosts = sorted({r.host or "" for _, r in meas})
    scale = _scale([r for _, r in meas], xkey)
    where = ", ".join(hosts) + (f", {scale}" if scale else "")
    ax.errorbar(
        mx,
        my,
        yerr=[ylo, yhi],
        fmt="s--",
        color=color,
        mfc="white",
        label=f"measured ({where}){suffix}",
        capsize=3,
        markersize=6,
    )


def _label_axes(
    ax: Any, table: Table, spec: dict[str, Any], column: str, xkey: str, per_core: bool
) -> None:
    """Scales, axis labels, title and grid from the plot spec."""
    if spec.get("xscale") == "log":
        ax.set_xscale("log")
    if spec.get("yscale") == "log":
        ax.set_yscale("log")
    unit = next((c.unit for c in table.columns if c.key == column), "")
    ax.set_xlabel(spec.get("xlabel", xkey))
    if per_core:
        ax.set_ylabel(f"{unit} per core")
        ax.set_title(
            spec.get("title", table.title) + ", per core (the per-core cells)", fontsize=10
        )
    else:
        ax.set_ylabel(spec.get("ylabel", f"{column} [{unit}]"))
        ax.set_title(spec.get("title", table.title), fontsize=10)
    ax.grid(True, which="both", alpha=0.3)


def _place_legend(fig: Any, ax: Any) -> None:
    entries = len(ax.get_legend_handles_labels()[1])
    if entries > 6:  # a legend this long would hide the lines: put it under the axes
        rows_below = -(-entries // 2)
        fig.set_size_inches(7.5, 4.2 + 0.17 * rows_below)
        ax.legend(
            fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False
        )
    else:
        ax.legend(fontsize=7, loc="best")


# -- HTML -------------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;max-width:1340px}
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}
details{margin:8px 0}details>summary{cursor:pointer;font-size:14px}span.counts{font-size:12px;color:#555;margin-left:8px}
table{border-collapse:collapse;font-size:12px;margin:6px 0 12px}
td,th{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr.reproduced td.v{background:#dff3df}tr.deviates td.v{background:#fbe0d0}
tr.reproduced-per-core td.v{background:#e6f5e0}tr.deviates-per-core td.v{background:#fbe9dc}
tr.inconclusive td.v{background:#fdf6e3}tr.recomputed-matches td.v,tr.recomputed-differs td.v{background:#eef3f8}
tr.published-figure-disputed td.v{background:#fff4c2}
details.group{margin:2px 0 2px 12px;font-size:12px}details.group>summary{font-size:12px;color:#444}
details.group ul{margin:2px 0 6px;columns:2;font-size:11px;color:#555}
dl.prov{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;font-size:12px}
dl.prov dt{font-weight:600}dl.prov dd{margin:0}
.summary{font-size:14px;padding:8px;background:#fafafa;border:1px solid #eee}
.note{font-size:12px;color:#555}img.plot{border:1px solid #ddd;margin:4px;width:100%}
.plots{display:grid;grid-template-columns:1fr 1fr;gap:6px;max-width:1340px}
"""  # noqa: E501 (CSS rules of a line kept together)


MEASURED_FILE = "measured.md"


def _context(report: Report) -> dict[str, Any]:
    return {
        "campaign": report.campaign,
        "headline": _headline(report),
        "provenance": _provenance_items(report),
        "files": file_views(report.published, report.rows),
        "extra": report.extra_markdown.strip(),
        "measured_file": MEASURED_FILE if report.measured_markdown else "",
    }


def render_markdown(report: Report) -> str:
    template = template_env("socketlab.report", html=False).get_template("report.md.j2")
    return template.render(_context(report))


def _per_core_hosts(report: Report) -> set[str]:
    """Hosts with a published core on fewer cores than the published socket."""
    out = set()
    for name, entry in report.hosts.items():
        topo = (entry or {}).get("topology") or {}
        if topo and any(
            core_class(p.host, topo).matches and topo.get("cores") != p.host["cores"]
            for p in report.published
        ):
            out.add(name)
    return out


def render_html(report: Report) -> str:
    plots = []
    small = _per_core_hosts(report)
    for pub in report.published:
        for table in pub.tables:
            rows = report.rows_of(table)
            png = plot_table(table, rows, per_core=any(r.host in small for r in rows))
            if png:
                plots.append(
                    (table.id, table.plot.get("title", table.title), base64.b64encode(png).decode())
                )
    return (
        template_env("socketlab.report", html=True)
        .get_template("report.html.j2")
        .render({**_context(report), "plots": plots, "css": _CSS})
    )


def render(report: Report, fmt_name: str = "md") -> str:
    if fmt_name == "html":
        return render_html(report)
    return render_markdown(report)


__all__ = [
    "MEASURED_FILE",
    "Report",
    "fmt",
    "plot_table",
    "render",
    "render_html",
    "render_markdown",
]
