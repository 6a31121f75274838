"""The CPU-bound inference worker of the concurrency sweep (seed 003, section 6).

``python -m socketlab.platform.worker --workers N --requests R [--pinned 0|1] [--endpoint-url URL
--bucket B ...]`` starts N worker processes at once; each serves R requests, one after another:
read the request's input (an S3 object when an endpoint is given, else a seeded local array),
then run a small MLP (numpy: 512 -> 2048 -> 512, batch 16, seeded weights; nothing downloaded).
Each worker uses ``--threads`` BLAS threads, pinned to its own CPUs with ``--pinned 1`` (round robin
over the CPUs this process may use) or free to move without it.

Prints JSON-lines metrics: per request ``request_latency`` (ms, dims worker and request), and
for the whole run ``latency_p50``/``latency_p95`` (ms over every measured request), ``throughput``
(requests/s: all requests / (last end - first start)) and ``s3_latency_p95`` when inputs came
from S3. The first ``--warmup`` requests of each worker are not measured. The interface is
open for other workers (a GPU one): anything printing these metrics fits the sweep.

Exit: 0 ok; 1 a worker failed (its last stderr line); 2 bad arguments or S3 refused (one line).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

SHAPE = (16, 512)  #: one request's input: batch x features (float32)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = q / 100 * (len(ordered) - 1)  # linear interpolation between closest ranks
    lo = int(rank)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


def _s3(args: argparse.Namespace):
    import boto3
    from botocore.config import Config

    if args.aws_config:
        os.environ["AWS_CONFIG_FILE"] = args.aws_config
    if args.aws_credentials:
        os.environ["AWS_SHARED_CREDENTIALS_FILE"] = args.aws_credentials
    session = boto3.Session(profile_name=args.profile or None)
    return session.client("s3", endpoint_url=args.endpoint_url, region_name=session.region_name
                          or "us-east-1", config=Config(retries={"max_attempts": 1},
                                                        connect_timeout=5))  # fmt: skip


def _keys(args: argparse.Namespace) -> list[str]:
    return [f"{args.prefix}/input-{i:03d}.f32" for i in range(args.inputs)]


def stage_inputs(args: argparse.Namespace) -> None:
    """Put the inputs in the bucket once (untimed); workers only read them."""
    import numpy as np
    from botocore.exceptions import ClientError

    s3 = _s3(args)
    try:
        s3.head_bucket(Bucket=args.bucket)
    except ClientError:
        s3.create_bucket(Bucket=args.bucket)
    listed = s3.list_objects_v2(Bucket=args.bucket, Prefix=f"{args.prefix}/")
    have = {o["Key"] for o in listed.get("Contents", [])}
    rng = np.random.default_rng(1)
    for key in _keys(args):
        if key not in have:
            data = rng.standard_normal(SHAPE, dtype=np.float32).tobytes()
            s3.put_object(Bucket=args.bucket, Key=key, Body=data)


def child(args: argparse.Namespace) -> int:
    """One worker: R requests, one JSON line per request on stdout."""
    if args.cpu_list:
        os.sched_setaffinity(0, {int(c) for c in args.cpu_list.split(",")})
    import numpy as np

    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((512, 2048), dtype=np.float32) / 22.6
    w2 = rng.standard_normal((2048, 512), dtype=np.float32) / 45.2
    s3 = _s3(args) if args.endpoint_url else None
    keys = _keys(args)
    local = rng.standard_normal((args.inputs, *SHAPE), dtype=np.float32)
    for i in range(args.warmup + args.requests):
        t0 = time.perf_counter()
        if s3 is not None:
            body = s3.get_object(Bucket=args.bucket, Key=keys[i % len(keys)])["Body"].read()
            x = np.frombuffer(body, dtype=np.float32).reshape(SHAPE)
        else:
            x = local[i % args.inputs]
        t1 = time.perf_counter()
        for _ in range(args.layers):  # the CPU-bound part: a few MLP passes per request
            h = np.maximum(x @ w1, 0.0)
            x = (h @ w2).astype(np.float32)
        t2 = time.perf_counter()
        if i >= args.warmup:
            print(json.dumps({"i": i - args.warmup, "t_start": time.time() - (t2 - t0),
                              "latency_ms": (t2 - t0) * 1e3, "s3_ms": (t1 - t0) * 1e3,
                              "check": float(np.abs(x).mean())}), flush=True)  # fmt: skip
    return 0


def parent(args: argparse.Namespace) -> int:
    if args.endpoint_url:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            stage_inputs(args)
        except (BotoCoreError, ClientError) as exc:
            print(f"worker: S3 endpoint {args.endpoint_url}: {type(exc).__name__}: "
                  f"{exc}".splitlines()[0], file=sys.stderr)  # fmt: skip
            return 2
    cpus = sorted(os.sched_getaffinity(0))
    env = {**os.environ, **{v: str(args.threads) for v in (
        "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}}  # fmt: skip
    procs = []
    base = [sys.executable, "-m", "socketlab.platform.worker", "--child",
            *_forward(args)]  # fmt: skip
    for w in range(args.workers):
        argv = list(base)
        if args.pinned:
            mine = [cpus[(w * args.threads + t) % len(cpus)] for t in range(args.threads)]
            argv += ["--cpu-list", ",".join(map(str, mine))]
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env=env))  # fmt: skip
    latencies, s3_ms, starts, ends, failed = [], [], [], [], ""
    for w, proc in enumerate(procs):
        out, err = proc.communicate()
        if proc.returncode != 0:
            failed = failed or f"worker {w} exited {proc.returncode}: " + (
                err.strip().splitlines() or ["no output"])[-1]
            continue
        for line in out.splitlines():
            rec = json.loads(line)
            latencies.append(rec["latency_ms"])
            s3_ms.append(rec["s3_ms"])
            starts.append(rec["t_start"])
            ends.append(rec["t_start"] + rec["latency_ms"] / 1e3)
            print(json.dumps({"type": "metric", "name": "request_latency",
                              "value": rec["latency_ms"], "unit": "ms", "worker": w,
                              "request": rec["i"]}))  # fmt: skip
    if failed:
        print(failed, file=sys.stderr)
        return 1
    dims = {"workers": args.workers, "pinned": args.pinned}
    span = max(ends) - min(starts)
    for name, value, unit in (
        ("latency_p50", _percentile(latencies, 50), "ms"),
        ("latency_p95", _percentile(latencies, 95), "ms"),
        ("throughput", len(latencies) / span if span > 0 else 0.0, "1/s"),
    ):
        print(json.dumps({"type": "metric", "name": name, "value": value, "unit": unit, **dims}))
    if args.endpoint_url:
        print(json.dumps({"type": "metric", "name": "s3_latency_p95",
                          "value": _percentile(s3_ms, 95), "unit": "ms", **dims}))  # fmt: skip
    return 0


def _forward(args: argparse.Namespace) -> list[str]:
    out = ["--requests", str(args.requests), "--warmup", str(args.warmup), "--layers",
           str(args.layers), "--inputs", str(args.inputs), "--prefix", args.prefix]  # fmt: skip
    for flag in ("endpoint_url", "bucket", "profile", "aws_config", "aws_credentials"):
        value = getattr(args, flag)
        if value:
            out += [f"--{flag.replace('_', '-')}", value]
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="worker", description=__doc__)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--requests", type=int, default=20)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--layers", type=int, default=4, help="MLP passes per request")
    p.add_argument("--threads", type=int, default=1, help="BLAS threads per worker")
    p.add_argument("--pinned", type=int, choices=[0, 1], default=0,
                   help="1: pin each worker to its own CPUs (a sweep parameter)")
    p.add_argument("--inputs", type=int, default=8)
    p.add_argument("--prefix", default="socketlab-worker")
    p.add_argument("--endpoint-url", default="")
    p.add_argument("--bucket", default="socketlab-worker")
    p.add_argument("--profile", default="")
    p.add_argument("--aws-config", default="")
    p.add_argument("--aws-credentials", default="")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--cpu-list", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.workers < 1 or args.requests < 1 or args.threads < 1:
        print("worker: --workers, --requests and --threads must be at least 1", file=sys.stderr)
        return 2
    return child(args) if args.child else parent(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
