"""The columns of the results frames: name, pandas dtype, unit, meaning. One table, read by the
frames (socketlab.results.frames), `orchestrate export` and docs/results.md (a test holds the
page to it).

Columns named after a run's parameters or a metric's dimensions vary by campaign: their dtype is
taken from their values (``infer``), the rule written down in docs/results.md.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pandas as pd

#: bumped when a column is renamed, removed or changes type (adding one keeps the version)
SCHEMA_VERSION = 1

#: dtypes, as pandas names them (``frame.dtypes``)
TEXT, CATEGORY, INT, FLOAT, BOOL = "string", "category", "Int64", "float64", "boolean"
TIME = "datetime64[ns, UTC]"


@dataclass(frozen=True)
class Column:
    name: str
    dtype: str
    unit: str  #: "" when the column has none (the ``unit`` column gives the metric's)
    meaning: str


RUNS = (
    Column(
        "run_key",
        TEXT,
        "",
        "sha256 of the experiment, parameters, repetition, build and host"
        " profile: one row per key however often the campaign resumed",
    ),
    Column("campaign", CATEGORY, "", "the spec's `campaign`"),
    Column("experiment", CATEGORY, "", "the experiment's name in the spec"),
    Column("host", CATEGORY, "", "inventory name of the host that ran it"),
    Column("repetition", INT, "", "0, 1, ...; warm-up runs are -N..-1"),
    Column("status", CATEGORY, "", "ok, failed, timeout, invalid, interrupted, unavailable"),
    Column("reason", TEXT, "", "why it is not ok, one line ('' when ok)"),
    Column("exit_code", INT, "", "the command's exit code (<NA> when it never ran)"),
    Column("started", TIME, "", "when the run started"),
    Column("finished", TIME, "", "when it ended"),
    Column("duration_s", FLOAT, "s", "finished - started, as the runner measured it"),
    Column("cpus", TEXT, "", "kernel CPU list the run was pinned to (<NA>: unpinned)"),
    Column("n_cpus", INT, "", "how many CPUs that list holds"),
    Column("build_name", CATEGORY, "", "the spec's build the command ran from (<NA>: none)"),
    Column("build_hash", TEXT, "", "hash of the build's sources, target, flags and compiler"),
    Column("build_flags", TEXT, "", "the CFLAGS make really used"),
    Column("compiler", TEXT, "", "first line of the compiler's --version"),
    Column(
        "host_kernel", TEXT, "", "the host's fingerprint before the run: kernel release and version"
    ),
    Column("host_smt", TEXT, "", "fingerprint: SMT control (on, off, notsupported)"),
    Column("host_thp", TEXT, "", "fingerprint: transparent huge pages mode"),
    Column("host_governor", TEXT, "", "fingerprint: cpufreq governor ('unsupported' in a guest)"),
    Column("host_isolated", TEXT, "", "fingerprint: isolated CPUs"),
    Column(
        "drift", TEXT, "", "knobs that changed during the run ('' when none; such a run is invalid)"
    ),
    Column("spec_sha256", TEXT, "", "sha256 of the spec file as run (results/<c>/specs/)"),
    Column("attempts", INT, "", "how many times this run key was run"),
    Column("raw_dir", TEXT, "", "the run's raw files: stdout, stderr, collectors, facts"),
)
METRICS = (
    Column("run_key", TEXT, "", "the run it was measured in (join with runs)"),
    Column("metric", CATEGORY, "", "metric name, without unit"),
    Column("value", FLOAT, "unit", "the value, in the row's unit"),
    Column("unit", CATEGORY, "", "unit of value (socketlab.units)"),
    Column(
        "parser",
        CATEGORY,
        "",
        "what read it, with version: jsonl/1, regex/1, "
        "collector:<name>/1, serving/1, guidellm/1, vllm/1",
    ),
)
REQUESTS = (
    Column("run_key", TEXT, "", "the serving run"),
    Column("level", CATEGORY, "", "load level: c<concurrency> or r<rate>"),
    Column("idx", INT, "", "order of dispatch within the level (warm-up first)"),
    Column("phase", CATEGORY, "", "warmup, measured, or cooldown (an import's tool dropped it)"),
    Column("status", CATEGORY, "", "ok, error, incomplete"),
    Column("error", TEXT, "", "the error, when not ok"),
    Column("prompt_id", TEXT, "", "which prompt"),
    Column("n_in", INT, "tokens", "prompt tokens"),
    Column("n_out", INT, "tokens", "output tokens"),
    Column("t_sched_ns", INT, "ns", "intended dispatch, from the load generator's origin"),
    Column("t_send_ns", INT, "ns", "request written"),
    Column("t_first_ns", INT, "ns", "first output token"),
    Column("t_end_ns", INT, "ns", "last output token"),
    Column("t_done_ns", INT, "ns", "end of stream"),
    Column("n_events", INT, "", "output-bearing stream events"),
    Column("ttft_ms", FLOAT, "ms", "first output token - send (socketlab.serve.metrics)"),
    Column("tpot_ms", FLOAT, "ms", "(last - first token) / (n_out - 1), when n_out >= 2"),
    Column("e2el_ms", FLOAT, "ms", "last output token - send"),
)
VERDICTS = (
    Column("campaign", CATEGORY, "", "the campaign judged"),
    Column("published_file", CATEGORY, "", "experiments/published/<file> the cell is from"),
    Column("table", CATEGORY, "", "published table id"),
    Column("row", TEXT, "", "published row id"),
    Column("column", TEXT, "", "published column id"),
    Column("cell", TEXT, "", "table/row/column"),
    Column("label", TEXT, "", "the row's label as published"),
    Column("experiment", CATEGORY, "", "campaign experiment that measures it (<NA>: none)"),
    Column("metric", CATEGORY, "", "measured metric name"),
    Column("host", CATEGORY, "", "host judged (<NA>: no host measured it)"),
    Column("unit", CATEGORY, "", "unit of published and measured"),
    Column("better", CATEGORY, "", "higher, lower or none"),
    Column("published", FLOAT, "unit", "the published value (middle of a published range)"),
    Column("published_low", FLOAT, "unit", "published range low (<NA>: a point value)"),
    Column("published_high", FLOAT, "unit", "published range high"),
    Column("measured", FLOAT, "unit", "median of the runs stored ok"),
    Column("measured_min", FLOAT, "unit", "their minimum"),
    Column("measured_max", FLOAT, "unit", "their maximum"),
    Column("n", INT, "", "how many values the median is of"),
    Column("interval_low", FLOAT, "unit", "interval of the median the verdict was drawn from"),
    Column("interval_high", FLOAT, "unit", "its high end"),
    Column("interval_level", FLOAT, "fraction", "the coverage of that interval"),
    Column("per_core_published", FLOAT, "unit", "per-core published figure (per-core cells)"),
    Column("per_core_measured", FLOAT, "unit", "per-core measured median"),
    Column("ratio", FLOAT, "ratio", "measured / published (per core where judged per core)"),
    Column("kind", CATEGORY, "", "the verdict's kind (socketlab.report.compare.KINDS)"),
    Column("verdict", TEXT, "", "the verdict as the report prints it"),
    Column("source", TEXT, "", "where the published value comes from"),
)
FRAMES = {"runs": RUNS, "metrics": METRICS, "requests": REQUESTS, "verdicts": VERDICTS}
#: prefix of a metric dimension's column; a parameter whose name is taken gets PARAM
DIM, PARAM = "dim.", "param."
#: names a parameter column may not take (it is then ``param.<name>``)
RESERVED = frozenset(c.name for c in RUNS + METRICS)


def typed(frame: pd.DataFrame, columns: Iterable[Column]) -> pd.DataFrame:
    """The frame's fixed columns cast to their dtypes (timestamps from unix seconds)."""
    for col in columns:
        if col.name not in frame:
            frame[col.name] = pd.Series(pd.NA, index=frame.index, dtype=object)
        if col.dtype == TIME:
            frame[col.name] = pd.to_datetime(pd.to_numeric(frame[col.name]), unit="s", utc=True)
        elif col.dtype == FLOAT:
            frame[col.name] = pd.to_numeric(frame[col.name]).astype(FLOAT)
        else:
            frame[col.name] = frame[col.name].astype(col.dtype)
    return frame


def infer(values: list[Any]) -> pd.Series:
    """A parameter's or dimension's values as one typed column: whole numbers Int64, numbers
    float64, booleans boolean, text category; values of mixed kinds (16K beside 1024) text,
    with lists and mappings as JSON. <NA> where a row has no such value."""
    present = [v for v in values if v is not None]
    kinds = {_kind(v) for v in present}
    if kinds == {"bool"}:
        return pd.Series(values, dtype=BOOL)
    if kinds == {"int"}:
        return pd.Series(values, dtype=INT)
    if kinds <= {"int", "float"} and kinds:
        return pd.Series([None if v is None else float(v) for v in values], dtype=FLOAT)
    if kinds == {"str"}:
        return pd.Series(values, dtype=CATEGORY)
    return pd.Series([None if v is None else _text(v) for v in values], dtype=TEXT)


def _kind(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    return "str" if isinstance(v, str) else "other"


def _text(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str)
