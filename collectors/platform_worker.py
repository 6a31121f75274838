"""The CPU-bound inference worker of the concurrency sweep (seed 003, section 6; runs on the host).

``python3 -I platform_worker.py --workers N --requests R [--pinned 0|1] [--endpoint-url URL
--bucket B ...]`` starts N worker processes at once; each serves R requests, one after another:
read the request's input (an S3 object when an endpoint is given, else a seeded local array),
then run a small MLP in pure Python (128 -> 512 -> 128 with ReLU, batch 4, ``--layers`` passes,
seeded weights; nothing downloaded). Stdlib only, so every machine runs the same arithmetic
whatever it has installed (no numpy or BLAS whose build or threads differ between a host and a
guest); boto3 (the distribution's python3-boto3: run with ``-I``, not ``-S``) only when inputs
come from S3. Python 3.9 and later. Each worker is one process on one CPU at a time: with
``--pinned 1`` pinned to its own CPU (round robin over the CPUs this process may use), free to
move without it.

Prints JSON-lines metrics: per request ``request_latency`` (ms, dims worker and request), and
for the whole run ``latency_p50``/``latency_p95`` (ms over every measured request), ``throughput``
(requests/s: all requests / (last end - first start)) and ``s3_latency_p95`` when inputs came
from S3. The first ``--warmup`` requests of each worker are not measured. The interface is
open for other workers (a GPU one): anything printing these metrics fits the sweep.

Exit: 0 ok; 1 a worker failed (its last stderr line); 2 bad arguments or S3 refused (one line);
3 not available on this host: an endpoint is given and boto3 is not installed (one line).
"""

from __future__ import annotations

import argparse
import json
import operator
import os
import random
import subprocess
import sys
import time
from array import array

BATCH, FEATURES, HIDDEN = 4, 128, 512  #: one request's input: BATCH x FEATURES (float32)
INPUT_BYTES = BATCH * FEATURES * 4
BOTO3_MISSING = "not available on this host: boto3 is not installed (install python3-boto3)"


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
    return session.client(
        "s3",
        endpoint_url=args.endpoint_url,
        region_name=session.region_name or "us-east-1",
        config=Config(retries={"max_attempts": 1}, connect_timeout=5),
    )


def _keys(args: argparse.Namespace) -> list[str]:
    # the shape is in the name: inputs of another shape (an older worker's) are never read
    return [f"{args.prefix}/input-{BATCH}x{FEATURES}-{i:03d}.f32" for i in range(args.inputs)]


def _inputs(seed: int, count: int) -> list[array]:
    """count seeded inputs, each BATCH x FEATURES float32 values (row-major)."""
    rng = random.Random(seed)
    return [
        array("f", [rng.gauss(0.0, 1.0) for _ in range(BATCH * FEATURES)]) for _ in range(count)
    ]


def stage_inputs(args: argparse.Namespace) -> None:
    """Put the inputs in the bucket once (untimed); workers only read them."""
    from botocore.exceptions import ClientError

    s3 = _s3(args)
    try:
        s3.head_bucket(Bucket=args.bucket)
    except ClientError:
        s3.create_bucket(Bucket=args.bucket)
    listed = s3.list_objects_v2(Bucket=args.bucket, Prefix=f"{args.prefix}/")
    have = {o["Key"] for o in listed.get("Contents", [])}
    for key, data in zip(_keys(args), _inputs(1, args.inputs)):
        if key not in have:
            s3.put_object(Bucket=args.bucket, Key=key, Body=data.tobytes())


def _weights(rng: random.Random, rows: int, cols: int) -> list[list[float]]:
    """rows vectors of cols weights (He-scaled, so ReLU passes keep their magnitude)."""
    scale = (2.0 / cols) ** 0.5
    return [[rng.gauss(0.0, scale) for _ in range(cols)] for _ in range(rows)]


def _rows(flat: array) -> list[list[float]]:
    return [list(flat[b * FEATURES : (b + 1) * FEATURES]) for b in range(BATCH)]


def mlp(
    x: list[list[float]], w1: list[list[float]], w2: list[list[float]], layers: int
) -> list[list[float]]:
    """``layers`` passes of relu(x @ W1) @ W2; w1 holds W1's columns, w2 W2's."""
    mul = operator.mul
    for _ in range(layers):
        h = [[max(0.0, sum(map(mul, row, col))) for col in w1] for row in x]
        x = [[sum(map(mul, row, col)) for col in w2] for row in h]
    return x


def child(args: argparse.Namespace) -> int:
    """One worker: R requests, one JSON line per request on stdout."""
    if args.cpu_list:
        os.sched_setaffinity(0, {int(c) for c in args.cpu_list.split(",")})
    rng = random.Random(0)
    w1 = _weights(rng, HIDDEN, FEATURES)
    w2 = _weights(rng, FEATURES, HIDDEN)
    s3 = _s3(args) if args.endpoint_url else None
    keys = _keys(args)
    local = _inputs(1, args.inputs)
    for i in range(args.warmup + args.requests):
        t0 = time.perf_counter()
        if s3 is not None:
            key = keys[i % len(keys)]
            body = s3.get_object(Bucket=args.bucket, Key=key)["Body"].read()
            if len(body) != INPUT_BYTES:
                print(
                    f"platform_worker: s3://{args.bucket}/{key}: {len(body)} bytes; expected "
                    f"{INPUT_BYTES} ({BATCH}x{FEATURES} float32)",
                    file=sys.stderr,
                )
                return 1
            flat = array("f")
            flat.frombytes(body)
        else:
            flat = local[i % args.inputs]
        t1 = time.perf_counter()
        y = mlp(_rows(flat), w1, w2, args.layers)  # the CPU-bound part
        t2 = time.perf_counter()
        if i >= args.warmup:
            check = sum(abs(v) for row in y for v in row) / (BATCH * FEATURES)
            print(
                json.dumps(
                    {
                        "i": i - args.warmup,
                        "t_start": time.time() - (t2 - t0),
                        "latency_ms": (t2 - t0) * 1e3,
                        "s3_ms": (t1 - t0) * 1e3,
                        "check": check,
                    }
                ),
                flush=True,
            )
    return 0


def _interpreter() -> list[str]:
    """This interpreter with the flags it runs under (-I, -S), for the worker children."""
    flags = ["-I"] if sys.flags.isolated else []
    if sys.flags.no_site:
        flags.append("-S")
    return [sys.executable, *flags]


def parent(args: argparse.Namespace) -> int:
    if args.endpoint_url:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            stage_inputs(args)
        except (BotoCoreError, ClientError) as exc:
            print(
                f"platform_worker: S3 endpoint {args.endpoint_url}: {type(exc).__name__}: "
                f"{exc}".splitlines()[0],
                file=sys.stderr,
            )
            return 2
    cpus = sorted(os.sched_getaffinity(0))
    procs = []
    base = [*_interpreter(), os.path.abspath(__file__), "--child", *_forward(args)]
    for w in range(args.workers):
        argv = list(base)
        if args.pinned:
            argv += ["--cpu-list", str(cpus[w % len(cpus)])]
        procs.append(
            subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )
    latencies, s3_ms, starts, ends, failed = [], [], [], [], ""
    for w, proc in enumerate(procs):
        out, err = proc.communicate()
        if proc.returncode != 0:
            failed = (
                failed
                or f"worker {w} exited {proc.returncode}: "
                + (err.strip().splitlines() or ["no output"])[-1]
            )
            continue
        for line in out.splitlines():
            rec = json.loads(line)
            latencies.append(rec["latency_ms"])
            s3_ms.append(rec["s3_ms"])
            starts.append(rec["t_start"])
            ends.append(rec["t_start"] + rec["latency_ms"] / 1e3)
            print(
                json.dumps(
                    {
                        "type": "metric",
                        "name": "request_latency",
                        "value": rec["latency_ms"],
                        "unit": "ms",
                        "worker": w,
                        "request": rec["i"],
                    }
                )
            )
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
        print(
            json.dumps(
                {
                    "type": "metric",
                    "name": "s3_latency_p95",
                    "value": _percentile(s3_ms, 95),
                    "unit": "ms",
                    **dims,
                }
            )
        )
    return 0


def _forward(args: argparse.Namespace) -> list[str]:
    out = [
        "--requests",
        str(args.requests),
        "--warmup",
        str(args.warmup),
        "--layers",
        str(args.layers),
        "--inputs",
        str(args.inputs),
        "--prefix",
        args.prefix,
    ]
    for flag in ("endpoint_url", "bucket", "profile", "aws_config", "aws_credentials"):
        value = getattr(args, flag)
        if value:
            out += [f"--{flag.replace('_', '-')}", value]
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="platform_worker",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--requests", type=int, default=20)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--layers", type=int, default=4, help="MLP passes per request")
    p.add_argument(
        "--pinned",
        type=int,
        choices=[0, 1],
        default=0,
        help="1: pin each worker to its own CPU (a sweep parameter)",
    )
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
    if args.workers < 1 or args.requests < 1 or args.layers < 1 or args.inputs < 1:
        print(
            "platform_worker: --workers, --requests, --layers and --inputs must be at least 1",
            file=sys.stderr,
        )
        return 2
    if args.endpoint_url:
        try:
            import boto3  # noqa: F401 - the distribution's python3-boto3 (with botocore)
        except ImportError:
            print(f"platform_worker: {BOTO3_MISSING}", file=sys.stderr)
            return 3
    return child(args) if args.child else parent(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
