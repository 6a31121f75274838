#!/usr/bin/env python3
"""Hold a PM QoS CPU latency request (/dev/cpu_dma_latency) for as long as isolation is applied.

Stdlib only; runs on the target host. The kernel honours the request only while the file stays
open, and drops it when the fd closes, so a process has to hold it: deep C-states (C6) flush the
private L2 that the inference working set lives in.

    dma_latency_hold.py start  --pidfile FILE [--value 0] [--device /dev/cpu_dma_latency]
    dma_latency_hold.py run    ...   (foreground; what a systemd unit runs)
    dma_latency_hold.py status --pidfile FILE
    dma_latency_hold.py stop   --pidfile FILE

``start`` daemonizes, writes the PID atomically to FILE once the value is written, and prints
one JSON line. ``stop`` ends the PID in FILE (and only if it is this program). ``status`` prints
``{"running": bool, "pid": ..., "holds": bool, "value": ...}``; ``holds`` checks that the process
really has the device open. Exit codes: 0 ok, 1 failure, 2 usage, 3 device missing or not
writable here ("unsupported on this host").
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import struct
import sys

# Shipped next to this file (roles/dma_latency_holder installs both): pidfile, detach, stop.
# No __pycache__ beside them: restore removes the files isolation added and then their folder.
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _collector import detach, read_pid, ready, stop_pid, write_pidfile  # noqa: E402
from _collector import is_ours as _is_ours_prog  # noqa: E402

PROG = "dma_latency_hold.py"
DEVICE = "/dev/cpu_dma_latency"


def _is_ours(pid: int) -> bool:
    return _is_ours_prog(pid, PROG)


def _holds(pid: int, device: str) -> bool:
    fd_dir = f"/proc/{pid}/fd"
    try:
        for fd in os.listdir(fd_dir):
            with contextlib.suppress(OSError):
                if os.readlink(os.path.join(fd_dir, fd)) == os.path.realpath(device):
                    return True
    except OSError:
        pass
    return False


def status(pidfile: str, device: str = DEVICE) -> dict:
    pid = read_pid(pidfile)
    running = bool(pid) and _is_ours(pid)
    result = {"running": running, "pid": pid if running else None, "pidfile": pidfile}
    result["holds"] = running and _holds(pid, device)
    with contextlib.suppress(OSError), open(device, "rb") as f:
        # Reading the device gives the current aggregate request (s32, µs).
        result["value"] = struct.unpack("i", f.read(4))[0]
    return result


def _unsupported(device: str) -> str | None:
    if not os.path.exists(device):
        return f"{device} does not exist (kernel without PM QoS CPU latency support)"
    if not os.access(device, os.W_OK):
        return f"{device} is not writable by uid {os.geteuid()}"
    return None


def _hold(device: str, value: int, on_ready=None) -> None:
    """Open the device, write the request, keep the fd open until SIGTERM/SIGINT."""
    stop = False

    def on_signal(signum, frame):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    fd = os.open(device, os.O_WRONLY)
    try:
        os.write(fd, struct.pack("i", value))
        if on_ready:
            on_ready()
        while not stop:
            signal.pause()
    finally:
        os.close(fd)


def cmd_start(args) -> int:
    reason = _unsupported(args.device)
    if reason:
        print(json.dumps({"unsupported": reason}))
        return 3
    pid = read_pid(args.pidfile)
    if pid and _is_ours(pid):
        print(json.dumps({"started": False, "pid": pid, "reason": "already running"}))
        return 0
    os.makedirs(os.path.dirname(os.path.abspath(args.pidfile)), exist_ok=True)
    text, ready_fd = detach(workdir="/")
    if ready_fd is None:  # the caller: the holder holds the request, or says why not
        if not text.isdigit():
            print(f"{PROG}: holder failed to start: {text or 'no reason given'}", file=sys.stderr)
            return 1
        print(json.dumps({"started": True, "pid": int(text), "pidfile": args.pidfile}))
        return 0

    def on_hold():
        write_pidfile(args.pidfile)
        ready(ready_fd, str(os.getpid()))

    try:
        _hold(args.device, args.value, on_hold)
    except OSError as exc:
        with contextlib.suppress(OSError):
            ready(ready_fd, f"{args.device}: {exc.strerror}")
    finally:
        if read_pid(args.pidfile) == os.getpid():
            with contextlib.suppress(OSError):
                os.unlink(args.pidfile)
    os._exit(0)


def cmd_run(args) -> int:
    reason = _unsupported(args.device)
    if reason:
        print(json.dumps({"unsupported": reason}))
        return 3
    _hold(args.device, args.value, lambda: write_pidfile(args.pidfile) if args.pidfile else None)
    if args.pidfile and read_pid(args.pidfile) == os.getpid():
        os.unlink(args.pidfile)
    return 0


def cmd_stop(args) -> int:
    pid = read_pid(args.pidfile)
    if not pid or not _is_ours(pid):
        with contextlib.suppress(OSError):
            os.unlink(args.pidfile)
        print(json.dumps({"stopped": None, "reason": "not running"}))
        return 0
    if not stop_pid(pid, PROG):
        print(f"{PROG}: PID {pid} did not stop within 10 s", file=sys.stderr)
        return 1
    with contextlib.suppress(OSError):
        os.unlink(args.pidfile)
    print(json.dumps({"stopped": pid}))
    return 0


def cmd_status(args) -> int:
    print(json.dumps(status(args.pidfile, args.device)))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, func in (
        ("start", cmd_start),
        ("run", cmd_run),
        ("stop", cmd_stop),
        ("status", cmd_status),
    ):
        p = sub.add_parser(name)
        p.add_argument("--pidfile", required=name != "run", default=None)
        p.add_argument("--device", default=DEVICE)
        p.add_argument("--value", type=int, default=0, help="latency request in µs (default 0)")
        p.set_defaults(func=func)
    args = parser.parse_args(argv)
    if args.value < 0:
        parser.error("--value must be >= 0")
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
