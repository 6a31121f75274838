"""The results store: ``sqlite``, one SQLite file per campaign (``Store``, ``RunRecord``, where
the file is); ``status``, the statuses a run can end in (``RunStatus``). Nothing here imports
from above the store."""

from socketlab.store.sqlite import (
    COMPLETE,
    INTERRUPTED,
    REQUEST_COLUMNS,
    SCHEMA_VERSION,
    STATUSES,
    UNAVAILABLE,
    HostFailure,
    RunRecord,
    Store,
    check_results_folder,
    existing_results_folder,
    existing_store_path,
    ok_runs_in_folder,
    store_path,
)

__all__ = [
    "COMPLETE",
    "INTERRUPTED",
    "REQUEST_COLUMNS",
    "SCHEMA_VERSION",
    "STATUSES",
    "UNAVAILABLE",
    "HostFailure",
    "RunRecord",
    "Store",
    "check_results_folder",
    "existing_results_folder",
    "existing_store_path",
    "ok_runs_in_folder",
    "store_path",
]
