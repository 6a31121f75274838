"""iperf3 between two hosts, one side each (stdlib only; runs on the host).

A two-host point of experiments/platform.yaml: both hosts of a pair run this at the same moment
(the spec's `together`), one as ``server`` and one as ``client``:

- server: starts ``iperf3 -s -1`` (one test, then it exits) in its own process group and waits
  for it; past ``--wait`` seconds it stops that group by its PID. Prints the server's PID and
  how it ended, so the record shows nothing was left running.
- client: runs ``iperf3 -c PEER -P STREAMS -t SECONDS -J``, retrying while the server is not
  listening yet, and prints the received throughput as a JSON-lines metric.

Exit: 0 ok; 1 iperf3 failed; 2 bad arguments (one line); 3 iperf3 not installed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time


def _emit(name: str, value: float, unit: str, **dims) -> None:
    print(json.dumps({"type": "metric", "name": name, "value": value, "unit": unit, **dims}))


def _stop_group(proc: subprocess.Popen) -> str:
    if proc.poll() is not None:
        return f"exited {proc.returncode}"
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=5)
        return "stopped by SIGTERM"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return "stopped by SIGKILL"


def server(args: argparse.Namespace) -> int:
    argv = ["iperf3", "-s", "-1", "-p", str(args.port), "-J"]
    if args.bind:
        argv += ["-B", args.bind]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=args.wait)
        how = f"exited {proc.returncode}"
    except subprocess.TimeoutExpired:
        how = _stop_group(proc)
        out, err = proc.communicate()
    finally:
        if proc.poll() is None:
            how = _stop_group(proc)
    print(json.dumps({"type": "meta", "role": "server", "pid": proc.pid, "ended": how}))
    _emit("server_served", 1.0 if proc.returncode == 0 else 0.0, "bool", role="server")
    if proc.returncode != 0 and "stopped" in how:
        print(
            f"iperf3 server: no client finished within {args.wait:g} s ({how}, PID {proc.pid})",
            file=sys.stderr,
        )
    return 0


def client(args: argparse.Namespace) -> int:
    if not args.peer:
        print(
            "platform_iperf: --peer is required for the client (the server host's address)",
            file=sys.stderr,
        )
        return 2
    argv = [
        "iperf3",
        "-c",
        args.peer,
        "-p",
        str(args.port),
        "-P",
        str(args.streams),
        "-t",
        str(args.seconds),
        "-J",
    ]
    deadline = time.monotonic() + args.connect_wait
    while True:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=args.seconds + 60)
        try:
            report = json.loads(proc.stdout)
        except ValueError:
            report = {"error": proc.stderr.strip() or "no JSON from iperf3"}
        error = report.get("error")
        if not error and "sum_received" not in report.get("end", {}):
            # iperf3 3.9 (Debian 11, Amazon Linux 2023) with -J: a connect that fails prints
            # JSON with an empty "end" and no "error"; its reason goes to stderr
            lines = proc.stderr.strip().splitlines()
            error = lines[-1] if lines else f"iperf3 exited {proc.returncode} with no results"
        if not error:
            break
        # the server may not listen yet: it starts at the same moment as we do. Not connected
        # is what every version says then (3.9: "unable to send control message: Bad file
        # descriptor"; later: "unable to connect to server: Connection refused")
        connected = (report.get("start") or {}).get("connected")
        if connected or not ("refused" in error or "unable to" in error):
            break
        if time.monotonic() > deadline:
            break
        time.sleep(0.3)
    if error:
        print(f"iperf3 client to {args.peer}:{args.port}: {error}", file=sys.stderr)
        return 1
    end = report["end"]
    received = end["sum_received"]["bits_per_second"] / 1e9
    sent = end["sum_sent"]
    _emit("throughput", received, "Gbit/s", streams=args.streams, peer=args.peer, role="client")
    _emit(
        "retransmits",
        float(sent.get("retransmits", 0)),
        "1",
        streams=args.streams,
        peer=args.peer,
        role="client",
    )
    return 0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="platform_iperf", description=__doc__)
    p.add_argument("--role", required=True, choices=["server", "client"])
    p.add_argument("--peer", default="", help="client: the server host's address")
    p.add_argument("--bind", default="", help="server: listen on this address only")
    p.add_argument("--port", type=int, default=5201)
    p.add_argument("--streams", type=int, default=1)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--wait", type=float, default=120.0, help="server: longest wait for a client")
    p.add_argument("--connect-wait", type=float, default=20.0)
    args = p.parse_args(argv)
    if shutil.which("iperf3") is None:
        print("not available on this host: iperf3 is not installed", file=sys.stderr)
        return 3
    return server(args) if args.role == "server" else client(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
