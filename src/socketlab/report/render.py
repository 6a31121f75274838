"""Render the published-vs-measured comparison: markdown, and a standalone HTML with PNG plots.

Input is a ``Report`` (what ``socketlab.report.build`` gathers from the store: comparison rows,
host facts, provenance). Plots are drawn with matplotlib's Agg backend and embedded as base64
PNGs, so the HTML file is one self-contained file a person can mail or open anywhere.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

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


@dataclass
class Report:
    campaign: str
    published: list[Published]
    rows: list[Row]  #: comparison rows of every published file, in file order
    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)  #: name -> facts entry
    provenance: dict[str, Any] = field(default_factory=dict)  #: spec, profile, builds, isolation
    generated: str = ""  #: UTC timestamp text
    extra_markdown: str = ""  #: plain measured tables (socketlab.report.tables), appended

    def rows_of(self, table: Table) -> list[Row]:
        return [r for r in self.rows if r.cell.table == table.id]


def _ratio(r: Row) -> str:
    return "—" if r.ratio is None else f"{r.ratio:.2f}x"


def _measured(r: Row) -> str:
    return r.measured.text() if r.measured else "—"


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


#: how the summary names each measured kind (the host's own measurements)
_MEASURED_WORDS = ((REPRODUCED, "reproduced"), (DEVIATES, "deviate"),
                   (REPRODUCED_PER_CORE, "reproduced per core"),
                   (DEVIATES_PER_CORE, "deviate per core"), (INCONCLUSIVE, "inconclusive"))


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
        lines.append("Recomputed from published constants (the stage planner's arithmetic, no "
                     f"measurement): {counts[RECOMPUTED]} match, {counts[RECOMPUTED_DIFFERS]} "
                     "differ.")
    rest = [f"{counts[DISPUTED]} disputed"] if counts[DISPUTED] else []
    rest += [f"{counts[NOT_COMPARABLE]} not comparable", f"{counts[NOT_RUN]} not run"]
    lines.append(", ".join(rest).capitalize() + ".")
    return lines


def _has_per_core(table: Table) -> bool:
    return any(c.per_core is not None for c in table.cells)


#: the per-core column's title: published per-core figure (how it was derived) -> measured
PER_CORE_TITLE = "per core: published → measured"


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


def _disputed_lines(rows: list[Row]) -> list[tuple[str, str, str, str]]:
    """(label, reason, evidence, correct figure) of each disputed cell, once per cell."""
    seen: dict[str, tuple[str, str, str, str]] = {}
    for r in rows:
        d = r.cell.disputed
        if d is not None and r.cell.id not in seen:
            seen[r.cell.id] = (f"{r.cell.label} ({r.published_text} {r.cell.unit})", d.reason,
                               d.evidence, d.correct)
    return list(seen.values())


def _host_lines(report: Report) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for name, entry in sorted(report.hosts.items()):
        topo = entry.get("topology", entry) or {}
        flags = set(topo.get("flags", ()))
        feats = ", ".join(f for f in ("amx_bf16", "amx_tile", "avx512_bf16", "avx512f", "waitpkg",
                                      "cldemote") if f in flags) or "none of the AMX/AVX-512 flags"
        iso = entry.get("isolation_applied")
        out.append((name, (
            f"{topo.get('cpu_model', '?')}; {topo.get('sockets', '?')} socket(s), "
            f"{topo.get('nodes', '?')} NUMA node(s), {topo.get('cores', '?')} cores, "
            f"{topo.get('threads_per_core', '?')} thread(s)/core; kernel {topo.get('kernel', '?')}; "
            f"THP {topo.get('thp', '?')}; numa_balancing {topo.get('numa_balancing', '?')}; "
            f"features: {feats}; isolation applied: {'yes' if iso else 'no'}"
        )))
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
    for build in p.get("builds") or []:
        items.append(("build", ", ".join(f"{k} {v}" for k, v in build.items()
                                         if v not in (None, ""))))
    if report.generated:
        items.append(("generated", report.generated))
    return items


# -- markdown ---------------------------------------------------------------------------------


def _md_table(table: Table, rows: list[Row]) -> list[str]:
    multi_col = len(table.columns) > 1
    multi_host = len({r.host for r in rows}) > 1
    head = ["row"] + (["column"] if multi_col else []) + (["host"] if multi_host else [])
    head += ["published", "measured median (min–max, n)"]
    per_core = _has_per_core(table)
    head += ([PER_CORE_TITLE] if per_core else []) + ["ratio", "verdict"]
    titles = {c.key: f"{c.title} [{c.unit}]" for c in table.columns}
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r.cell.label]
        if multi_col:
            cells.append(titles[r.cell.column])
        if multi_host:
            cells.append(r.host or "—")
        cells += [r.published_text, _measured(r)] + ([r.per_core_text] if per_core else [])
        cells += [_ratio(r), r.verdict]
        lines.append("| " + " | ".join(_md_escape(c) for c in cells) + " |")
    return lines


def render_markdown(report: Report) -> str:
    out = [f"# {report.campaign}: published vs measured", ""]
    out += [f"- {line}" for line in _headline(report)] + [""]
    out += ["## Provenance", ""]
    out += [f"- **{k}**: {_md_escape(v)}" for k, v in _provenance_items(report)]
    for pub in report.published:
        out += ["", f"## {pub.title}", "",
                f"Published host: {pub.host['model']} ({pub.host['cores']} cores"
                + (f", {pub.host['instance']}" if pub.host.get("instance") else "") + ")."]
        for table in pub.tables:
            unit = table.columns[0].unit if len(table.columns) == 1 else ""
            out += ["", f"### {table.title}" + (f" [{unit}]" if unit else ""), ""]
            if table.section:
                out.append(f"Section {table.section}. " + (table.note or ""))
                out.append("")
            out += _md_table(table, report.rows_of(table))
        disputed = _disputed_lines([r for r in report.rows if r.cell.table in
                                    {t.id for t in pub.tables}])
        if disputed:
            out += ["", "### Disputed published figures", ""]
            for label, reason, evidence, correct in disputed:
                out += [f"- **{_md_escape(label)}**: {_md_escape(reason)}.",
                        f"  Evidence: {_md_escape(evidence)}",
                        f"  A correct figure: {_md_escape(correct)}."]
    if report.extra_markdown:
        out += ["", "## Measured tables", "", report.extra_markdown.strip()]
    return "\n".join(out) + "\n"


# -- plots ------------------------------------------------------------------------------------


def _series_key(cond: dict[str, Any], series: Iterable[str]) -> str:
    return ", ".join(str(cond.get(k)) for k in series) or "published"


def _scale(rows: list[Row], xkey: str) -> str:
    """The run size every measured row of a series shares (threads=1), for its legend: a
    measured line from 1 worker beside a published 90-worker line must say so."""
    texts = {", ".join(f"{k}={fmt(float(r.measured.dims[k]))}" for k in SCALE_DIMS
                       if k != xkey and k in r.measured.dims
                       and isinstance(r.measured.dims[k], int | float))
             for r in rows if r.measured is not None}
    return texts.pop() if len(texts) == 1 else ""


def _x(value: Any, default: float) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def plot_table(table: Table, rows: list[Row]) -> bytes | None:
    """PNG of a table's plot spec: published points, measured medians (with min–max) on top."""
    if not table.plot:
        return None
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
        pub = sorted(((float(r.cell.conditions[xkey]), r) for r in grp), key=lambda t: t[0])
        xs = [x for x, _ in pub]
        ys = [r.cell.reference for _, r in pub]
        lo = [r.cell.reference - r.cell.range[0] if r.cell.range else 0 for _, r in pub]
        hi = [r.cell.range[1] - r.cell.reference if r.cell.range else 0 for _, r in pub]
        suffix = "" if name == "published" else f": {name}"
        ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o-", color=color, label=f"published{suffix}",
                    capsize=3, markersize=5)
        # measured at the x it really ran at when the run reports it (participants=2 on a
        # 2-core host), else at the published x
        meas = sorted(((_x(r.measured.dims.get(xkey), x), r) for x, r in pub
                       if r.measured is not None), key=lambda t: t[0])
        if meas:
            mx = [x for x, _ in meas]
            my = [r.measured.median for _, r in meas]
            ylo = [r.measured.median - r.measured.minimum for _, r in meas]
            yhi = [r.measured.maximum - r.measured.median for _, r in meas]
            hosts = sorted({r.host or "" for _, r in meas})
            scale = _scale([r for _, r in meas], xkey)
            where = ", ".join(hosts) + (f", {scale}" if scale else "")
            ax.errorbar(mx, my, yerr=[ylo, yhi], fmt="s--", color=color, mfc="white",
                        label=f"measured ({where}){suffix}", capsize=3, markersize=6)
    if spec.get("xscale") == "log":
        ax.set_xscale("log")
    if spec.get("yscale") == "log":
        ax.set_yscale("log")
    unit = next((c.unit for c in table.columns if c.key == column), "")
    ax.set_xlabel(spec.get("xlabel", xkey))
    ax.set_ylabel(spec.get("ylabel", f"{column} [{unit}]"))
    ax.set_title(spec.get("title", table.title), fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    entries = len(ax.get_legend_handles_labels()[1])
    if entries > 6:  # a legend this long would hide the lines: put it under the axes
        rows_below = -(-entries // 2)
        fig.set_size_inches(7.5, 4.2 + 0.17 * rows_below)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2,
                  frameon=False)
    else:
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


# -- HTML -------------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;max-width:1340px}
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}h3{font-size:15px;margin-top:22px}
table{border-collapse:collapse;font-size:12px;margin:6px 0 12px}
td,th{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr.reproduced td.v{background:#dff3df}tr.deviates td.v{background:#fbe0d0}
tr.not-comparable td.v{background:#eef}tr.reproduced-per-core td.v{background:#e6f5e0}
tr.deviates-per-core td.v{background:#fbe9dc}tr.published-figure-disputed td.v{background:#fff4c2}tr.not-run td.v{background:#f4f4f4;color:#666}
dl.prov{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;font-size:12px}
dl.prov dt{font-weight:600}dl.prov dd{margin:0}
.summary{font-size:14px;padding:8px;background:#fafafa;border:1px solid #eee}
.note{font-size:12px;color:#555}img.plot{border:1px solid #ddd;margin:4px;width:100%}
.plots{display:grid;grid-template-columns:1fr 1fr;gap:6px;max-width:1340px}
"""


def _h(text: Any) -> str:
    return html.escape(str(text))


def _html_table(table: Table, rows: list[Row]) -> str:
    multi_col = len(table.columns) > 1
    multi_host = len({r.host for r in rows}) > 1
    titles = {c.key: f"{c.title} [{c.unit}]" for c in table.columns}
    head = ["row"] + (["column"] if multi_col else []) + (["host"] if multi_host else [])
    head += ["published", "measured median (min–max, n)"]
    per_core = _has_per_core(table)
    head += ([PER_CORE_TITLE] if per_core else []) + ["ratio", "verdict"]
    out = ["<table><tr>" + "".join(f"<th>{_h(h)}</th>" for h in head) + "</tr>"]
    for r in rows:
        cls = r.kind.replace(" ", "-")
        tds = [f"<td>{_h(r.cell.label)}</td>"]
        if multi_col:
            tds.append(f"<td>{_h(titles[r.cell.column])}</td>")
        if multi_host:
            tds.append(f"<td>{_h(r.host or '—')}</td>")
        tds += [f'<td class="num" title="{_h(r.cell.source)}">{_h(r.published_text)}</td>',
                f'<td class="num">{_h(_measured(r))}</td>']
        if per_core:
            tds.append(f'<td class="num">{_h(r.per_core_text)}</td>')
        tds += [f'<td class="num">{_h(_ratio(r))}</td>', f'<td class="v">{_h(r.verdict)}</td>']
        out.append(f'<tr class="{cls}">' + "".join(tds) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def render_html(report: Report) -> str:
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>{_h(report.campaign)}: published vs measured</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{_h(report.campaign)}: published vs measured</h1>",
        "<p class='summary'>" + "<br>".join(_h(x) for x in _headline(report)) + "</p>",
        "<h2>Provenance</h2><dl class='prov'>",
    ]
    parts += [f"<dt>{_h(k)}</dt><dd>{_h(v)}</dd>" for k, v in _provenance_items(report)]
    parts.append("</dl>")
    plots = []
    for pub in report.published:
        for table in pub.tables:
            png = plot_table(table, report.rows_of(table))
            if png:
                data = base64.b64encode(png).decode()
                plots.append(f"<a href='#{_h(table.id)}'><img class='plot' alt='"
                             f"{_h(table.plot.get('title', table.title))}' "
                             f"src='data:image/png;base64,{data}'></a>")
    if plots:
        parts.append("<h2>Plots</h2><p class='note'>Published points (filled) and measured "
                     "medians with min–max (hollow, dashed). Click a plot for its table.</p>")
        parts.append("<div class='plots'>" + "".join(plots) + "</div>")
    for pub in report.published:
        parts.append(f"<h2>{_h(pub.title)}</h2>")
        parts.append(f"<p class='note'>Published host: {_h(pub.host['model'])} "
                     f"({_h(pub.host['cores'])} cores). Hover a published value for its source.</p>")
        for table in pub.tables:
            rows = report.rows_of(table)
            parts.append(f"<h3 id='{_h(table.id)}'>{_h(table.title)}</h3>")
            if table.note or table.section:
                parts.append(f"<p class='note'>Section {_h(table.section)}. {_h(table.note)}</p>")
            parts.append(_html_table(table, rows))
        disputed = _disputed_lines([r for r in report.rows if r.cell.table in
                                    {t.id for t in pub.tables}])
        if disputed:
            parts.append("<h3>Disputed published figures</h3><ul>")
            parts += [f"<li><b>{_h(label)}</b>: {_h(reason)}.<br>Evidence: {_h(evidence)}"
                      f"<br>A correct figure: {_h(correct)}.</li>"
                      for label, reason, evidence, correct in disputed]
            parts.append("</ul>")
    if report.extra_markdown:
        parts.append("<h2>Measured tables</h2><pre>" + _h(report.extra_markdown) + "</pre>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def render(report: Report, fmt_name: str = "md") -> str:
    if fmt_name == "html":
        return render_html(report)
    return render_markdown(report)


__all__ = ["Report", "fmt", "plot_table", "render", "render_html", "render_markdown"]
