"""What the report shows, arranged for the templates (templates/report.{md,html}.j2). Pure.

Every published cell appears exactly once: a cell that was judged (reproduced, deviates,
inconclusive, recomputed, disputed) as a table row with its numbers; a cell that was not run or
is not comparable in one line per reason, with the count and the cells, so a reason shared by
200 cells is written once, not 200 times. Each published file and each table opens with its
counts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from socketlab.report.compare import (
    DEVIATES,
    DEVIATES_PER_CORE,
    DISPUTED,
    INCONCLUSIVE,
    KINDS,
    NOT_COMPARABLE,
    NOT_RUN,
    RECOMPUTED,
    RECOMPUTED_DIFFERS,
    REPRODUCED,
    REPRODUCED_PER_CORE,
    Row,
)
from socketlab.report.published import Published, Table

#: the per-core column's title: published per-core figure (how it was derived) -> measured
PER_CORE_TITLE = "per core: published → measured"
#: how counts name each kind, in KINDS order
WORDS = {
    REPRODUCED: "reproduced",
    DEVIATES: "deviate",
    REPRODUCED_PER_CORE: "reproduced per core",
    DEVIATES_PER_CORE: "deviate per core",
    INCONCLUSIVE: "inconclusive",
    RECOMPUTED: "recomputed and matching",
    RECOMPUTED_DIFFERS: "recomputed and differing",
    DISPUTED: "disputed",
    NOT_COMPARABLE: "not comparable",
    NOT_RUN: "not run",
}
#: kinds listed by reason instead of row by row
GROUPED = (NOT_COMPARABLE, NOT_RUN)
#: a table with more rows than this is collapsed in the HTML (its counts stay visible)
LONG_TABLE = 12


def counts_text(rows: Iterable[Row]) -> str:
    """'12 cells: 3 reproduced per core, 2 inconclusive, 7 not run'."""
    rows = list(rows)
    counts = Counter(r.kind for r in rows)
    parts = [f"{counts[k]} {WORDS[k]}" for k in KINDS if counts[k]]
    return f"{len(rows)} cell{'s' if len(rows) != 1 else ''}: " + ", ".join(parts)


def css_class(kind: str) -> str:
    return kind.replace(" ", "-")


@dataclass
class Group:
    kind: str
    reason: str  #: the verdict after "not run: " / "not comparable: "
    cells: list[str]  #: 'label [column] (host): measured'

    @property
    def text(self) -> str:
        return f"{self.kind}: {self.reason}"


@dataclass
class TableView:
    table: Table
    counts: str
    head: list[str]
    rows: list[tuple[str, list[str], str]]  #: (css class, cells, source) of the judged cells
    groups: list[Group]
    numeric: set[int] = field(default_factory=set)  #: column indexes that hold numbers
    published_at: int = 0  #: the published column's index (its cells carry the source)

    @property
    def long(self) -> bool:
        return len(self.rows) > LONG_TABLE


@dataclass
class FileView:
    published: Published
    counts: str
    tables: list[TableView]
    disputed: list[tuple[str, str, str, str]]  #: label, reason, evidence, correct figure


def _ratio(r: Row) -> str:
    return "—" if r.ratio is None else f"{r.ratio:.2f}x"


def _item(r: Row, titles: dict[str, str], multi_col: bool, multi_host: bool) -> str:
    text = r.cell.label + (f" [{titles[r.cell.column]}]" if multi_col else "")
    text += f" ({r.host})" if multi_host and r.host else ""
    if r.measured is not None:
        text += f": {r.measured.text()}"
    return text


def table_view(table: Table, rows: list[Row]) -> TableView:
    multi_col = len(table.columns) > 1
    multi_host = len({r.host for r in rows}) > 1
    titles = {c.key: f"{c.title} [{c.unit}]" for c in table.columns}
    per_core = any(c.per_core is not None for c in table.cells)
    head = ["row"] + (["column"] if multi_col else []) + (["host"] if multi_host else [])
    head += ["published", "measured median (min–max, n)"]
    head += ([PER_CORE_TITLE] if per_core else []) + ["ratio", "verdict"]
    first_num = head.index("published")
    numeric = set(range(first_num, len(head) - 1))
    judged: list[tuple[str, list[str], str]] = []
    groups: dict[tuple[str, str], Group] = {}
    for r in rows:
        if r.kind in GROUPED:
            reason = r.verdict.split(": ", 1)[1] if ": " in r.verdict else r.verdict
            group = groups.setdefault((r.kind, reason), Group(r.kind, reason, []))
            group.cells.append(_item(r, titles, multi_col, multi_host))
            continue
        cells = [r.cell.label]
        if multi_col:
            cells.append(titles[r.cell.column])
        if multi_host:
            cells.append(r.host or "—")
        cells += [r.published_text, r.measured.text() if r.measured else "—"]
        cells += ([r.per_core_text] if per_core else []) + [_ratio(r), r.verdict]
        judged.append((css_class(r.kind), cells, r.cell.source))
    order = {k: i for i, k in enumerate(KINDS)}
    ordered = sorted(groups.values(), key=lambda g: (order[g.kind], -len(g.cells)))
    return TableView(table, counts_text(rows), head, judged, ordered, numeric, first_num)


def disputed_lines(rows: list[Row]) -> list[tuple[str, str, str, str]]:
    """(label, reason, evidence, correct figure) of each disputed cell, once per cell."""
    seen: dict[str, tuple[str, str, str, str]] = {}
    for r in rows:
        d = r.cell.disputed
        if d is not None and r.cell.id not in seen:
            seen[r.cell.id] = (
                f"{r.cell.label} ({r.published_text} {r.cell.unit})",
                d.reason,
                d.evidence,
                d.correct,
            )
    return list(seen.values())


def file_views(published: list[Published], rows: list[Row]) -> list[FileView]:
    by_table: dict[str, list[Row]] = {}
    for r in rows:
        by_table.setdefault(r.cell.table, []).append(r)
    out = []
    for pub in published:
        mine = [r for t in pub.tables for r in by_table.get(t.id, [])]
        tables = [table_view(t, by_table.get(t.id, [])) for t in pub.tables]
        out.append(FileView(pub, counts_text(mine), tables, disputed_lines(mine)))
    return out
