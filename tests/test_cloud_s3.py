"""`orchestrate push` / `orchestrate pull` against moto's S3 server, with real stores.

The pulled store must equal the pushed one (counts and a checksum of every metric value),
pulling twice adds nothing, and a second controller's push merges in by run key. A planted
AWS_SECRET_ACCESS_KEY must appear in no store, result, transcript or uploaded object.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from socketlab.cloud.s3store import store_digest
from socketlab.parse import Metric
from socketlab.store import RunRecord, Store, store_path
from tests.support.moto import (
    aws_client,
    files_containing,
    moto_server,
    objects_containing,
    planted_env,
    run_logged,
)

BIN = Path(sys.executable).parent
SECRET = f"planted-secret-{uuid.uuid4().hex}"
BUCKET = "socketlab-results"

pytestmark = pytest.mark.skipif(not (BIN / "moto_server").exists(), reason="moto[server] missing")


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("s3")


@pytest.fixture(scope="module")
def moto(work):
    with moto_server(work) as server:
        s3 = aws_client("s3", server.url, "AKIASOCKETLABTEST0002", SECRET)
        s3.create_bucket(Bucket=BUCKET)
        yield server, s3


@pytest.fixture(scope="module")
def env(work, moto) -> dict[str, str]:
    return planted_env(
        work,
        "AKIASOCKETLABTEST0002",
        SECRET,
        AWS_REGION="us-east-1",
        AWS_ENDPOINT_URL=moto[0].url,
        SOCKETLAB_RESULTS=str(work / "default-results"),
    )


def orchestrate(work: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    return run_logged(work, env, [str(BIN / "orchestrate"), *args], timeout=120)


def make_store(
    results: Path,
    campaign: str,
    hosts: list[str],
    seed: int,
    shared_key: str | None = None,
    note: str | None = None,
) -> list[str]:
    """A store as the runner writes it, with raw files per run; returns the run keys."""
    keys = []
    with Store(store_path(campaign, results)) as store:
        for h_i, host in enumerate(hosts):
            for exp in ("stream", "serve/chat"):
                for rep in range(3):
                    key = f"{seed:02d}{h_i:02d}{exp[:2]}{rep:02d}".ljust(64, "0")
                    failed = exp == "stream" and rep == 2 and h_i == 0
                    rec = RunRecord(
                        run_key=key,
                        campaign=campaign,
                        experiment=exp,
                        host=host,
                        repetition=rep,
                        params={"threads": 4 + rep, "size": "1MiB"},
                        status="failed" if failed else "ok",
                        reason="exit code 1" if failed else "",
                        exit_code=1 if failed else 0,
                        started=1000.0 + rep,
                        finished=1010.5 + rep,
                        duration_s=10.5,
                        argv=["bin/stream", "--threads", str(4 + rep)],
                        cpus="2-5",
                        build={"hash": "abc"},
                        host_profile="hp1",
                        spec_sha256="s" * 64,
                        fingerprint_before={"thp": "never"},
                        extra={"note": note or f"seed {seed}"},
                    )
                    metrics = (
                        []
                        if failed
                        else [
                            Metric(
                                "bandwidth",
                                1000.0 / (rep + 1) + seed + h_i / 7,
                                "GB/s",
                                {"kernel": "load"},
                                "jsonl/1",
                            ),
                            Metric(
                                "bandwidth",
                                512.25 + rep * 0.1,
                                "GB/s",
                                {"kernel": "copy"},
                                "jsonl/1",
                            ),
                            Metric("latency", 0.1 + rep / 3, "ns", {}, "jsonl/1"),
                        ]
                    )
                    store.add_run(rec, metrics)
                    raw = results / campaign / "runs" / key
                    raw.mkdir(parents=True, exist_ok=True)
                    (raw / "stdout.txt").write_text(f"run {key} on {host}: {note or ''}\n")
                    (raw / "collectors").mkdir(exist_ok=True)
                    (raw / "collectors" / "cpu.jsonl").write_text('{"t": 1.0, "busy": 0.5}\n')
                    keys.append(key)
        if shared_key:
            # The same run key as another controller's: pull must keep one copy.
            store.add_run(
                RunRecord(
                    run_key=shared_key,
                    campaign=campaign,
                    experiment="stream",
                    host=hosts[0],
                    repetition=0,
                    params={},
                    status="ok",
                ),
                [Metric("bandwidth", 1.0, "GB/s", {}, "jsonl/1")],
            )
    return keys


def digest_of(results: Path, campaign: str) -> dict:
    with Store(store_path(campaign, results), create=False) as store:
        return store_digest(store, campaign)


def runs_of(results: Path, campaign: str) -> dict[str, dict]:
    with Store(store_path(campaign, results), create=False) as store:
        out = {}
        for r in store.runs(campaign):
            d = dict(r.__dict__)
            d.pop("raw_dir")
            out[r.run_key] = d
        return out


def test_push_pull_round_trip_and_fleet_merge(work, env, moto):
    _, s3 = moto
    a, b, c = work / "ctl-a", work / "ctl-b", work / "ctl-c"
    keys_a = make_store(a, "fleet", ["h1", "h2"], seed=1)
    url = f"s3://{BUCKET}/team/oct"

    push = orchestrate(work, env, "push", "fleet", url, "--results", str(a), "--json")
    assert push.returncode == 0, push.stderr
    pushed = json.loads(push.stdout)
    assert pushed["runs"] == 12 and pushed["metrics"] == 11 * 3
    assert pushed["uploaded_bundles"] == 12
    objects = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]]
    assert sum(k.endswith(".parquet") for k in objects) == 2 * 4  # runs+metrics x 2 exp x 2 hosts
    assert any("/runs/experiment=serve%2Fchat/host=h2/part-" in k for k in objects)

    again = orchestrate(work, env, "push", "fleet", url, "--results", str(a), "--json")
    assert json.loads(again.stdout)["uploaded_parts"] == 0
    assert json.loads(again.stdout)["uploaded_bundles"] == 0

    pull = orchestrate(work, env, "pull", url, "--results", str(b), "--json")
    assert pull.returncode == 0, pull.stderr
    pulled = json.loads(pull.stdout)
    assert pulled["added_runs"] == 12 and pulled["added_metrics"] == 33
    da = digest_of(a, "fleet")
    assert digest_of(b, "fleet") == da == {k: pushed[k] for k in da}
    assert runs_of(b, "fleet") == runs_of(a, "fleet")
    for key in keys_a:
        for rel in ("stdout.txt", "collectors/cpu.jsonl"):
            assert (b / "fleet" / "runs" / key / rel).read_bytes() == (
                a / "fleet" / "runs" / key / rel
            ).read_bytes()
    with Store(store_path("fleet", b), create=False) as store:
        assert store.runs("fleet")[0].raw_dir == str(
            b / "fleet" / "runs" / store.runs("fleet")[0].run_key
        )

    twice = orchestrate(work, env, "pull", url, "--results", str(b), "--json")
    assert json.loads(twice.stdout)["added_runs"] == 0
    assert json.loads(twice.stdout)["skipped_runs"] == 12
    assert digest_of(b, "fleet") == da

    # A second controller pushes other hosts plus one run key already pushed by the first.
    keys_c = make_store(c, "fleet", ["h3"], seed=2, shared_key=keys_a[0])
    assert orchestrate(work, env, "push", "fleet", url, "--results", str(c)).returncode == 0
    merged = json.loads(orchestrate(work, env, "pull", url, "--results", str(b), "--json").stdout)
    assert merged["added_runs"] == len(keys_c)
    assert merged["local"]["runs"] == 12 + len(keys_c)
    fresh = json.loads(
        orchestrate(work, env, "pull", url, "--results", str(work / "ctl-d"), "--json").stdout
    )
    assert fresh["local"] == merged["local"]  # the same union, whatever the order of pulls


def test_a_run_key_that_leaves_runs_stops_the_pull_before_anything_is_written(work, env, moto):
    """Issue 29: a run key read from the bucket names a folder under runs/ here. A bucket that
    says `../../escape` (tampered, or another controller's bug) stops the pull with one line,
    before the store or any folder is made."""
    import io

    import pyarrow.parquet as pq

    _, s3 = moto
    url, prefix = f"s3://{BUCKET}/hostile", "hostile/keys/runs/"
    make_store(work / "ctl-h", "keys", ["h1"], seed=3)
    assert (
        orchestrate(work, env, "push", "keys", url, "--results", str(work / "ctl-h")).returncode
        == 0
    )
    for obj in s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix)["Contents"]:
        table = pq.read_table(
            io.BytesIO(s3.get_object(Bucket=BUCKET, Key=obj["Key"])["Body"].read())
        )
        keys = [f"../../../escape-{i}" for i in range(table.num_rows)]
        table = table.set_column(table.schema.get_field_index("run_key"), "run_key", [keys])
        buf = io.BytesIO()
        pq.write_table(table, buf)
        s3.put_object(Bucket=BUCKET, Key=obj["Key"], Body=buf.getvalue())
    fresh = work / "ctl-hostile" / "deep" / "er"
    p = orchestrate(work, env, "pull", url, "--results", str(fresh))
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert (
        p.stderr.count("\n") == 1
        and f"s3://{BUCKET}/hostile/keys: run key '../../../escape-0': it holds '/'" in p.stderr
    ), p.stderr
    assert not (work / "ctl-hostile").exists()


def test_errors_name_what_is_wrong(work, env, moto):
    p = orchestrate(
        work, env, "push", "fleet", "s3://no-such-bucket-here/x", "--results", str(work / "ctl-a")
    )
    assert p.returncode == 2 and "no such bucket" in p.stderr and "Traceback" not in p.stderr
    p = orchestrate(work, env, "pull", "https://example.com/x")
    assert p.returncode == 2 and "expected s3://bucket/prefix" in p.stderr
    p = orchestrate(work, env, "push", "nothing", f"s3://{BUCKET}/x", "--results", str(work))
    assert p.returncode == 2 and "no results store here" in p.stderr
    p = orchestrate(work, env, "pull", f"s3://{BUCKET}/empty")
    assert p.returncode == 2 and "no socketlab results under" in p.stderr


def test_no_credential_in_stores_results_or_objects(work, env, moto):
    _, s3 = moto
    # Its own push/pull cycle (so it also holds when run alone), then everything written by
    # this module so far: stores, run folders, transcripts, moto's log and every object.
    make_store(work / "ctl-s", "secrets", ["h9"], seed=9)
    url = f"s3://{BUCKET}/secrets"
    assert (
        orchestrate(work, env, "push", "secrets", url, "--results", str(work / "ctl-s")).returncode
        == 0
    )
    pulled = orchestrate(work, env, "pull", url, "--results", str(work / "ctl-t"), "--json")
    assert json.loads(pulled.stdout)["added_runs"] == 6
    assert (work / "transcript.txt").exists() and (work / "moto_server.log").exists()
    assert (work / "ctl-t" / "secrets" / "store.sqlite").exists()
    assert files_containing(work, SECRET) == []
    assert objects_containing(s3, BUCKET, SECRET) == []
    # The scan can fail: the same value put in a run's fields and raw output is found in the
    # store, the run folder, and inside the zstd Parquet part and the gzip bundle it pushed.
    control = work.parent / f"{work.name}-control"
    make_store(control, "leaky", ["h9"], seed=8, note=SECRET)
    s3.create_bucket(Bucket="control")
    assert (
        orchestrate(
            work, env, "push", "leaky", "s3://control/x", "--results", str(control)
        ).returncode
        == 0
    )
    found = files_containing(control, SECRET)
    assert str(control / "leaky" / "store.sqlite") in found
    assert any(f.endswith("/stdout.txt") for f in found)
    objects = objects_containing(s3, "control", SECRET)
    assert any("/runs/" in k and k.endswith(".parquet") for k in objects)
    assert any(k.endswith(".tar.gz") for k in objects)


def test_pull_into_a_fresh_folder_gives_the_same_report(work, env, moto, tmp_path):
    """A real campaign on localhost, its report, push, pull into an empty folder: the pulled
    campaign has its provenance, host records and specs, and the report is the same byte for
    byte apart from the line saying when it was generated."""
    import re

    import yaml

    ran = tmp_path / "ran"
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        "localhost": {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": sys.executable,
                            "socketlab_workroot": str(tmp_path / "work"),
                        }
                    }
                }
            }
        )
    )
    spec = tmp_path / "spec.yaml"
    emit = (
        "import json; print(json.dumps({'type': 'metric', 'name': 'x', 'value': 2.5, 'unit': '1'}))"
    )
    spec.write_text(
        yaml.safe_dump(
            {
                "schema_version": 1,
                "campaign": "roundtrip",
                "defaults": {"timeout_s": 60, "repetitions": 2, "collectors": ["proc_noise"]},
                "experiments": [
                    {
                        "name": "emit",
                        "command": [sys.executable, "-c", emit],
                        "metrics": {"parser": "jsonl"},
                    }
                ],
            }
        )
    )
    renv = {**env, "SOCKETLAB_RESULTS": str(ran)}
    run = orchestrate(work, renv, "run", str(spec), "--inventory", str(inventory), "--plain")
    assert run.returncode == 0, run.stdout + run.stderr
    url = f"s3://{BUCKET}/roundtrip"
    assert orchestrate(work, renv, "push", "roundtrip", url).returncode == 0
    fresh = tmp_path / "fresh"
    pulled = orchestrate(work, {**env, "SOCKETLAB_RESULTS": str(fresh)}, "pull", url, "--json")
    assert pulled.returncode == 0, pulled.stderr
    assert json.loads(pulled.stdout)["files"] >= 3  # last-run.json, hosts/localhost.json, spec
    for rel in ("last-run.json", "hosts/localhost.json"):
        assert (fresh / "roundtrip" / rel).read_bytes() == (ran / "roundtrip" / rel).read_bytes()
    assert sorted(p.name for p in (fresh / "roundtrip" / "specs").iterdir()) == sorted(
        p.name for p in (ran / "roundtrip" / "specs").iterdir()
    )

    def report(results: Path) -> str:
        out = orchestrate(work, {**env, "SOCKETLAB_RESULTS": str(results)}, "report", "roundtrip")
        assert out.returncode == 0, out.stdout + out.stderr
        text = (results / "roundtrip" / "report.md").read_text()
        return re.sub(r"(?im)^.*generated.*$", "<generated>", text.replace(str(results), "<R>"))

    first, second = report(ran), report(fresh)
    assert "irq_rate" in first and "runs: ok 2" in first  # collector metrics are shown
    assert second == first


def test_serving_requests_travel_with_their_runs(work, env, moto):
    """serve_requests is part of the store: push sends it beside runs and metrics, pull merges
    it back with its run (one transaction), and a second pull adds nothing."""
    from socketlab.serve.records import RequestRecord
    from socketlab.serve.requests_store import load_requests

    src, dst = work / "req-a", work / "req-b"
    records = [
        RequestRecord(
            index=i,
            phase="warmup" if i == 0 else "measured",
            n_in=4,
            t_sched=10 * i,
            t_send=10 * i + 1,
            events=[[10 * i + 5, 1]],
            t_done=10 * i + 6,
            n_out=1,
            status="ok",
        )
        for i in range(3)
    ]
    with Store(store_path("served", src)) as store:
        run = RunRecord(
            run_key="q" * 64,
            campaign="served",
            experiment="llama",
            host="h1",
            repetition=0,
            params={"arm": "all"},
            status="ok",
        )
        store.add_run(
            run,
            [Metric("p99_ttft_ms", 1.5, "ms", {"load": "c1"}, "serving/1")],
            requests=[("c1", records), ("c2", records[:1])],
        )
    url = f"s3://{BUCKET}/requests"
    push = orchestrate(work, env, "push", "served", url, "--results", str(src), "--json")
    assert push.returncode == 0, push.stderr
    assert json.loads(push.stdout)["requests"] == 4
    pull = orchestrate(work, env, "pull", url, "--results", str(dst), "--json")
    assert pull.returncode == 0, pull.stderr
    back = load_requests(store_path("served", dst))
    assert back == load_requests(store_path("served", src))
    assert [r.to_json() for r in back[("q" * 64, "c1")]] == [r.to_json() for r in records]
    twice = orchestrate(work, env, "pull", url, "--results", str(dst), "--json")
    assert json.loads(twice.stdout)["skipped_runs"] == 1
    assert len(load_requests(store_path("served", dst))[("q" * 64, "c1")]) == 3
