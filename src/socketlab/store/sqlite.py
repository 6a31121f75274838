"""The results store: SQLite in WAL mode, one file per campaign.

``results/<campaign>/store.sqlite`` holds one row per run (keyed by the run key, so a point is
stored once however often the campaign is resumed) and its metric rows. A run and its metrics
are written in one transaction: a killed orchestrator leaves either the whole run or nothing.
Raw files (stdout, stderr, collector output, facts) live next to it in
``results/<campaign>/runs/<run key>/``.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from socketlab import paths
from socketlab.errors import StoreError
from socketlab.safepath import inside
from socketlab.store.status import RunStatus

#: 2: serve_requests (every serving request's timestamps) joined the store
SCHEMA_VERSION = 2

#: the statuses a run can end in (socketlab.store.status); the names below are the members
#: most callers test for
COMPLETE = RunStatus.OK
INTERRUPTED = RunStatus.INTERRUPTED
UNAVAILABLE = RunStatus.UNAVAILABLE
STATUSES = tuple(RunStatus)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_key TEXT PRIMARY KEY,
    campaign TEXT NOT NULL,
    experiment TEXT NOT NULL,
    host TEXT NOT NULL,
    repetition INTEGER NOT NULL,
    params TEXT NOT NULL,
    status TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    exit_code INTEGER,
    started REAL,
    finished REAL,
    duration_s REAL,
    argv TEXT NOT NULL DEFAULT '[]',
    cpus TEXT,
    build TEXT,
    host_profile TEXT NOT NULL DEFAULT '',
    fingerprint_before TEXT,
    fingerprint_after TEXT,
    spec_sha256 TEXT NOT NULL DEFAULT '',
    raw_dir TEXT NOT NULL DEFAULT '',
    attempts INTEGER NOT NULL DEFAULT 1,
    extra TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS runs_campaign ON runs (campaign, experiment);
CREATE TABLE IF NOT EXISTS metrics (
    run_key TEXT NOT NULL REFERENCES runs (run_key),
    name TEXT NOT NULL,
    value REAL NOT NULL,
    unit TEXT NOT NULL,
    dims TEXT NOT NULL DEFAULT '{}',
    parser TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS metrics_run ON metrics (run_key);
CREATE TABLE IF NOT EXISTS host_failures (
    campaign TEXT NOT NULL,
    host TEXT NOT NULL,
    stage TEXT NOT NULL,
    reason TEXT NOT NULL,
    first_failed REAL NOT NULL,
    last_failed REAL NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (campaign, host)
);
CREATE TABLE IF NOT EXISTS serve_requests (
    run_key TEXT NOT NULL,
    level TEXT NOT NULL,
    idx INTEGER NOT NULL,
    phase TEXT NOT NULL,
    status TEXT NOT NULL,
    error TEXT,
    prompt_id TEXT,
    n_in INTEGER,
    n_out INTEGER,
    t_sched_ns INTEGER,
    t_send_ns INTEGER,
    t_first_ns INTEGER,
    t_end_ns INTEGER,
    t_done_ns INTEGER,
    events TEXT NOT NULL,
    record TEXT NOT NULL,
    PRIMARY KEY (run_key, level, idx)
);
"""
#: serve_requests' columns, as push and pull move them
REQUEST_COLUMNS = (
    "run_key",
    "level",
    "idx",
    "phase",
    "status",
    "error",
    "prompt_id",
    "n_in",
    "n_out",
    "t_sched_ns",
    "t_send_ns",
    "t_first_ns",
    "t_end_ns",
    "t_done_ns",
    "events",
    "record",
)


@dataclass
class HostFailure:
    """A host that could not be worked on at all, so no point of it exists to record failed.

    E.g. unreachable when facts were gathered: its points can't be expanded without its facts.
    Kept apart from ``runs`` (no run key, no point); cleared once the host is reached again.
    """

    campaign: str
    host: str
    stage: str  #: what was being done: "facts" (gathering host facts), "lock" (host busy)
    reason: str  #: one line
    first_failed: float
    last_failed: float
    attempts: int = 1  #: sessions in a row that could not reach it


@dataclass
class RunRecord:
    """One run as stored. JSON-able fields are stored as JSON text."""

    run_key: str
    campaign: str
    experiment: str
    host: str
    repetition: int
    params: dict[str, Any]
    status: str  #: a RunStatus
    reason: str = ""  #: why it is not ok, one line
    exit_code: int | None = None
    started: float | None = None  #: unix time
    finished: float | None = None
    duration_s: float | None = None
    argv: list[str] = field(default_factory=list)
    cpus: str | None = None
    build: dict[str, Any] | None = None  #: build manifest, stamped on every run
    host_profile: str = ""
    fingerprint_before: dict[str, Any] | None = None
    fingerprint_after: dict[str, Any] | None = None
    spec_sha256: str = ""
    raw_dir: str = ""
    attempts: int = 1
    extra: dict[str, Any] = field(default_factory=dict)


_JSON_FIELDS = ("params", "argv", "build", "fingerprint_before", "fingerprint_after", "extra")
_COLUMNS = tuple(RunRecord.__dataclass_fields__)


def store_path(campaign: str, results: Path | str | None = None) -> Path:
    return inside(Path(results or paths.RESULTS), campaign, "store.sqlite", what="campaign")


def existing_results_folder(results: Path | str | None = None) -> Path:
    """The results folder a reader was pointed at; StoreError when it is missing or a file, so
    a typo never reads as "nothing ran yet"."""
    root = Path(results or paths.RESULTS)
    if not root.is_dir():
        what = "is a file, not a folder" if root.exists() else "no such results folder"
        raise StoreError(
            f"{root}: {what} (expected the results folder `orchestrate run` wrote; --results DIR)"
        )
    return root


def existing_store_path(campaign: str, results: Path | str | None = None) -> Path:
    """The campaign's store file; StoreError (a user error) when the campaign never ran, or
    when the results folder is missing or a file (existing_results_folder)."""
    existing_results_folder(results)
    path = store_path(campaign, results)
    if not path.exists():
        raise StoreError(
            f"{path}: no results for campaign '{campaign}' (run `orchestrate run SPEC` first)"
        )
    return path


def check_results_folder(path: Path | str) -> Path:
    """``path`` (a results folder, or a folder to be made in one) is, or can become, a folder:
    StoreError naming the part that is a file instead (`--results` given a file)."""
    path = Path(path)
    for part in (path, *path.parents):
        if part.exists() or part.is_symlink():
            if not part.is_dir():
                raise StoreError(
                    f"{part}: is a file, not a folder (expected a results folder"
                    f"{'' if part == path else ' above ' + str(path)})"
                )
            break
    return path


def ok_runs_in_folder(results: Path | str, host: str) -> list[dict[str, Any]]:
    """``Store.ok_runs_of_host`` over every campaign's store in a results folder (read-only,
    in the order of the stores' folder names); ``campaign`` is the store's folder name."""
    out: list[dict[str, Any]] = []
    for path in sorted(Path(results).glob("*/store.sqlite")):
        with Store(path, create=False) as store:
            try:
                runs = store.ok_runs_of_host(host)
            except sqlite3.Error as exc:
                raise StoreError(f"{path}: can't read the store ({exc})") from None
        out += [{**run, "campaign": path.parent.name} for run in runs]
    return out


def _connect_read_only(path: Path) -> sqlite3.Connection:
    """Read-only; a WAL store on a read-only medium (no -shm can be made) is opened immutable."""
    from urllib.parse import quote

    uri = f"file:{quote(str(path.resolve()))}"
    last: Exception | None = None
    for mode in ("?mode=ro", "?mode=ro&immutable=1"):
        try:
            db = sqlite3.connect(
                uri + mode, uri=True, timeout=30, check_same_thread=False, isolation_level=None
            )
            db.execute("SELECT count(*) FROM runs").fetchone()
            return db
        except sqlite3.DatabaseError as exc:
            last = exc
    raise StoreError(f"{path}: not a usable results store ({last})") from None


class Store:
    """A campaign's store. Thread-safe: host threads share one connection behind a lock."""

    def __init__(self, path: str | Path, *, create: bool = True) -> None:
        """``create=False`` opens an existing store read-only (status, report, export): it
        then works on a read-only medium and can't change what it reads."""
        self.path = Path(path)
        if not create and not self.path.exists():
            raise StoreError(f"{self.path}: no results store here (run `orchestrate run` first)")
        self._lock = threading.Lock()
        if not create:
            self._db = _connect_read_only(self.path)
            return
        if str(path) != ":memory:":
            check_results_folder(self.path.parent)
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(
                    f"{self.path.parent}: cannot create the results folder: {exc.strerror or exc}"
                ) from None
        try:
            self._db = sqlite3.connect(
                self.path, timeout=30, check_same_thread=False, isolation_level=None
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
            self._db.execute(  # the tables above make any older store this version
                "INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
            )
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: not a usable results store ({exc})") from None

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing ---------------------------------------------------------------------------

    def add_run(
        self,
        record: RunRecord,
        metrics: Iterable[Any] = (),
        requests: Iterable[tuple[str, list]] = (),
    ) -> None:
        """Store a run, its metrics and its requests in one transaction, replacing an earlier
        attempt.

        ``metrics`` are socketlab.parse.Metric objects (name, value, unit, dims, parser);
        ``requests`` (load level, [socketlab.serve.records.RequestRecord]) replace the run's
        rows of each level given.
        """
        row = asdict(record)
        for key in _JSON_FIELDS:
            row[key] = json.dumps(row[key], sort_keys=True, default=str)
        metric_rows = [
            (
                record.run_key,
                m.name,
                float(m.value),
                m.unit,
                json.dumps(m.dims, sort_keys=True, default=str),
                m.parser,
            )
            for m in metrics
        ]
        levels = [
            (level, [_request_row(record.run_key, level, r) for r in records])
            for level, records in requests
        ]
        with self._lock:
            cur = self._db.cursor()
            try:
                cur.execute("BEGIN IMMEDIATE")
                old = cur.execute(
                    "SELECT attempts FROM runs WHERE run_key = ?", (record.run_key,)
                ).fetchone()
                if old:
                    row["attempts"] = old[0] + 1
                    cur.execute("DELETE FROM metrics WHERE run_key = ?", (record.run_key,))
                placeholders = ",".join("?" * len(_COLUMNS))
                cur.execute(
                    f"INSERT OR REPLACE INTO runs ({','.join(_COLUMNS)}) VALUES ({placeholders})",
                    [row[c] for c in _COLUMNS],
                )
                cur.executemany("INSERT INTO metrics VALUES (?,?,?,?,?,?)", metric_rows)
                self._put_requests(cur, record.run_key, levels)
                cur.execute("COMMIT")
            except sqlite3.OperationalError as exc:  # disk full, read-only, I/O error
                _rollback(cur)
                raise StoreError(
                    f"{self.path}: cannot store run {record.run_key[:12]}: {exc}"
                ) from None
            except BaseException:
                _rollback(cur)
                raise

    def add_requests(self, run_key: str, level: str, records: list) -> None:
        """Replace one load level's request rows of a run (an importer's)."""
        with self._lock, _writing(self.path, f"the requests of run {run_key[:12]}"):
            cur = self._db.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                rows = [_request_row(run_key, level, r) for r in records]
                self._put_requests(cur, run_key, [(level, rows)])
                cur.execute("COMMIT")
            except BaseException:
                _rollback(cur)
                raise

    @staticmethod
    def _put_requests(cur: sqlite3.Cursor, run_key: str, levels: list) -> None:
        for level, rows in levels:
            cur.execute(
                "DELETE FROM serve_requests WHERE run_key = ? AND level = ?", (run_key, level)
            )
            cur.executemany(f"INSERT INTO serve_requests VALUES ({','.join('?' * 16)})", rows)

    def request_rows(self, campaign: str | None = None, run_key: str | None = None) -> list:
        """serve_requests rows (dicts of REQUEST_COLUMNS) in dispatch order, of one campaign
        or one run; none from a store older than the table (opened read-only)."""
        if not self._query("SELECT name FROM sqlite_master WHERE name = 'serve_requests'"):
            return []
        sql = (
            "SELECT q.* FROM serve_requests q JOIN runs r USING (run_key) WHERE "
            + ("r.campaign = ?" if run_key is None else "q.run_key = ?")
            + " ORDER BY q.run_key, q.level, q.idx"
        )
        rows = self._query(sql, (campaign if run_key is None else run_key,))
        return [dict(r) for r in rows]

    def record_host_failure(self, campaign: str, host: str, stage: str, reason: str) -> None:
        """Note that ``host`` could not be worked on this session (replaces the last note)."""
        stamp = time.time()
        with self._lock, _writing(self.path, f"the note on host {host}"):
            self._db.execute(
                "INSERT INTO host_failures VALUES (?,?,?,?,?,?,1) "
                "ON CONFLICT (campaign, host) DO UPDATE SET stage = excluded.stage, "
                "reason = excluded.reason, last_failed = excluded.last_failed, "
                "attempts = attempts + 1",
                (campaign, host, stage, reason, stamp, stamp),
            )

    def clear_host_failure(self, campaign: str, host: str, stage: str | None = None) -> bool:
        """The host got past ``stage`` (any stage: worked on) again: drop its note.

        True when there was one.
        """
        sql = "DELETE FROM host_failures WHERE campaign = ? AND host = ?"
        args: tuple[str, ...] = (campaign, host)
        if stage is not None:
            sql, args = sql + " AND stage = ?", (*args, stage)
        with self._lock, _writing(self.path, f"the note on host {host}"):
            return self._db.execute(sql, args).rowcount > 0

    # -- reading ---------------------------------------------------------------------------

    def host_failures(self, campaign: str | None = None) -> list[HostFailure]:
        """Hosts that could not be worked on in their last session, oldest failure first."""
        sql, args = "SELECT * FROM host_failures", tuple[str, ...]()
        if campaign is not None:
            sql, args = sql + " WHERE campaign = ?", (campaign,)
        rows = self._query(sql + " ORDER BY first_failed, host", args)
        return [HostFailure(**dict(r)) for r in rows]

    def _query(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        with self._lock:
            self._db.row_factory = sqlite3.Row
            try:
                return self._db.execute(sql, args).fetchall()
            finally:
                self._db.row_factory = None

    def status_of(self, run_key: str) -> str | None:
        rows = self._query("SELECT status FROM runs WHERE run_key = ?", (run_key,))
        return rows[0]["status"] if rows else None

    def has_complete(self, run_key: str) -> bool:
        return self.status_of(run_key) == COMPLETE

    def statuses(self, campaign: str) -> dict[str, str]:
        """run key -> status, for every stored run of the campaign."""
        rows = self._query("SELECT run_key, status FROM runs WHERE campaign = ?", (campaign,))
        return {r["run_key"]: r["status"] for r in rows}

    def runs(self, campaign: str | None = None) -> list[RunRecord]:
        if campaign is None:
            rows = self._query("SELECT * FROM runs ORDER BY started")
        else:
            rows = self._query(
                "SELECT * FROM runs WHERE campaign = ? ORDER BY started", (campaign,)
            )
        records = []
        for r in rows:
            data = dict(r)
            for key in _JSON_FIELDS:
                data[key] = json.loads(data[key]) if data[key] is not None else None
            records.append(RunRecord(**data))
        return records

    def ok_runs_of_host(self, host: str) -> list[dict[str, Any]]:
        """Every run of ``host`` stored ok, with its metrics, in the order stored: run_key,
        campaign, experiment, repetition, params, argv, metrics [(name, value, dims)]."""
        runs: dict[str, dict[str, Any]] = {}
        rows = self._query(
            "SELECT r.run_key, r.campaign, r.experiment, r.repetition, r.params, r.argv, "
            "m.name, m.value, m.dims FROM runs r LEFT JOIN metrics m USING (run_key) "
            "WHERE r.host = ? AND r.status = ? ORDER BY r.rowid, m.rowid",
            (host, COMPLETE),
        )
        for r in rows:
            run = runs.get(r["run_key"])
            if run is None:
                run = runs[r["run_key"]] = {
                    "run_key": r["run_key"],
                    "campaign": r["campaign"],
                    "experiment": r["experiment"],
                    "repetition": r["repetition"],
                    "params": json.loads(r["params"]),
                    "argv": json.loads(r["argv"]),
                    "metrics": [],
                }
            if r["name"] is not None:
                run["metrics"].append((r["name"], r["value"], json.loads(r["dims"])))
        return list(runs.values())

    def metric_count(self, campaign: str | None = None) -> int:
        if campaign is None:
            return self._query("SELECT count(*) AS n FROM metrics")[0]["n"]
        return self._query(
            "SELECT count(*) AS n FROM metrics JOIN runs USING (run_key) WHERE campaign = ?",
            (campaign,),
        )[0]["n"]

    def metric_rows(self, campaign: str) -> list[dict[str, Any]]:
        """The campaign's metric rows as stored: run_key, name, value, unit, dims, parser.

        Raw rows (dims still JSON text) for exporting the store, e.g. `orchestrate push`.
        """
        rows = self._query(
            "SELECT m.run_key, m.name, m.value, m.unit, m.dims, m.parser FROM metrics m "
            "JOIN runs r USING (run_key) WHERE r.campaign = ? ORDER BY m.rowid",
            (campaign,),
        )
        return [dict(r) for r in rows]

    def set_meta(self, key: str, value: str) -> None:
        """One key of the meta table (e.g. an adaptive sweep's stop, socketlab.spec.adaptive)."""
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))
            if self._db.in_transaction:
                self._db.commit()

    def meta_items(self, prefix: str) -> dict[str, str]:
        rows = self._query(
            "SELECT key, value FROM meta WHERE substr(key, 1, ?) = ?", (len(prefix), prefix)
        )
        return {r["key"]: r["value"] for r in rows}

    def campaigns(self) -> list[str]:
        return [r["campaign"] for r in self._query("SELECT DISTINCT campaign FROM runs")]

    def metrics_frame(self, campaign: str, *, all_statuses: bool = True):
        """Metric rows joined with their runs as a pandas DataFrame.

        Columns: run_key, campaign, experiment, host, repetition, status, metric, value, unit,
        parser, one column per parameter name, and ``dim.<name>`` per metric dimension.
        """
        import pandas as pd

        sql = (
            "SELECT r.run_key, r.campaign, r.experiment, r.host, r.repetition, r.status, "
            "m.name AS metric, m.value, m.unit, m.parser, m.dims "
            "FROM metrics m JOIN runs r USING (run_key) WHERE r.campaign = ?"
        )
        args: tuple[str, ...] = (campaign,)
        if not all_statuses:
            sql, args = sql + " AND r.status = ?", (campaign, RunStatus.OK)
        base = [
            "run_key",
            "campaign",
            "experiment",
            "host",
            "repetition",
            "status",
            "metric",
            "value",
            "unit",
            "parser",
        ]
        with self._lock:
            frame = pd.read_sql_query(sql + " ORDER BY r.started, m.rowid", self._db, params=args)
            params = dict(
                self._db.execute(
                    "SELECT run_key, params FROM runs WHERE campaign = ?", (campaign,)
                ).fetchall()
            )
        if frame.empty:
            return pd.DataFrame(columns=base)
        # JSON is parsed once per run (params) and once per distinct dims text, not per row.
        run_params = {k: json.loads(v) for k, v in params.items()}
        for name in dict.fromkeys(n for p in run_params.values() for n in p):
            if name not in frame.columns:
                frame[name] = frame["run_key"].map(lambda k, n=name: run_params[k].get(n))
        dims = {text: json.loads(text) for text in frame["dims"].unique()}
        for name in dict.fromkeys(n for d in dims.values() for n in d):
            frame[f"dim.{name}"] = frame["dims"].map(lambda t, n=name: dims[t].get(n))
        return frame.drop(columns="dims")


def _request_row(run_key: str, level: str, r: Any) -> tuple:
    """A serve_requests row of a socketlab.serve.records.RequestRecord."""
    return (
        run_key,
        level,
        r.index,
        r.phase,
        r.status,
        r.error,
        r.prompt_id,
        r.n_in,
        r.n_out,
        r.t_sched,
        r.t_send,
        r.t_first,
        r.t_end,
        r.t_done,
        json.dumps(r.events),
        json.dumps(r.to_json(), separators=(",", ":")),
    )


def _rollback(cur: sqlite3.Cursor) -> None:
    """Roll back if a transaction is open; a failed BEGIN (read-only, full) leaves none."""
    try:
        if cur.connection.in_transaction:
            cur.execute("ROLLBACK")
    except sqlite3.Error:
        pass  # the transaction is gone already; the original error is what to report


@contextlib.contextmanager
def _writing(path: Path, what: str) -> Iterator[None]:
    """A write that the medium refuses (read-only, full) is a StoreError, one line."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        raise StoreError(f"{path}: cannot store {what}: {exc}") from None
