"""Results where analysts work: a campaign's store as typed pandas frames (docs/results.md).

    from socketlab import results
    res = results.load("quickstart")            # or a folder, a store file, s3://bucket/p/<c>
    res.runs, res.metrics, res.requests         # typed frames (socketlab.results.schema)
    res.verdicts                                # the report's cells (built on first use)
    res.metrics_with_runs()                     # each value with its run's columns

Reading never changes or creates a store; a source that holds no results is a one-line
StoreError (CloudError for S3).
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from socketlab.results import frames
from socketlab.results.schema import FRAMES, SCHEMA_VERSION, Column
from socketlab.results.source import STORE_FILE, Located, locate
from socketlab.store.status import RunStatus

__all__ = ["FRAMES", "SCHEMA_VERSION", "Column", "Results", "load"]


class Results:
    """One campaign's results, read once from its store (read-only)."""

    def __init__(self, located: Located, source: str) -> None:
        from socketlab.store import Store

        self.source = source
        self.campaign = located.campaign
        self.store_path = located.store
        self.folder = located.folder
        self._located = located  # holds an S3 pull's temporary folder while this object lives
        with Store(located.store, create=False) as store:
            records = store.runs(self.campaign)
            metric_rows = store.metric_rows(self.campaign)
            request_rows = store.request_rows(self.campaign)
        #: one row per run (socketlab.results.schema.RUNS, plus one column per parameter)
        self.runs: pd.DataFrame = frames.runs_frame(records)
        #: one row per stored metric value (METRICS, plus ``dim.<name>`` per dimension)
        self.metrics: pd.DataFrame = frames.metrics_frame(metric_rows)
        #: one row per serving request (REQUESTS); empty for a campaign that served nothing
        self.requests: pd.DataFrame = frames.requests_frame(request_rows)

    def __repr__(self) -> str:
        return (
            f"<Results {self.campaign}: {len(self.runs)} runs, {len(self.metrics)} metric "
            f"values, {len(self.requests)} requests from {self.store_path}>"
        )

    def metrics_with_runs(self, ok_only: bool = False) -> pd.DataFrame:
        """Each metric value with its run's columns (what `orchestrate export` writes)."""
        out = frames.with_runs(self.metrics, self.runs)
        return out[out["status"] == RunStatus.OK].reset_index(drop=True) if ok_only else out

    @cached_property
    def verdicts(self) -> pd.DataFrame:
        """The report's cells (VERDICTS): one row per published cell and host, as
        `orchestrate report` judges them; no rows when no published file names the campaign."""
        from socketlab.report.gather import build_report
        from socketlab.results.verdicts import verdict_frame

        return verdict_frame(
            build_report(self.campaign, results=self._results_root()), self.campaign
        )

    def _results_root(self) -> Path:
        """A folder holding <campaign>/store.sqlite, as the report reads it: the store's own
        grandparent, or a temporary one linking to the store and its campaign files."""
        if self.folder.name == self.campaign and self.store_path.name == STORE_FILE:
            return self.folder.parent
        import tempfile

        self._link_dir = tempfile.TemporaryDirectory(prefix="socketlab-results-")
        linked = Path(self._link_dir.name) / self.campaign
        linked.mkdir()
        (linked / STORE_FILE).symlink_to(self.store_path.resolve())
        for name in ("hosts", "runs", "last-run.json"):
            if (self.folder / name).exists():
                (linked / name).symlink_to((self.folder / name).resolve())
        return linked.parent


def load(
    source: str | Path, *, campaign: str | None = None, results: str | Path | None = None, **s3: Any
) -> Results:
    """A campaign's results from ``source``: a campaign name (looked up in ``results``, default
    results/ or SOCKETLAB_RESULTS), a results folder (``campaign`` picks one of several), a
    campaign folder, a store file, or ``s3://bucket/prefix/<campaign>`` as `orchestrate push`
    left it (``region``, ``profile``, ``endpoint_url`` as for push; else the environment)."""
    return Results(locate(source, campaign=campaign, results=results, **s3), str(source))
