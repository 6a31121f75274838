"""Where a campaign's results are: a campaign name, a results folder, a campaign folder, a
store file, or an S3 URL of a pushed campaign. Never makes a store: a source that holds none is
a StoreError (CloudError for S3) naming the path and what was expected.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from socketlab.errors import CloudError, StoreError
from socketlab.safepath import check_part

STORE_FILE = "store.sqlite"


@dataclass
class Located:
    store: Path  #: the store file
    campaign: str
    #: the campaign's folder as `orchestrate run` leaves it (hosts/, last-run.json, runs/)
    folder: Path
    #: a temporary folder the results were pulled into (S3), removed with this object
    keep: Any = field(default=None, repr=False)


def locate(
    source: str | Path, *, campaign: str | None = None, results: str | Path | None = None, **s3: Any
) -> Located:
    """The store a source names. ``campaign`` picks one where the source holds several;
    ``results`` is the folder a bare campaign name is looked up in (default results/ or
    SOCKETLAB_RESULTS); ``s3`` takes region, profile, endpoint_url for an S3 URL."""
    text = str(source)
    if not text:
        raise StoreError(
            "results source: empty; expected a campaign name, a results folder, "
            "a store file or s3://bucket/prefix/<campaign>"
        )
    if text.startswith("s3://"):
        return _from_s3(text, **s3)
    path = Path(text)
    if path.is_file():
        return _from_store(path, campaign)
    if path.is_dir():
        if (path / STORE_FILE).is_file():
            return _from_store(path / STORE_FILE, campaign)
        stores = sorted(path.glob(f"*/{STORE_FILE}"))
        if not stores:
            raise StoreError(
                f"{path}: no results store here (expected {STORE_FILE} in it, or "
                f"a results folder of <campaign>/{STORE_FILE})"
            )
        names = [s.parent.name for s in stores]
        if campaign is None and len(names) == 1:
            campaign = names[0]
        if campaign not in names:
            raise StoreError(
                f"{path}: a results folder of {len(names)} campaigns ({', '.join(names)}); name one"
            )
        return _from_store(path / campaign / STORE_FILE, None)  # the store says its campaign
    if "/" in text or path.exists() or text.startswith("."):
        raise StoreError(
            f"{path}: no such file or folder (expected a campaign name, a results "
            f"folder, a campaign folder or a {STORE_FILE})"
        )
    from socketlab.store import existing_results_folder

    root = existing_results_folder(results)
    check_part(text, "campaign")
    store = root / text / STORE_FILE
    if not store.is_file():
        there = sorted(p.parent.name for p in root.glob(f"*/{STORE_FILE}"))
        raise StoreError(
            f"{root}: no campaign '{text}' (campaigns there: {', '.join(there) or 'none'})"
        )
    return _from_store(store, campaign or text)


def _from_store(store: Path, campaign: str | None) -> Located:
    from socketlab.store import Store

    with Store(store, create=False) as db:
        names = db.campaigns()
    if not names:
        raise StoreError(f"{store}: holds no runs (an empty store; run the campaign first)")
    if campaign is None and len(names) == 1:
        campaign = names[0]
    if campaign not in names:
        raise StoreError(
            f"{store}: "
            + (f"no campaign '{campaign}'; " if campaign else "")
            + f"it holds {', '.join(sorted(names))}; name one"
        )
    return Located(store, campaign, store.parent)


def _from_s3(
    url: str,
    *,
    region: str | None = None,
    profile: str | None = None,
    endpoint_url: str | None = None,
) -> Located:
    """Pull s3://bucket/prefix/<campaign> into a temporary folder (removed with the result)."""
    from socketlab.cloud import s3store
    from socketlab.cloud.target import resolve_target

    bucket, key = s3store.parse_s3_url(url, "results source")
    prefix, _, campaign = key.rpartition("/")
    if not campaign:
        raise CloudError(
            f"results source: {url!r}: expected s3://{bucket}/prefix/<campaign> "
            "(the URL given to push, then the campaign)"
        )
    target = resolve_target(region, profile, endpoint_url, source="results source")
    keep = tempfile.TemporaryDirectory(prefix="socketlab-s3-")
    where = f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
    s3store.pull(target, where, campaign=campaign, results=Path(keep.name))
    store = Path(keep.name) / campaign / STORE_FILE
    return Located(store, campaign, store.parent, keep)
