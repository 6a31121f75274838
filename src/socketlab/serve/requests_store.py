"""Every request's raw timestamps in the campaign's results store (table ``serve_requests``).

The RUN helper's store (socketlab.store) owns ``runs`` and ``metrics``; this table sits beside
them in the same SQLite file, keyed by run key, so any metric can be recomputed from the store
alone. One row per request, warm-ups included (phase = "warmup"); times are integer ns from the
load generator's origin, token events a JSON list of [t_ns, tokens].
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from socketlab.serve.records import RequestRecord

_SCHEMA = """
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


def _connect(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, timeout=30, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.executescript(_SCHEMA)
    return db


def save_requests(path: Path, run_key: str, level: str, records: list[RequestRecord]) -> None:
    """Replace the run's rows for one load level, in one transaction."""
    db = _connect(path)
    try:
        db.execute("BEGIN IMMEDIATE")
        db.execute("DELETE FROM serve_requests WHERE run_key = ? AND level = ?", (run_key, level))
        db.executemany(
            "INSERT INTO serve_requests VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            [(run_key, level, r.index, r.phase, r.status, r.error, r.prompt_id, r.n_in, r.n_out,
              r.t_sched, r.t_send, r.t_first, r.t_end, r.t_done, json.dumps(r.events),
              json.dumps(r.to_json(), separators=(",", ":"))) for r in records])
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    finally:
        db.close()


def load_requests(path: Path,
                  run_key: str | None = None) -> dict[tuple[str, str], list[RequestRecord]]:
    """(run key, level) -> records in dispatch order."""
    db = _connect(path)
    try:
        sql = "SELECT run_key, level, record FROM serve_requests"
        rows = (db.execute(sql + " WHERE run_key = ? ORDER BY idx", (run_key,)) if run_key
                else db.execute(sql + " ORDER BY run_key, level, idx")).fetchall()
    finally:
        db.close()
    out: dict[tuple[str, str], list[RequestRecord]] = {}
    for key, level, rec in rows:
        out.setdefault((key, level), []).append(RequestRecord.from_json(json.loads(rec)))
    return out
