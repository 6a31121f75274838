"""Published reference values as data: load, validate and flatten into cells.

A published file (experiments/published/*.yaml) holds tables as they were published. Each row has
conditions and one value per column; each (row, column) is a *cell* with a value, unit,
better-direction, tolerance, conditions and source. The comparison (``compare.py``) joins cells to
measured medians by (experiment, metric, join conditions).

Validation is the JSON Schema ``schemas/published.schema.json`` (closed unit list, closed condition
keys, no unknown fields) plus the cross-field checks below (every cell has a source, join keys are
conditions of every row, values name declared columns, ids are unique). Errors are one line:
``FILE:LINE: tables[i] (id) rows[j] (id) field: message``.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from socketlab.errors import SpecError
from socketlab.paths import EXPERIMENTS, SCHEMAS
from socketlab.yamlload import field_path, line_of, load_document, read_text

SCHEMA_PATH = SCHEMAS / "published.schema.json"
PUBLISHED_DIR = EXPERIMENTS / "published"


@dataclass(frozen=True)
class Tolerance:
    rel: float | None = None
    abs: float | None = None

    def allows(self, published: float, measured: float) -> bool:
        diff = abs(measured - published)
        if self.abs is not None and diff <= self.abs:
            return True
        return self.rel is not None and diff <= self.rel * abs(published)

    def text(self) -> str:
        parts = []
        if self.rel is not None:
            parts.append(f"±{self.rel * 100:g}%")
        if self.abs is not None:
            parts.append(f"±{self.abs:g}")
        return " or ".join(parts)


#: tiers shared by the socket's cores: their cells are never per core, whatever the table says
SHARED_TIERS = frozenset({"L3", "DRAM", "L2+L3"})


@dataclass(frozen=True)
class PerCore:
    """How a cell is a per-core property: the published value is per core (``given``), or a
    total to divide by a condition (``derived``: value / workers)."""

    basis: str  #: given | derived
    divide_by: str | None = None  #: condition key of a derived value
    min_duration_s: float | None = None  #: per-core runs this long per rep are comparable
    flags: tuple[str, ...] = ()  #: ISA flags the core must have besides the cell's requires


@dataclass(frozen=True)
class Disputed:
    """Evidence against a published figure (shown instead of a deviates verdict)."""

    reason: str
    evidence: str
    correct: str


@dataclass(frozen=True)
class Cell:
    """One published number with everything needed to compare it."""

    table: str
    row: str
    column: str
    label: str  #: the row's label as published
    value: float | None  #: point value (None when only a range was published)
    range: tuple[float, float] | None
    samples: tuple[float, ...]
    unit: str
    better: str  #: higher | lower | none
    tolerance: Tolerance
    conditions: dict[str, Any]
    join: tuple[str, ...]  #: condition keys that must equal the run's parameters
    experiment: str | None  #: campaign experiment that measures it, None if unmeasured
    metric: str  #: measured metric name
    unmeasured: str | None  #: why nothing in the campaign measures it
    requires: tuple[str, ...]  #: CPU flags the measurement needs
    source: str
    note: str = ""
    divide_by: str | None = None  #: condition key dividing the measured value (e.g. batch)
    #: how repetitions are summarised: median | mean | min | max, or a chain's first | last |
    #: drift (socketlab.report.compare.CHAIN_STATISTICS)
    statistic: str = "median"
    per_core: PerCore | None = None  #: None: a socket-level cell
    needs: tuple[tuple[str, int], ...] = ()  #: what of the socket it needs (explicit part)
    disputed: Disputed | None = None
    #: why the cell is the same on every host (the planner's arithmetic): no host difference
    host_independent: str | None = None

    @property
    def id(self) -> str:
        return f"{self.table}/{self.row}/{self.column}"

    @property
    def reference(self) -> float:
        """The number to compare against: the value, or the middle of the published range."""
        if self.value is not None:
            return self.value
        if self.range is not None:
            return (self.range[0] + self.range[1]) / 2
        return statistics.median(self.samples)

    def join_params(self) -> dict[str, Any]:
        return {k: self.conditions[k] for k in self.join}

    @property
    def per_core_divisor(self) -> float:
        """What divides the published value to give its per-core figure (1 when given)."""
        pc = self.per_core
        if pc is None or pc.basis == "given":
            return 1.0
        return float(self.conditions[pc.divide_by or "workers"])

    @property
    def per_core_reference(self) -> float | None:
        """The published per-core figure: the value itself, or the total / workers."""
        if self.per_core is None:
            return None
        return self.reference / self.per_core_divisor

    @property
    def per_core_range(self) -> tuple[float, float] | None:
        if self.per_core is None or self.range is None:
            return None
        d = self.per_core_divisor
        return (self.range[0] / d, self.range[1] / d)


@dataclass(frozen=True)
class Column:
    key: str
    title: str
    unit: str
    better: str


@dataclass(frozen=True)
class Table:
    id: str
    title: str
    section: str
    note: str
    experiment: str | None
    unmeasured: str | None
    join: tuple[str, ...]
    columns: tuple[Column, ...]
    rows: tuple[tuple[str, str, dict[str, Any]], ...]  #: (row id, label, merged conditions)
    cells: tuple[Cell, ...]
    plot: dict[str, Any] | None = None

    def cell(self, row: str, column: str) -> Cell | None:
        for c in self.cells:
            if c.row == row and c.column == column:
                return c
        return None


@dataclass(frozen=True)
class Published:
    path: Path
    id: str
    title: str
    campaign: str | None
    host: dict[str, Any]
    tables: tuple[Table, ...] = field(default_factory=tuple)

    @property
    def cells(self) -> list[Cell]:
        return [c for t in self.tables for c in t.cells]

    def table(self, table_id: str) -> Table:
        for t in self.tables:
            if t.id == table_id:
                return t
        raise KeyError(table_id)


@cache
def _schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text())


def _where(doc: Any, path: list[Any]) -> str:
    """Human path: ``tables[2] (ladder) rows[4] (l2-1.5-thp) values.step_p50_us``."""
    parts: list[str] = []
    cur = doc
    for step in path:
        if isinstance(step, int):
            item = cur[step] if isinstance(cur, list) and step < len(cur) else None
            ident = item.get("id") if isinstance(item, dict) else None
            base = parts.pop() if parts else ""
            parts.append(f"{base}[{step}]" + (f" ({ident})" if ident else ""))
        elif parts and "[" not in parts[-1]:
            parts[-1] += f".{step}"
        else:
            parts.append(str(step))
        try:
            cur = cur[step]
        except (KeyError, IndexError, TypeError):
            cur = None
    return " ".join(parts) or "(top level)"


def _fail(path: Path, lines: dict[str, int], doc: Any, where: list[Any], msg: str) -> SpecError:
    return SpecError(f"{path}:{line_of(lines, field_path(where))}: {_where(doc, where)}: {msg}")


def _most_specific(errors: list[jsonschema.ValidationError]) -> jsonschema.ValidationError:
    """The deepest error, descending into oneOf/anyOf branches that are not plain type misses."""
    err = max(errors, key=lambda e: len(e.absolute_path))
    while err.validator in ("oneOf", "anyOf") and err.context:
        branch = [e for e in err.context if e.validator not in ("type", "anyOf", "oneOf")]
        if not branch or not isinstance(err.instance, dict):
            break
        err = max(branch, key=lambda e: len(e.absolute_path))
    return err


def _schema_message(err: jsonschema.ValidationError) -> tuple[list[Any], str]:
    """Turn a jsonschema error into (path, one-line message) a person can act on."""
    path = list(err.absolute_path)
    if err.validator == "additionalProperties":
        allowed = sorted(err.schema.get("properties", {}))
        extra = sorted(set(err.instance) - set(allowed)) if isinstance(err.instance, dict) else []
        key = extra[0] if extra else "?"
        what = "condition key" if path and path[-1] == "conditions" else "field"
        return path + [key], f"unknown {what} '{key}' (expected one of: {', '.join(allowed)})"
    if err.validator == "enum":
        opts = ", ".join(str(o) for o in err.validator_value)
        what = "unit" if "unit" in path[-1:] else "value"
        return path, f"unknown {what} {err.instance!r} (expected one of: {opts})"
    if err.validator == "required":
        missing = [r for r in err.validator_value if r not in (err.instance or {})]
        return path, f"missing required field '{missing[0] if missing else '?'}'"
    if "tolerance" in path:
        cut = path[: path.index("tolerance") + 1]
        return cut, (
            "tolerance must be a positive number (relative: 0.05 = 5%) or a mapping "
            "{rel: x, abs: y} of positive numbers"
        )
    if err.validator in ("oneOf", "anyOf") and isinstance(err.instance, dict):
        return path, "a value needs one of 'value', 'range' or 'samples' (numbers)"
    if err.validator in ("oneOf", "anyOf"):
        return path, f"expected a number or a mapping with 'value', got {err.instance!r}"
    return path, err.message


def load_published(path: str | Path) -> Published:
    """Load and validate one published-values file; raise SpecError with a one-line message."""
    path = Path(path)
    _, text = read_text(path, "published-values file")
    lines: dict[str, int] = {}
    doc, _ = load_document(path, text, syntax="not valid YAML", lines=lines)
    if not isinstance(doc, dict):
        raise SpecError(f"{path}: expected a mapping with format, id, title, host, tables")
    validator = jsonschema.Draft202012Validator(_schema())
    errors = list(validator.iter_errors(doc))
    if errors:
        where, msg = _schema_message(_most_specific(errors))
        raise _fail(path, lines, doc, where, msg)
    return _build(path, lines, doc)


def _tolerance(raw: Any, default: Tolerance) -> Tolerance:
    if raw is None:
        return default
    if isinstance(raw, int | float):
        return Tolerance(rel=float(raw))
    return Tolerance(rel=raw.get("rel"), abs=raw.get("abs"))


def _per_core(raw: Any) -> PerCore | None:
    if not raw:
        return None
    return PerCore(
        basis=raw["basis"],
        divide_by=raw.get("divide_by") or ("workers" if raw["basis"] == "derived" else None),
        min_duration_s=raw.get("min_duration_s"),
        flags=tuple(raw.get("flags", ())),
    )


def _first(key: str, *levels: dict[str, Any]) -> Any:
    """The most specific level's value of ``key`` (cell, row, column, table), None if unset."""
    for level in levels:
        if isinstance(level, dict) and key in level:
            return level[key]
    return None


def _build(path: Path, lines: dict[str, int], doc: dict[str, Any]) -> Published:
    seen_tables: set[str] = set()
    tables: list[Table] = []
    for ti, t in enumerate(doc["tables"]):
        tw = ["tables", ti]
        if t["id"] in seen_tables:
            raise _fail(path, lines, doc, tw + ["id"], f"duplicate table id '{t['id']}'")
        seen_tables.add(t["id"])
        tables.append(_table(path, lines, doc, tw, t))
    return Published(
        path=path,
        id=doc["id"],
        title=doc["title"],
        campaign=doc.get("campaign"),
        host=doc["host"],
        tables=tuple(tables),
    )


def _table(
    path: Path, lines: dict[str, int], doc: dict[str, Any], tw: list[Any], t: dict[str, Any]
) -> Table:
    """One table of the file, its rows' and cells' checks included."""
    join = tuple(t.get("join", ()))
    table_tol = _tolerance(t.get("tolerance"), Tolerance(rel=0.05))
    columns = tuple(
        Column(key=k, title=c.get("title", k), unit=c["unit"], better=c["better"])
        for k, c in t["columns"].items()
    )
    if not t.get("experiment") and not t.get("unmeasured"):
        unmeasured_cols = [
            k
            for k, c in t["columns"].items()
            if not c.get("experiment") and not c.get("unmeasured")
        ]
        if unmeasured_cols:
            raise _fail(
                path,
                lines,
                doc,
                tw,
                "needs 'experiment' (the campaign experiment "
                "that measures it) or 'unmeasured' (why nothing does)",
            )
    seen_rows: set[str] = set()
    rows: list[tuple[str, str, dict[str, Any]]] = []
    cells: list[Cell] = []
    for ri, r in enumerate(t["rows"]):
        rw = tw + ["rows", ri]
        if r["id"] in seen_rows:
            raise _fail(path, lines, doc, rw + ["id"], f"duplicate row id '{r['id']}'")
        seen_rows.add(r["id"])
        cond = _row_conditions(path, lines, doc, rw, t, r, join)
        rows.append((r["id"], r.get("label", r["id"]), cond))
        for col, raw in r["values"].items():
            cells.append(_cell(path, lines, doc, rw, t, r, cond, join, table_tol, col, raw))
    plot = t.get("plot")
    if plot:
        _check_plot(path, lines, doc, tw, t, plot, rows)
    return Table(
        id=t["id"],
        title=t["title"],
        section=t.get("section", ""),
        note=t.get("note", ""),
        experiment=t.get("experiment"),
        unmeasured=t.get("unmeasured"),
        join=join,
        columns=columns,
        rows=tuple(rows),
        cells=tuple(cells),
        plot=plot,
    )


def _row_conditions(
    path: Path,
    lines: dict[str, int],
    doc: dict[str, Any],
    rw: list[Any],
    t: dict[str, Any],
    r: dict[str, Any],
    join: tuple[str, ...],
) -> dict[str, Any]:
    """The row's conditions over the table's; every join key must have a value."""
    cond = {**t.get("conditions", {}), **r.get("conditions", {})}
    for key in join:
        if key not in cond:
            raise _fail(
                path,
                lines,
                doc,
                rw + ["conditions"],
                f"join key '{key}' has no value (set it in the row's or the table's conditions)",
            )
    return cond


def _not_positive(divisor: Any) -> bool:
    """True unless ``divisor`` is a positive int or float (bool excluded)."""
    return isinstance(divisor, bool) or not isinstance(divisor, int | float) or divisor <= 0


def _cell(
    path: Path,
    lines: dict[str, int],
    doc: dict[str, Any],
    rw: list[Any],
    t: dict[str, Any],
    r: dict[str, Any],
    cond: dict[str, Any],
    join: tuple[str, ...],
    table_tol: Tolerance,
    col: str,
    raw: Any,
) -> Cell:
    """One value of a row; cell settings override the row's, the column's, then the table's."""
    cw = rw + ["values", col]
    if col not in t["columns"]:
        raise _fail(
            path,
            lines,
            doc,
            cw,
            f"unknown column '{col}' (declared: {', '.join(t['columns'])})",
        )
    cdef = t["columns"][col]
    obj = raw if isinstance(raw, dict) else {"value": raw}
    source = obj.get("source") or r.get("source") or t.get("source")
    if not source:
        raise _fail(
            path,
            lines,
            doc,
            cw,
            "missing source (give 'source' on the "
            "cell, the row or the table: seed section or phase report)",
        )
    rng = obj.get("range")
    if rng is not None and rng[0] > rng[1]:
        raise _fail(path, lines, doc, cw + ["range"], "range must be [low, high]")
    per_core = _cell_per_core(path, lines, doc, rw, t, r, cdef, cond)
    disputed = obj.get("disputed") or r.get("disputed")
    cell = Cell(
        table=t["id"],
        row=r["id"],
        column=col,
        label=r.get("label", r["id"]),
        value=obj.get("value"),
        range=tuple(rng) if rng else None,
        samples=tuple(obj.get("samples", ())),
        unit=cdef["unit"],
        better=cdef["better"],
        tolerance=_tolerance(obj.get("tolerance"), _tolerance(cdef.get("tolerance"), table_tol)),
        conditions=cond,
        join=join,
        experiment=r.get("experiment") or cdef.get("experiment") or t.get("experiment"),
        metric=cdef.get("metric", col),
        unmeasured=r.get("unmeasured") or cdef.get("unmeasured") or t.get("unmeasured"),
        requires=tuple(r.get("requires", t.get("requires", ()))),
        source=source,
        note=obj.get("note", r.get("note", "")),
        divide_by=cdef.get("divide_by"),
        statistic=cdef.get("statistic", "median"),
        per_core=per_core,
        needs=tuple(sorted((_first("needs", r, t) or {}).items())),
        disputed=Disputed(**disputed) if disputed else None,
        host_independent=t.get("host_independent"),
    )
    _check_column_divisor(path, lines, doc, rw, cw, cdef, cond)
    return cell


def _cell_per_core(
    path: Path,
    lines: dict[str, int],
    doc: dict[str, Any],
    rw: list[Any],
    t: dict[str, Any],
    r: dict[str, Any],
    cdef: dict[str, Any],
    cond: dict[Any, Any],
) -> PerCore | None:
    """The cell's per-core setting (row, column, table); a derived one needs its divisor."""
    per_core = _per_core(_first("per_core", r, cdef, t))
    if per_core is not None and cond.get("tier") in SHARED_TIERS:
        per_core = None  # a shared tier's figure depends on the whole socket
    if per_core is not None and per_core.basis == "derived":
        divisor = cond.get(per_core.divide_by)
        if _not_positive(divisor):
            raise _fail(
                path,
                lines,
                doc,
                rw + ["conditions"],
                f"per_core is derived (value / '{per_core.divide_by}'), so "
                f"'{per_core.divide_by}' must be a positive number here, "
                f"got {divisor!r}",
            )
    return per_core


def _check_column_divisor(
    path: Path,
    lines: dict[str, int],
    doc: dict[str, Any],
    rw: list[Any],
    cw: list[Any],
    cdef: dict[str, Any],
    cond: dict[str, Any],
) -> None:
    """A column that divides by a condition needs it on the row, as a positive number."""
    if cdef.get("divide_by") and cdef["divide_by"] not in cond:
        raise _fail(
            path,
            lines,
            doc,
            cw,
            f"column divides by '{cdef['divide_by']}', which is not a condition of this row",
        )
    if cdef.get("divide_by"):
        divisor = cond[cdef["divide_by"]]
        if _not_positive(divisor):
            raise _fail(
                path,
                lines,
                doc,
                rw + ["conditions"],
                f"column divides by '{cdef['divide_by']}', so it must be a "
                f"positive number here, got {divisor!r}",
            )


def _check_plot(
    path: Path,
    lines: dict[str, int],
    doc: dict[str, Any],
    tw: list[Any],
    t: dict[str, Any],
    plot: dict[str, Any],
    rows: list[tuple[str, str, dict[str, Any]]],
) -> None:
    """The plotted column must exist and x and every series must be conditions of every row."""
    if plot["column"] not in t["columns"]:
        raise _fail(path, lines, doc, tw + ["plot", "column"], f"unknown column '{plot['column']}'")
    for key in [plot["x"], *plot.get("series", [])]:
        if not all(key in cond for _, _, cond in rows):
            raise _fail(path, lines, doc, tw + ["plot"], f"'{key}' is not a condition of every row")


def published_for_campaign(campaign: str, directory: Path = PUBLISHED_DIR) -> list[Published]:
    """Every published file in ``directory`` whose ``campaign`` is the given one."""
    if not directory.is_dir():
        return []
    out = []
    for p in sorted(directory.glob("*.yaml")):
        pub = load_published(p)
        if pub.campaign == campaign:
            out.append(pub)
    return out
