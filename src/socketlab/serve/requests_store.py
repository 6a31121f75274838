"""Every request's raw timestamps, in the campaign's store (table ``serve_requests``).

The table is part of the store's schema (socketlab.store, version 2): the runner stores a
serving run's requests with the run and its metrics in one transaction, and push/pull move
them with the rest, so any metric can be recomputed from the store alone. One row per request,
warm-ups included (phase = "warmup"); times are integer ns from the load generator's origin,
token events a JSON list of [t_ns, tokens].
"""

from __future__ import annotations

import json
from pathlib import Path

from socketlab.serve.records import RequestRecord


def save_requests(path: Path, run_key: str, level: str, records: list[RequestRecord]) -> None:
    """Replace the run's rows for one load level, in one transaction (importers)."""
    from socketlab.store import Store

    with Store(path) as store:
        store.add_requests(run_key, level, records)


def load_requests(
    path: Path, run_key: str | None = None
) -> dict[tuple[str, str], list[RequestRecord]]:
    """(run key, level) -> records in dispatch order."""
    from socketlab.store import Store

    with Store(path, create=False) as store:
        campaigns = store.campaigns() if run_key is None else [None]
        rows = [r for c in campaigns for r in store.request_rows(c, run_key)]
    out: dict[tuple[str, str], list[RequestRecord]] = {}
    for row in rows:
        out.setdefault((row["run_key"], row["level"]), []).append(
            RequestRecord.from_json(json.loads(row["record"]))
        )
    return out
