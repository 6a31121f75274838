"""The platform report's arithmetic with known numbers, and the `ethtool -l` reader."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from socketlab.platform.tables import Data, host_vs_guest, network, render, s3_aggregates

REPO = Path(__file__).resolve().parents[1]


def _netfacts():
    spec = importlib.util.spec_from_file_location(
        "netfacts", REPO / "collectors" / "platform_netfacts.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: the format of `ethtool -l` (ethtool 6.1) on a single-queue virtio-net guest, as the seed
#: reports it ("Combined: 1"); the pre-set maximum differs from the current setting on purpose
ETHTOOL_L = """Channel parameters for eth0:
Pre-set maximums:
RX:\t\tn/a
TX:\t\tn/a
Other:\t\tn/a
Combined:\t4
Current hardware settings:
RX:\t\tn/a
TX:\t\tn/a
Other:\t\tn/a
Combined:\t1
"""


def test_ethtool_current_combined_not_the_maximum():
    assert _netfacts().combined_channels(ETHTOOL_L) == 1
    assert _netfacts().combined_channels("no channel info") is None


def _data() -> Data:
    data = Data(
        {"h0": "host", "h1": "host", "g0": "guest", "g1": "guest"}, {"g0": "h0", "g1": "h1"}
    )
    put = data.values
    for m, v in (("h0", 1000.0), ("g0", 990.0), ("h1", 1000.0), ("g1", 500.0)):
        for rep in range(3):
            put[("sysbench-cpu", "events_per_second")].append(
                (m, {"threads": 2}, {}, rep, v + rep, "k")
            )
    # two clients per tier; the guests' spans overlap only partly
    s3 = {"h0": (0.0, 1.0), "h1": (0.0, 1.0), "g0": (10.0, 12.0), "g1": (11.0, 14.0)}
    for m, (t0, t1) in s3.items():
        dims = {"direction": "read", "group": data.tiers[m]}
        for name, v in (("bytes", 2**20 * 100), ("t_start", t0), ("t_end", t1)):
            put[("s3", name)].append((m, {"direction": "read"}, dims, 0, v, "k"))
    for m, v in (("h0", 10.0), ("g0", 6.0)):
        put[("iperf3", "throughput")].append((m, {"streams": 4}, {}, 0, v, "k"))
    return data


def test_ratios_pair_each_guest_with_its_own_host():
    rows = host_vs_guest(_data())
    assert [r[2:] for r in rows] == [
        ["g0", "h0", "991.0", "1,001.0", "0.990"],
        ["g1", "h1", "501.0", "1,001.0", "0.500"],
    ]


def test_s3_aggregate_is_bytes_over_the_groups_span():
    agg = s3_aggregates(_data())
    assert agg[("host", "read")] == [200.0]  # 200 MiB in 1 s
    assert agg[("guest", "read")] == [50.0]  # 200 MiB from t=10 to t=14, not 100/2 + 100/3


def test_network_rows_by_streams():
    assert network(_data()) == [["4", "10.00", "6.00", "0.600"]]


def test_a_point_not_available_on_a_host_is_listed_with_its_reason():
    """A host tool's exit 3 (no boto3 on that host) is a row with the reason, not a gap."""
    data = _data()
    assert "did not run ok" not in render("platform", data)
    why = (
        "exit code 3 (accepted: 0): platform_s3load: not available on this host: boto3 is "
        "not installed (install python3-boto3)"
    )
    data.not_ok.append(("g1", "s3", {"direction": "read", "objects": 2}, "failed", why))
    text = render("platform", data)
    assert "## Points that did not run ok" in text
    assert f"| g1 | s3 | direction=read, objects=2 | failed | {why} |" in text
