#!/usr/bin/env python3
"""Package and DRAM energy while a run runs, from the RAPL powercap zones.

    rapl_power.py start --out DIR [--cpus LIST] [--interval 1]
    rapl_power.py stop --out DIR

Stdlib only (runs on the target). Samples ``energy_uj`` of every zone under
/sys/class/powercap/intel-rapl:* (names ``package-N`` and ``dram``; AMD's ``amd-rapl`` zones too
where the kernel exposes them) each interval, with ``max_energy_range_uj`` so a reader can undo
the counter's wraparound. socketlab.parse.collectors.rapl_power turns the samples into
package_power and dram_power (W). ``--cpus`` is accepted for the contract and ignored: RAPL
counts per package. Where there is no powercap RAPL zone (a VM), or energy_uj is not readable
(root-only since Linux 5.10), ``start`` writes one ``{"unsupported": ...}`` record.
"""

from __future__ import annotations

import glob
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _collector  # noqa: E402

NAME = "rapl_power"
ROOT = os.environ.get("SOCKETLAB_POWERCAP", "/sys/class/powercap")


def zones() -> list[str]:
    found = []
    for pattern in ("intel-rapl:*", "amd-rapl:*"):
        found += [
            p
            for p in glob.glob(os.path.join(ROOT, pattern))
            if os.path.exists(os.path.join(p, "energy_uj"))
        ]
    return sorted(found)


def _read(path: str) -> str:
    with open(path) as fh:
        return fh.read().strip()


def unsupported(args) -> str | None:
    found = zones()
    if not found:
        return f"no RAPL powercap zones ({ROOT}/intel-rapl:* absent)"
    try:
        int(_read(os.path.join(found[0], "energy_uj")))
    except (OSError, ValueError) as exc:
        return f"{found[0]}/energy_uj not readable: {getattr(exc, 'strerror', exc)}"
    return None


def sample(paths: list[str]) -> dict:
    out = {}
    for p in paths:
        try:
            out[os.path.basename(p)] = {
                "name": _read(os.path.join(p, "name")),
                "energy_uj": int(_read(os.path.join(p, "energy_uj"))),
                "max_energy_range_uj": int(_read(os.path.join(p, "max_energy_range_uj"))),
            }
        except (OSError, ValueError):
            continue
    return out


def loop(ctx) -> None:
    paths = zones()
    while True:
        ctx.write({"zones": sample(paths)})
        if not ctx.sleep(ctx.interval):
            break
    ctx.write({"zones": sample(paths)})  # closes the last interval


if __name__ == "__main__":
    sys.exit(_collector.run(sys.argv[1:], NAME, loop, unsupported, __doc__))
