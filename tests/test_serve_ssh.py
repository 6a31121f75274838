"""A serving point on an SSH host (a netns sshd host): the llama.cpp server runs on the host
through its agent, listening on the host's address, pinned to CPUs from the host's facts; the
load generator runs on the controller; the server-side sampler runs on the host; every server
PID is gone afterwards, also when the server never becomes ready."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from socketlab.cli import main
from socketlab.cpulist import parse_cpulist
from socketlab.serve.requests_store import load_requests
from socketlab.store import Store, store_path
from tests.support.campaign import stored, write_spec
from tests.support.procs import alive, wait_for
from tests.support.tiny_gguf import write_tiny_gguf

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(
        importlib.util.find_spec("llama_cpp") is None,
        reason="llama-cpp-python[server] is not installed (the 'serve' extra)",
    ),
]

LLAMA = [
    "{{ vars.serve_python }}",
    "-m",
    "llama_cpp.server",
    "--model",
    "{{ vars.serve_model }}",
    "--host",
    "{address}",
    "--port",
    "{port}",
    "--n_ctx",
    "512",
    "--interrupt_requests",
    "False",
]
NEVER_READY = ["/usr/bin/python3", "-c", "import time; time.sleep(120)", "{port}"]


def test_serving_point_on_an_ssh_host(ssh_pool, tmp_path):
    host = ssh_pool.hosts[1]
    model = write_tiny_gguf(tmp_path / "tiny-llama.gguf")
    extra = {
        h.name: {
            "socketlab_workroot": str(tmp_path / "work"),
            "serve_python": sys.executable,
            "serve_model": str(model),
        }
        for h in ssh_pool.hosts
    }
    inv = ssh_pool.inventory(tmp_path / "hosts.yml", group="testhosts", extra=extra)
    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "campaign": "serve-ssh",
            "hosts": {"group": "testhosts"},
            "experiments": [
                {
                    "name": "llama",
                    "kind": "serving",
                    "timeout_s": 240,
                    "serving": {
                        "arms": [{"name": "all", "placement": "all", "command": LLAMA}],
                        "baseline": "all",
                        "load": {"concurrency": [2]},
                        "prompts": "synthetic",
                        "input_tokens": 16,
                        "output_tokens": 8,
                        "requests": 4,
                        "warmup_requests": 1,
                        "ready_timeout_s": 60,
                        "request": {"temperature": 0.8, "seed": 1},
                        "suppress_token_ids": "2-258",
                    },
                },
                {
                    "name": "dead",
                    "kind": "serving",
                    "timeout_s": 60,
                    "serving": {
                        "arms": [{"name": "dead", "placement": "all", "command": NEVER_READY}],
                        "load": {"concurrency": [1]},
                        "requests": 1,
                        "ready_timeout_s": 3,
                    },
                },
            ],
        },
    )
    results = tmp_path / "results"
    assert (
        main(
            [
                "run",
                str(spec),
                "--results",
                str(results),
                "--inventory",
                str(inv),
                "--hosts",
                host.name,
                "--plain",
            ]
        )
        == 1
    )  # the dead arm fails
    runs = {r.experiment: r for r in stored(results, "serve-ssh").values()}
    assert set(runs) == {"llama", "dead"}
    ok, dead = runs["llama"], runs["dead"]
    assert ok.status == "ok", ok.reason
    assert ok.host == host.name and ok.extra["client_on"] == "controller"
    # the server listened on the netns host's address: only a server in that namespace can
    assert ok.extra["ready_url"].startswith(f"http://{host.address}:")
    facts_cpus = set(parse_cpulist(ok.extra["server_cpus"]))
    seen = set()
    for cpus in ok.extra["server_affinity"]:
        seen |= set(parse_cpulist(cpus))
    assert seen == facts_cpus  # threads' affinity as the host's /proc reports it
    assert ok.extra["server_pids"] and ok.extra["server_pids_left"] == []
    # the netns host shares this kernel's PID namespace: every server PID is gone
    for pid in ok.extra["server_pids"] + dead.extra["server_pids"]:
        wait_for(lambda p=pid: not alive(p), 5, f"server PID {pid} to be gone")
    assert "dram_bytes_per_output_token" in ok.extra  # not measured here: the reason
    assert "controller" in ok.extra["dram_bytes_per_output_token"]
    with Store(store_path("serve-ssh", results), create=False) as store:
        frame = store.metrics_frame("serve-ssh")
    mine = frame[frame.run_key == ok.run_key]
    assert (mine.metric == "peak_pss_bytes").any() and (mine.metric == "server_cpu_s").any()
    assert mine[mine.metric == "peak_pss_bytes"].value.min() > 1_000_000  # a real server tree
    assert (Path(ok.raw_dir) / "server.log").stat().st_size > 0  # fetched from the host
    levels = load_requests(store_path("serve-ssh", results), ok.run_key)
    [(key, records)] = levels.items()
    measured = [r for r in records if r.phase == "measured"]
    assert key[1] == "c2" and len(measured) == 4
    assert all(r.status == "ok" and len(r.events) >= 2 for r in measured), measured
    assert dead.status == "failed" and "never ready" in dead.reason
    assert dead.extra["server_pids_left"] == []


def test_agent_stops_what_it_spawned_by_pid(ssh_pool, tmp_path):
    from socketlab.execute.ssh import SshExecutor
    from socketlab.inventory import load_inventory

    [host] = [
        h
        for h in load_inventory(ssh_pool.inventory(tmp_path / "hosts.yml"))
        if h.name == ssh_pool.hosts[0].name
    ]
    ex = SshExecutor(host, workroot=str(tmp_path / "work"))
    ex.connect()
    try:
        ex.install_tools(tmp_path / "scratch")
        bg = tmp_path / "bg.pid"
        argv = ["sh", "-c", f"setsid sleep 60 & echo $! > {bg}; exec sleep 60"]
        pid = ex.spawn(argv, cpus=[0], log=str(tmp_path / "spawn.log"))
        wait_for(lambda: bg.exists() and bg.read_text().strip(), 5, "the detached child")
        child = int(bg.read_text())
        state = ex.tree(pid)
        assert state["exit_code"] is None and child in state["pids"]
        assert set(state["affinity"].values()) == {"0"}
        stopped = ex.stop_spawned(pid, grace_s=2)  # group and the child that left it
        assert stopped["left"] == [] and {pid, child} <= set(stopped["seen"])
        assert not alive(pid) and not alive(child)
        # what is still running when the orchestrator goes away is stopped by the agent
        again = ex.spawn(["sleep", "60"], log=str(tmp_path / "spawn2.log"))
        assert alive(again)
    finally:
        ex.close()
    wait_for(lambda: not alive(again), 15, f"PID {again} to be stopped by the exiting agent")
