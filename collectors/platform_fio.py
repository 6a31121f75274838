"""fio on a file in a folder, never a raw device (stdlib only; runs on the host).

``platform_fio.py --dir DIR --pattern randread|read --bs 4k --size 64M --runtime 5 --iodepth 16``
lays out ``DIR/socketlab-fio-<pid>.dat`` (non-destructive: a new file, removed afterwards), runs
fio with direct I/O where the filesystem allows it, and prints read bandwidth (MiB/s), IOPS and
the 95th percentile completion latency as JSON-lines metrics.

Exit: 0 ok; 1 fio failed; 2 bad arguments (one line: a folder that does not exist, a device);
3 fio not installed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import stat
import subprocess
import sys


def _emit(name: str, value: float, unit: str, **dims) -> None:
    print(json.dumps({"type": "metric", "name": name, "value": value, "unit": unit, **dims}))


def _direct_ok(folder: str) -> bool:
    """tmpfs (and some overlay filesystems) refuse O_DIRECT: fall back to buffered I/O there."""
    probe = os.path.join(folder, f".socketlab-odirect-{os.getpid()}")
    try:
        fd = os.open(probe, os.O_CREAT | os.O_WRONLY | getattr(os, "O_DIRECT", 0), 0o600)
        os.close(fd)
        return True
    except OSError:
        return False
    finally:
        if os.path.exists(probe):
            os.unlink(probe)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="platform_fio", description=__doc__)
    p.add_argument("--dir", required=True, help="an existing folder on the filesystem to test")
    p.add_argument("--pattern", default="randread", choices=["randread", "read"])
    p.add_argument("--bs", default="4k")
    p.add_argument("--size", default="64M")
    p.add_argument("--runtime", type=float, default=5.0)
    p.add_argument("--iodepth", type=int, default=16)
    args = p.parse_args(argv)
    try:
        mode = os.stat(args.dir).st_mode
    except FileNotFoundError:
        print(
            f"platform_fio: --dir {args.dir}: no such folder; expected an existing folder "
            "(fio writes a scratch file there, never to a device)",
            file=sys.stderr,
        )
        return 2
    if stat.S_ISBLK(mode) or stat.S_ISCHR(mode) or not stat.S_ISDIR(mode):
        print(
            f"platform_fio: --dir {args.dir}: not a folder; expected a folder (raw devices "
            "are never tested)",
            file=sys.stderr,
        )
        return 2
    if shutil.which("fio") is None:
        print("not available on this host: fio is not installed", file=sys.stderr)
        return 3
    path = os.path.join(args.dir, f"socketlab-fio-{os.getpid()}.dat")
    direct = _direct_ok(args.dir)
    argv = [
        "fio",
        "--name=socketlab",
        f"--filename={path}",
        f"--rw={args.pattern}",
        f"--bs={args.bs}",
        f"--size={args.size}",
        f"--runtime={args.runtime:g}",
        "--time_based",
        f"--iodepth={args.iodepth}",
        "--ioengine=libaio",
        f"--direct={int(direct)}",
        "--group_reporting",
        "--output-format=json",
    ]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=args.runtime + 300)
    finally:
        if os.path.exists(path):
            os.unlink(path)
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-2:])
        print(f"fio failed (exit {proc.returncode}): {tail}", file=sys.stderr)
        return 1
    job = json.loads(proc.stdout[proc.stdout.index("{") :])["jobs"][0]["read"]
    dims = {"pattern": args.pattern, "bs": args.bs, "iodepth": args.iodepth, "direct": int(direct)}
    _emit("read_bw", job["bw_bytes"] / 2**20, "MiB/s", **dims)
    _emit("read_iops", job["iops"], "1/s", **dims)
    pct = (job.get("clat_ns") or {}).get("percentile") or {}
    if "95.000000" in pct:
        _emit("read_clat_p95", pct["95.000000"] / 1e3, "us", **dims)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
