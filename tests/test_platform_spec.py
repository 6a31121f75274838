"""experiments/platform.yaml run for real on four pristine hosts (tests/support/pristine.py: their
own Debian bullseye root, python3 3.9, nothing of the controller), moto as S3.

Two "hosts" (h0, h1) get a direct veth link between their namespaces (the "fabric"), the two
"guests" (h2, h3) one of their own (the "overlay"); iperf3 runs over those links. moto's server
listens on this machine's side of every host's veth, so each machine reaches S3 at its gateway
address, as a guest reaches its cloud's endpoint. The hosts start from the image alone: the prep
step installs the suite's tools with the hosts' apt (playbooks/vars/platform-packages.yml:
sysbench, fio, iperf3, ethtool, python3-boto3), the AWS profile is copied onto each host as a
user would, and every command runs with the image's python3 -I. torch is not installed, so the
amx point reads "not available on this host" (stored apart, not a failure). Everything runs on
one 2-core machine, so the numbers mean nothing; the test checks that every point ran and was
stored, and that the report fills the host-vs-guest table with ratios.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from socketlab.store import Store, store_path
from tests.support.moto import MOTO_SERVER, _wait_port, free_port
from tests.support.pristine import pristine_available, pristine_hosts

REPO = Path(__file__).resolve().parents[1]
SPEC = REPO / "experiments" / "platform.yaml"

pytestmark = [
    pytest.mark.root,
    pytest.mark.slow,
    pytest.mark.skipif(pristine_available() is not None, reason=str(pristine_available())),
]
#: where each pristine host keeps the AWS profile the test copies onto it
HOST_AWS = "/home/ec2-user/.aws-spinifex"


def _ip(*argv: str) -> None:
    subprocess.run(["ip", *argv], check=True, capture_output=True, text=True)


@contextlib.contextmanager
def direct_link(tag: str, a, b, net: str, base: int):
    """A veth pair straight between two test hosts' namespaces; yields (addr of a, addr of b)."""
    left, right = f"sf{tag}a", f"sf{tag}b"
    _ip(
        "link",
        "add",
        left,
        "netns",
        a.netns,
        "type",
        "veth",
        "peer",
        "name",
        right,
        "netns",
        b.netns,
    )
    try:
        ends = ((a.netns, left, f"{net}.{base + 1}"), (b.netns, right, f"{net}.{base + 2}"))
        for ns, dev, addr in ends:
            _ip("-n", ns, "addr", "add", f"{addr}/30", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
        yield ends[0][2], ends[1][2]
    finally:  # ours by name (the tag carries our PID); deleting one end removes both
        subprocess.run(["ip", "-n", a.netns, "link", "del", left], capture_output=True)


@contextlib.contextmanager
def moto_on_all(workdir: Path):
    """moto's server on every address of this machine; stopped by its PID."""
    port = free_port()
    log = open(workdir / "moto.log", "wb")  # noqa: SIM115 - kept for the process
    proc = subprocess.Popen(
        [str(MOTO_SERVER), "-H", "0.0.0.0", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        _wait_port("127.0.0.1", port, 60, proc, "moto_server")
        yield port, proc.pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
        log.close()


def write_inventory(path: Path, pool, fabric: dict, s3_port: int) -> Path:
    h0, h1, g0, g1 = pool.hosts
    tiers = {h0: "host", h1: "host", g0: "guest", g1: "guest"}
    peers = {h0: h1, h1: h0, g0: g1, g1: g0}
    hosts_of = {g0: h0, g1: h1}
    groups: dict = {"platform_hosts": {"hosts": {}}, "platform_guests": {"hosts": {}}}
    for m in pool.hosts:
        host_vars = {
            **m.inventory_vars(),  # the image's /usr/bin/python3, ec2-user with sudo
            "socketlab_tier": tiers[m],
            "socketlab_peer": peers[m].name,
            "socketlab_fabric_address": fabric[m.name],
            "socketlab_s3_endpoint": f"http://{pool.gateway}:{s3_port}",
            "socketlab_s3_profile": "spinifex",
            "socketlab_aws_config": f"{HOST_AWS}/config",
            "socketlab_aws_credentials": f"{HOST_AWS}/credentials",
        }
        if m in hosts_of:
            host_vars["socketlab_host"] = hosts_of[m].name
        group = "platform_hosts" if tiers[m] == "host" else "platform_guests"
        groups[group]["hosts"][m.name] = host_vars
    path.write_text(yaml.safe_dump({"all": {"children": groups}}))
    return path


def copy_aws_profile(host) -> None:
    """The profile a user would put on each machine (the hosts can't see the controller's)."""
    script = (
        f"mkdir -p {HOST_AWS} && printf '[profile spinifex]\\nregion = us-east-1\\n' > "
        f"{HOST_AWS}/config && printf '[spinifex]\\naws_access_key_id = testing\\n"
        f"aws_secret_access_key = testing\\n' > {HOST_AWS}/credentials"
    )
    subprocess.run(host.ssh_argv(script), check=True, capture_output=True, timeout=60)


def prep(inv: Path, work: Path) -> subprocess.CompletedProcess:
    """The prep step with the suite's packages (no compilers: the suite builds nothing)."""
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_LOCAL_TEMP": str(work / "ansible-tmp"),
        "ANSIBLE_SSH_ARGS": "-o ControlMaster=no",
    }
    return subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            str(inv),
            "playbooks/prepare.yml",
            "-e",
            "@playbooks/vars/platform-packages.yml",
            "-e",
            "host_packages_base=false",
            "-e",
            "socketlab_become=true",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def _orchestrate(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "socketlab.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )


def test_platform_spec_runs_everywhere_and_fills_the_ratio_table(tmp_path):
    tag = str(os.getpid() % 100000)
    net = f"192.168.{os.getpid() % 250}"
    with pristine_hosts(4, tmp_path / "hosts") as pool, moto_on_all(tmp_path) as (port, moto_pid):
        h0, h1, g0, g1 = pool.hosts
        with (
            direct_link(f"{tag}f", h0, h1, net, 0) as (fa, fb),
            direct_link(f"{tag}o", g0, g1, net, 4) as (oa, ob),
        ):
            fabric = {h0.name: fa, h1.name: fb, g0.name: oa, g1.name: ob}
            inv = write_inventory(tmp_path / "hosts.yml", pool, fabric, port)
            for m in pool.hosts:
                copy_aws_profile(m)
            prepared = prep(inv, tmp_path)
            assert prepared.returncode == 0, prepared.stdout[-3000:] + prepared.stderr[-2000:]
            results = tmp_path / "results"
            proc = _orchestrate(
                "run",
                str(SPEC),
                "--inventory",
                str(inv),
                "--results",
                str(results),
                "--profile",
                "quick",
                "--plain",
            )
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
            report = _orchestrate("platform", "report", "platform", "--results", str(results))
            published = _orchestrate("report", "platform", "--results", str(results))
        assert report.returncode == 0, report.stderr
        assert published.returncode == 0, published.stderr
        names = [h.name for h in pool.hosts]
        with Store(store_path("platform", results), create=False) as store:
            runs = store.runs("platform")
            rows = store.metric_rows("platform")
            stops = store.meta_items("adaptive:")
        # every point ran; amx alone can't (no torch on a fresh image): stored apart, with why
        bad = [
            (r.host, r.experiment, r.status, r.reason)
            for r in runs
            if r.status != ("unavailable" if r.experiment == "amx" else "ok")
        ]
        assert runs and not bad, bad
        amx = {r.reason for r in runs if r.experiment == "amx"}
        print(f"amx on a fresh image: {amx}")
        assert len(amx) == 1 and next(iter(amx)).startswith("not available on this host: "), amx
        assert "torch" in next(iter(amx))
        by_run = {r.run_key: r for r in runs}
        have: dict[tuple, list] = {}
        for row in rows:
            r = by_run[row["run_key"]]
            have.setdefault((r.host, r.experiment, row["name"]), []).append(
                ({**r.params, **json.loads(row["dims"])}, row["value"])
            )
        for m in names:
            threads = sorted(
                p["threads"] for p, _ in have[(m, "sysbench-cpu", "events_per_second")]
            )
            assert threads == [1, 2]
            fio = sorted((p["pattern"], p["bs"]) for p, _ in have[(m, "fio", "read_bw")])
            assert fio == [("randread", "4k"), ("read", "1M")]
            for direction in ("read", "write"):
                for metric in ("bytes", "t_start", "t_end"):
                    assert [v for p, v in have[(m, "s3", metric)] if p["direction"] == direction]
            assert have[(m, "netfacts", "virtio")]
            # the quick profile's ladder is workers 1, 2: it stops at 2 by breach or by cap
            workers = sorted(p["workers"] for p, _ in have[(m, "concurrency", "latency_p95")])
            assert workers == [1, 2]
            (stop,) = [json.loads(v) for k, v in stops.items() if f":{m}:concurrency:" in k]
            assert stop["value"] == 2.0 and stop["kind"] in ("breach", "cap"), stop
            print(f"{m}: concurrency sweep {stop['kind']}: {stop['reason']}")
        for client, server in ((h0.name, h1.name), (g0.name, g1.name)):
            streams = sorted(
                p["streams"] for p, v in have[(client, "iperf3", "throughput")] if v > 0
            )
            assert streams == [1, 4]
            assert [v for _, v in have[(server, "iperf3", "server_served")]] == [1.0, 1.0]
        # every iperf3 server was stopped: its PID (printed by the wrapper) is gone on its host
        server_pids = []
        for r in runs:
            if r.experiment == "iperf3":
                for line in (Path(r.raw_dir) / "stdout").read_text().splitlines():
                    if '"role": "server"' in line and '"type": "meta"' in line:
                        server_pids.append((r.host, json.loads(line)["pid"]))
        assert len(server_pids) == 4
        by_name = {m.name: m for m in pool.hosts}
        for host, pid in server_pids:
            left = subprocess.run(
                by_name[host].ssh_argv(f"cat /proc/{pid}/cmdline 2>/dev/null | tr '\\0' ' '"),
                capture_output=True,
                text=True,
                timeout=60,
            ).stdout
            assert "iperf3" not in left, (host, pid, left)
    assert not Path(f"/proc/{moto_pid}").exists() or "moto" not in Path(
        f"/proc/{moto_pid}/cmdline"
    ).read_text(errors="replace")
    # seed 003's cells: not comparable on this hardware, one line per reason (the report
    # groups them), each machine's measured value named under its published cell
    (line,) = [
        x
        for x in published.stdout.splitlines()
        if x.startswith("- not comparable: host is ")
        and "host mulga-01 (" in x
        and "random 4K" not in x
    ]
    assert "published host is Xeon 6543P-B (32 cores) (24)" in line, line
    for m in names:
        assert f"host mulga-01 ({m}): " in line, (m, line)
    text = report.stdout
    print(text)
    for png in ("platform-concurrency.png", "platform-network.png"):
        assert f"![{png[:-4]}]({png})" in text
        assert (results / "platform" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for guest, host in ((g0.name, h0.name), (g1.name, h1.name)):
        for cond in ("threads=1", "threads=2", "pattern/bs=randread/4k", "pattern/bs=read/1M"):
            line = next(x for x in text.splitlines() if f"| {cond} | {guest} | {host} |" in x)
            assert re.search(r"\| \d+\.\d{3} \|$", line), line
    net = [x for x in text.splitlines() if re.match(r"\| (1|4) \| [\d.]+ \| [\d.]+ \| \d", x)]
    assert len(net) == 2, text
    s3 = [
        x
        for x in text.splitlines()
        if re.match(
            r"\| (read|write) \| [\d,.]+ \| [\d,.]+ \| "
            r"\d+\.\d{3} \| 2 / 2 \|$",
            x,
        )
    ]
    assert len(s3) == 2, text
