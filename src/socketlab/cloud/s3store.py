"""Results to and from S3 (or any S3-compatible store): how a fleet's results meet.

Layout under s3://bucket/prefix/<campaign>/:

    runs/experiment=<e>/host=<h>/part-<sha>.parquet      the store's run rows of that partition
    metrics/experiment=<e>/host=<h>/part-<sha>.parquet   their metric rows
    requests/experiment=<e>/host=<h>/part-<sha>.parquet  their serving requests (serve_requests)
    bundles/<run key>.tar.gz                             results/<campaign>/runs/<run key>/
    files/<sha>.tar.gz                                   the campaign's other records: last-run.json,
                                                         hosts/, specs/, cloud-hosts.json, ...
    manifests/<sha>.json                                 counts and checksum of one push

Part names are content hashes, so pushing the same store again uploads nothing, and controllers
of a fleet never overwrite each other's parts. `pull` reads every part and merges into the local
store by run key: a run already stored is skipped (a stored failure is replaced by a pulled
success), so pulling twice adds nothing.
"""  # noqa: E501 (a table)

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import urllib.parse
from collections.abc import Callable
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from socketlab.cloud.target import CloudTarget, api_error
from socketlab.errors import CloudError
from socketlab.safepath import inside
from socketlab.store.status import RunStatus

Log = Callable[[str], None]


def _quiet(_msg: str) -> None:
    pass


def parse_s3_url(url: str, source: str) -> tuple[str, str]:
    """(bucket, prefix without slashes) from s3://bucket/prefix."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise CloudError(f"{source}: {url!r}: expected s3://bucket/prefix")
    return parsed.netloc, parsed.path.strip("/")


def _join(*parts: str) -> str:
    return "/".join(p.strip("/") for p in parts if p)


# -- the store's rows as Arrow tables --------------------------------------------------------


def _run_schema():
    import pyarrow as pa

    from socketlab.store import RunRecord

    cols = []
    for f in fields(RunRecord):
        t = str(f.type)
        if t.startswith(("dict", "list")):
            cols.append(pa.field(f.name, pa.string()))  # JSON text, as the store keeps it
        elif t.startswith("int"):
            cols.append(pa.field(f.name, pa.int64()))
        elif t.startswith("float"):
            cols.append(pa.field(f.name, pa.float64()))
        else:
            cols.append(pa.field(f.name, pa.string()))
    return pa.schema(cols)


def _json_fields() -> set[str]:
    from socketlab.store import RunRecord

    return {f.name for f in fields(RunRecord) if str(f.type).startswith(("dict", "list"))}


def _metric_schema():
    import pyarrow as pa

    return pa.schema(
        [
            ("run_key", pa.string()),
            ("name", pa.string()),
            ("value", pa.float64()),
            ("unit", pa.string()),
            ("dims", pa.string()),
            ("parser", pa.string()),
        ]
    )


def _request_schema():
    import pyarrow as pa

    from socketlab.store import REQUEST_COLUMNS

    ints = {"idx", "n_in", "n_out"}
    return pa.schema(
        [
            (c, pa.int64() if c in ints or c.endswith("_ns") else pa.string())
            for c in REQUEST_COLUMNS
        ]
    )


def _run_row(record: Any) -> dict[str, Any]:
    row = asdict(record)
    for name in _json_fields():
        row[name] = json.dumps(row[name], sort_keys=True, default=str)
    return row


def _parquet(rows: list[dict[str, Any]], schema) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), buf, compression="zstd")
    return buf.getvalue()


def _read_parquet(data: bytes) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    # One thread, no pre-buffering: read_table's thread pools can still be live when the CLI
    # exits, and Arrow then aborts the process ("terminate called without an active
    # exception", exit -6; apache/arrow#34314). These parts are small; threads buy nothing.
    return pq.ParquetFile(io.BytesIO(data), pre_buffer=False).read(use_threads=False).to_pylist()


def _sha(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def digest(runs: list[dict[str, Any]], metrics: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts and a checksum of every metric value (order-independent), to compare stores."""
    h = hashlib.sha256()
    lines = sorted(
        f"{m['run_key']}\t{m['name']}\t{m['unit']}\t{m['dims']}\t{m['parser']}\t{float(m['value'])!r}"
        for m in metrics
    )
    for line in lines:
        h.update(line.encode() + b"\n")
    return {"runs": len(runs), "metrics": len(metrics), "metrics_sha256": h.hexdigest()}


def store_digest(store: Any, campaign: str) -> dict[str, Any]:
    return digest([_run_row(r) for r in store.runs(campaign)], store.metric_rows(campaign))


# -- S3 helpers --------------------------------------------------------------------------------


def _list_keys(s3: Any, bucket: str, prefix: str) -> set[str]:
    import botocore.exceptions

    keys: set[str] = set()
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=prefix + "/" if prefix else ""
        ):
            keys.update(o["Key"] for o in page.get("Contents", []))
    except botocore.exceptions.ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "NoSuchBucket":
            raise CloudError(
                f"s3://{bucket}: no such bucket (create it first, e.g. `aws s3 mb s3://{bucket}`)"
            ) from None
        raise api_error(f"listing s3://{bucket}/{prefix}", exc) from None
    except botocore.exceptions.BotoCoreError as exc:
        raise api_error(f"listing s3://{bucket}/{prefix}", exc) from None
    return keys


def _put(s3: Any, bucket: str, key: str, body: bytes) -> None:
    import botocore.exceptions

    try:
        s3.put_object(Bucket=bucket, Key=key, Body=body)
    except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
        raise api_error(f"uploading s3://{bucket}/{key}", exc) from None


def _get(s3: Any, bucket: str, key: str) -> bytes:
    import botocore.exceptions

    try:
        return s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
        raise api_error(f"downloading s3://{bucket}/{key}", exc) from None


def _partition(experiment: str, host: str) -> str:
    q = urllib.parse.quote
    return f"experiment={q(experiment, safe='')}/host={q(host, safe='')}"


def _bundle(directory: Path, paths: list[Path] | None = None) -> bytes:
    buf = io.BytesIO()
    # mtime 0 and no owner: the same files make the same bytes, so the same sha (no re-upload)
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for path in paths if paths is not None else sorted(directory.rglob("*")):
            if path.is_file() and not path.is_symlink():
                info = tar.gettarinfo(str(path), arcname=str(path.relative_to(directory)))
                info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                with open(path, "rb") as fh:
                    tar.addfile(info, fh)
    return buf.getvalue()


#: what a report needs besides the store and the run folders: provenance (last-run.json), host
#: records (hosts/), specs (specs/), the cloud host facts; not the store, runs/ (bundled per
#: run), generated reports or locks
_NOT_CAMPAIGN_FILES = ("store.sqlite", "runs", "report.")


def _campaign_files(folder: Path) -> list[Path]:
    out = []
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if not path.is_file() or path.is_symlink() or path.name.endswith((".lock", ".tmp")):
            continue
        if str(rel).startswith(_NOT_CAMPAIGN_FILES):
            continue
        out.append(path)
    return out


def _extract_new(data: bytes, directory: Path) -> int:
    """Extract the files of ``data`` that ``directory`` does not have yet; returns how many."""
    directory.mkdir(parents=True, exist_ok=True)
    added = 0
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar.getmembers():
            if member.isfile() and not (directory / member.name).exists():
                tar.extract(member, directory, filter="data")  # no '..', links or devices
                added += 1
    return added


# -- push / pull -------------------------------------------------------------------------------


def push(
    target: CloudTarget, campaign: str, url: str, *, results: Path | None = None, log: Log = _quiet
) -> dict[str, Any]:
    from socketlab.store import Store, store_path

    bucket, prefix = parse_s3_url(url, "push")
    path = store_path(campaign, results)
    with Store(path, create=False) as store:
        records = store.runs(campaign)
        metrics = store.metric_rows(campaign)
        requests = store.request_rows(campaign)
    if not records:
        raise CloudError(f"push: {path}: campaign {campaign!r} has no runs to push")
    s3 = target.client("s3")
    base = _join(prefix, campaign)
    existing = _list_keys(s3, bucket, base)
    by_run: dict[str, list[dict[str, Any]]] = {}
    for m in metrics:
        by_run.setdefault(m["run_key"], []).append(m)
    asked: dict[str, list[dict[str, Any]]] = {}
    for q in requests:
        asked.setdefault(q["run_key"], []).append(q)
    parts: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in records:
        parts.setdefault((r.experiment, r.host), []).append(_run_row(r))
    uploaded, manifest_parts = 0, []
    for (experiment, host), rows in sorted(parts.items()):
        rows.sort(key=lambda r: r["run_key"])
        mrows = [m for r in rows for m in by_run.get(r["run_key"], [])]
        qrows = [q for r in rows for q in asked.get(r["run_key"], [])]
        sha = _sha([rows, mrows, *([qrows] if qrows else [])])[:20]
        # Metrics and requests first: a runs part on S3 then always has them (pull relies on it).
        for table, data_rows, schema in (
            ("metrics", mrows, _metric_schema()),
            *([("requests", qrows, _request_schema())] if qrows else []),
            ("runs", rows, _run_schema()),
        ):
            key = _join(base, table, _partition(experiment, host), f"part-{sha}.parquet")
            manifest_parts.append(key)
            if key not in existing:
                _put(s3, bucket, key, _parquet(data_rows, schema))
                uploaded += 1
    runs_dir = path.parent / "runs"
    bundles = 0
    for r in records:
        key = _join(base, "bundles", f"{r.run_key}.tar.gz")
        directory = inside(runs_dir, r.run_key, what="run key")
        if directory.is_dir() and key not in existing:
            _put(s3, bucket, key, _bundle(directory))
            bundles += 1
    files = _campaign_files(path.parent)
    if files:
        blob = _bundle(path.parent, files)
        fkey = _join(base, "files", f"{hashlib.sha256(blob).hexdigest()[:20]}.tar.gz")
        manifest_parts.append(fkey)
        if fkey not in existing:
            _put(s3, bucket, fkey, blob)
    summary = digest([_run_row(r) for r in records], metrics)
    manifest = {"campaign": campaign, **summary, "parts": manifest_parts}
    mkey = _join(base, "manifests", f"{_sha(manifest)[:20]}.json")
    if mkey not in existing:
        _put(s3, bucket, mkey, json.dumps(manifest, indent=1, sort_keys=True).encode())
    log(
        f"pushed {campaign} to s3://{bucket}/{base}: {summary['runs']} runs, "
        f"{summary['metrics']} metrics, {len(requests)} requests; {uploaded} new parquet parts, "
        f"{bundles} new bundles"
    )
    return {
        "campaign": campaign,
        "url": f"s3://{bucket}/{base}",
        **summary,
        "requests": len(requests),
        "uploaded_parts": uploaded,
        "uploaded_bundles": bundles,
    }


def _better(new: dict[str, Any], old: dict[str, Any]) -> bool:
    def rank(r: dict[str, Any]) -> tuple:
        return (r["status"] == RunStatus.OK, r.get("finished") or 0.0, r.get("attempts") or 0)

    return rank(new) > rank(old)


def pull(
    target: CloudTarget,
    url: str,
    *,
    campaign: str | None = None,
    results: Path | None = None,
    log: Log = _quiet,
) -> list[dict[str, Any]]:
    """Merges every campaign (or one) under the URL into the local stores; returns per campaign."""
    bucket, prefix = parse_s3_url(url, "pull")
    s3 = target.client("s3")
    keys = _list_keys(s3, bucket, _join(prefix, campaign) if campaign else prefix)
    skip = len(prefix) + 1 if prefix else 0
    campaigns = sorted({k[skip:].split("/", 1)[0] for k in keys if "/runs/" in k[skip:]})
    if campaign and campaign not in campaigns:
        raise CloudError(f"pull: no results of campaign {campaign!r} under s3://{bucket}/{prefix}")
    if not campaigns:
        raise CloudError(f"pull: no socketlab results under s3://{bucket}/{prefix}")
    return [_pull_one(s3, bucket, _join(prefix, c), c, keys, results, log) for c in campaigns]


def _pull_one(
    s3: Any, bucket: str, base: str, campaign: str, keys: set[str], results: Path | None, log: Log
) -> dict[str, Any]:
    from socketlab.parse import Metric
    from socketlab.serve.records import RequestRecord
    from socketlab.store import RunRecord, Store, store_path

    # A run may arrive in several parts (re-pushes, or two controllers that ran the same point):
    # keep the best copy of the run row, and the metrics of the very part that copy came from.
    remote: dict[str, dict[str, Any]] = {}
    source: dict[str, str] = {}
    for key in sorted(k for k in keys if k.startswith(base + "/runs/") and k.endswith(".parquet")):
        for row in _read_parquet(_get(s3, bucket, key)):
            if row["run_key"] not in remote or _better(row, remote[row["run_key"]]):
                remote[row["run_key"]] = row
                source[row["run_key"]] = key
    metrics: dict[str, list[dict[str, Any]]] = {}
    requests: dict[str, dict[str, list[Any]]] = {}  #: run key -> level -> records
    for key in sorted(set(source.values())):
        mkey = base + "/metrics/" + key[len(base + "/runs/") :]
        if mkey not in keys:
            raise CloudError(
                f"pull: s3://{bucket}/{key} has no metrics part {mkey} "
                "(an interrupted push? push again)"
            )
        for m in _read_parquet(_get(s3, bucket, mkey)):
            if source.get(m["run_key"]) == key:
                metrics.setdefault(m["run_key"], []).append(m)
        qkey = base + "/requests/" + key[len(base + "/runs/") :]
        for q in _read_parquet(_get(s3, bucket, qkey)) if qkey in keys else []:
            if source.get(q["run_key"]) == key:
                levels = requests.setdefault(q["run_key"], {})
                levels.setdefault(q["level"], []).append(
                    RequestRecord.from_json(json.loads(q["record"]))
                )
    path = store_path(campaign, results)
    runs_dir = path.parent / "runs"
    # a run key read from the bucket names a folder here: one that would leave runs/ stops the
    # pull before the store is touched
    raw_dirs = {k: inside(runs_dir, k, what=f"s3://{bucket}/{base}: run key") for k in remote}
    json_fields = _json_fields()
    added = added_metrics = skipped = bundles = 0
    with Store(path) as store:
        for run_key, row in sorted(remote.items()):
            local = store.status_of(run_key)
            if local is not None and not (local != RunStatus.OK and row["status"] == RunStatus.OK):
                skipped += 1
                continue
            bkey = _join(base, "bundles", f"{run_key}.tar.gz")
            if bkey in keys:
                target_dir = raw_dirs[run_key]
                if not target_dir.exists():
                    _extract(_get(s3, bucket, bkey), target_dir)
                    bundles += 1
                row = {**row, "raw_dir": str(target_dir)}
            data = {
                k: (json.loads(v) if k in json_fields and v is not None else v)
                for k, v in row.items()
            }
            ms = [
                Metric(m["name"], m["value"], m["unit"], json.loads(m["dims"]), m["parser"])
                for m in metrics.get(run_key, [])
            ]
            store.add_run(RunRecord(**data), ms, requests=requests.get(run_key, {}).items())
            added += 1
            added_metrics += len(ms)
        summary = store_digest(store, campaign)
    # Provenance, host records and specs: a local file is never replaced (the first push's copy
    # of last-run.json wins in a fresh folder; a folder that ran the campaign keeps its own).
    files = sum(
        _extract_new(_get(s3, bucket, k), path.parent)
        for k in sorted(k for k in keys if k.startswith(base + "/files/"))
    )
    log(
        f"pulled {campaign} into {path}: {added} runs added ({added_metrics} metrics, "
        f"{bundles} bundles), {skipped} already there"
    )
    return {
        "campaign": campaign,
        "store": str(path),
        "added_runs": added,
        "added_metrics": added_metrics,
        "skipped_runs": skipped,
        "bundles": bundles,
        "files": files,
        "local": summary,
    }


def _extract(data: bytes, directory: Path) -> None:
    tmp = directory.with_name(f".{directory.name}.partial")
    tmp.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(tmp, filter="data")  # refuses absolute paths, '..', devices and links out
    tmp.rename(directory)
