"""The network facts that explain iperf3 numbers (stdlib only; runs on the host).

Per interface other than loopback: MTU, whether its driver is virtio_net, and the number of
combined channels (``ethtool -l``'s "Current hardware settings: Combined"; without ethtool, the
count of rx queues in sysfs, marked ``source: sysfs``). Printed as JSON-lines metrics with the
interface as a dimension; ``--iface`` limits it to one.

Exit: 0 ok (also with no interfaces: one meta line says so); 2 an --iface that does not exist.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys

NET = "/sys/class/net"


def _emit(name: str, value: float, unit: str, **dims) -> None:
    print(json.dumps({"type": "metric", "name": name, "value": value, "unit": unit, **dims}))


def _read(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return None


def _driver(iface: str) -> str:
    link = os.path.join(NET, iface, "device", "driver")
    return os.path.basename(os.readlink(link)) if os.path.islink(link) else "none"


def combined_channels(ethtool_output: str) -> int | None:
    """Combined channels from the 'Current hardware settings' part of `ethtool -l`."""
    current = ethtool_output.split("Current hardware settings:", 1)
    if len(current) < 2:
        return None
    match = re.search(r"Combined:\s+(\d+)", current[1])
    return int(match.group(1)) if match else None


def _queues(iface: str) -> tuple[int | None, str]:
    if shutil.which("ethtool"):
        proc = subprocess.run(["ethtool", "-l", iface], capture_output=True, text=True, timeout=10)
        if proc.returncode == 0:
            count = combined_channels(proc.stdout)
            if count is not None:
                return count, "ethtool"
    try:
        rx = [q for q in os.listdir(os.path.join(NET, iface, "queues")) if q.startswith("rx-")]
    except OSError:
        return None, "none"
    return len(rx), "sysfs"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="platform_netfacts", description=__doc__)
    p.add_argument("--iface", help="only this interface")
    args = p.parse_args(argv)
    names = sorted(os.listdir(NET)) if os.path.isdir(NET) else []
    if args.iface:
        if args.iface not in names:
            print(
                f"platform_netfacts: --iface {args.iface}: no such interface; expected one of "
                f"{', '.join(names) or 'none'}",
                file=sys.stderr,
            )
            return 2
        names = [args.iface]
    names = [n for n in names if n != "lo"]
    if not names:
        print(json.dumps({"type": "meta", "note": "no network interface besides lo"}))
    for iface in names:
        driver = _driver(iface)
        mtu = _read(os.path.join(NET, iface, "mtu"))
        if mtu is not None:
            _emit("mtu", float(mtu), "B", iface=iface, driver=driver)
        _emit("virtio", 1.0 if driver == "virtio_net" else 0.0, "bool", iface=iface, driver=driver)
        count, source = _queues(iface)
        if count is not None:
            _emit("queues_combined", float(count), "1", iface=iface, driver=driver, source=source)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
