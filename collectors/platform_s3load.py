"""One S3 client's read or write throughput, for the aggregate of N simultaneous clients.

``python3 -I platform_s3load.py --endpoint-url URL --profile P --bucket B --prefix X
--direction read|write --size-mib 8 --objects 4 --group hosts`` runs on a host: the stdlib and
boto3, which is the distribution's package there (python3-boto3, in the system site-packages:
run it with ``-I``, not ``-S``); Python 3.9 and later. Clients on N hosts start together (the
spec's ``together``); each prints the bytes it moved and its own start and end (unix seconds),
so the aggregate is sum(bytes) / (last end - first start) over the group
(socketlab.platform.tables), not a sum of per-client rates that may not have overlapped.

Reads fetch objects the client wrote under its prefix; a read finding none writes them first
(untimed). Exit: 0 ok; 2 the endpoint refused, the profile is unknown or the bucket is not
usable (one line naming the endpoint or profile); 3 not available on this host: boto3 is not
installed (one line).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

BOTO3_MISSING = "not available on this host: boto3 is not installed (install python3-boto3)"


def _emit(name: str, value: float, unit: str, **dims) -> None:
    print(json.dumps({"type": "metric", "name": name, "value": value, "unit": unit, **dims}))


def _client(args: argparse.Namespace):
    import boto3

    session = boto3.Session(profile_name=args.profile or None)
    from botocore.config import Config

    # no retries: an endpoint that refuses must fail the point now, with its reason
    config = Config(
        retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=5, read_timeout=60
    )
    return session.client(
        "s3",
        endpoint_url=args.endpoint_url or None,
        config=config,
        region_name=args.region or session.region_name or "us-east-1",
    )


def run(args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError, ProfileNotFound

    try:
        s3 = _client(args)
    except ProfileNotFound:
        print(f"platform_s3load: --profile {args.profile}: no such AWS profile", file=sys.stderr)
        return 2
    size = int(args.size_mib * 2**20)
    keys = [f"{args.prefix}/obj-{i:04d}" for i in range(args.objects)]
    body = os.urandom(min(size, 2**20)) * (size // min(size, 2**20) or 1)
    try:
        try:
            s3.head_bucket(Bucket=args.bucket)
        except ClientError:
            s3.create_bucket(Bucket=args.bucket)
        if args.direction == "read":
            listed = s3.list_objects_v2(Bucket=args.bucket, Prefix=f"{args.prefix}/")
            have = {o["Key"] for o in listed.get("Contents", [])}
            for key in keys:
                if key not in have:
                    s3.put_object(Bucket=args.bucket, Key=key, Body=body)
        moved = 0
        t_start = time.time()
        for key in keys:
            if args.direction == "write":
                s3.put_object(Bucket=args.bucket, Key=key, Body=body)
                moved += len(body)
            else:
                moved += len(s3.get_object(Bucket=args.bucket, Key=key)["Body"].read())
        t_end = time.time()
    except (BotoCoreError, ClientError) as exc:
        where = args.endpoint_url or "the profile's endpoint"
        print(
            f"platform_s3load: S3 endpoint {where}: {type(exc).__name__}: {exc}".splitlines()[0],
            file=sys.stderr,
        )
        return 2
    dims = {"direction": args.direction, "group": args.group}
    seconds = max(t_end - t_start, 1e-9)
    _emit("bytes", float(moved), "B", **dims)
    _emit("t_start", t_start, "s", **dims)
    _emit("t_end", t_end, "s", **dims)
    _emit("client_throughput", moved / 2**20 / seconds, "MiB/s", **dims)
    return 0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="platform_s3load", description=__doc__)
    p.add_argument("--endpoint-url", default="", help="AWS-compatible endpoint (default: AWS's)")
    p.add_argument("--profile", default="", help="AWS profile (credentials, region)")
    p.add_argument("--region", default="")
    p.add_argument("--aws-config", default="", help="AWS config file (AWS_CONFIG_FILE)")
    p.add_argument(
        "--aws-credentials", default="", help="AWS credentials file (AWS_SHARED_CREDENTIALS_FILE)"
    )
    p.add_argument("--bucket", required=True)
    p.add_argument("--prefix", required=True, help="this client's key prefix (e.g. its host)")
    p.add_argument("--direction", required=True, choices=["read", "write"])
    p.add_argument("--size-mib", type=float, default=8.0)
    p.add_argument("--objects", type=int, default=4)
    p.add_argument("--group", default="", help="the simultaneous group, stored as a dimension")
    args = p.parse_args(argv)
    try:
        import boto3  # noqa: F401 - the distribution's python3-boto3 (with botocore)
    except ImportError:
        print(f"platform_s3load: {BOTO3_MISSING}", file=sys.stderr)
        return 3
    # boto3 reads these when the session is made; empty means "the usual places"
    if args.aws_config:
        os.environ["AWS_CONFIG_FILE"] = args.aws_config
    if args.aws_credentials:
        os.environ["AWS_SHARED_CREDENTIALS_FILE"] = args.aws_credentials
    return run(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
