"""A serving point on a pristine host (tests/support/pristine.py: its own Debian bullseye root,
python3 3.9, nothing of the controller visible): the server runs on the host through its agent
with the image's python3, the load generator runs on the controller, the server-side sampler
(collectors/, copied by the runner) runs on the host, and no server process is left there.

The server is socketlab's scripted OpenAI-compatible endpoint
(src/socketlab/serve/scripted_server.py, stdlib only), copied onto the host as a user copies
their server: on a real host the spec's command is llama.cpp's server
(experiments/serving-tiny.yaml), which this image doesn't have.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from socketlab.cli import main
from socketlab.serve.requests_store import load_requests
from socketlab.store import Store, store_path
from tests.support.campaign import stored, write_spec
from tests.support.pristine import pristine_available, pristine_hosts

REPO = Path(__file__).resolve().parents[1]
SERVER = REPO / "src" / "socketlab" / "serve" / "scripted_server.py"
ON_HOST = "/home/ec2-user/testserver.py"

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(pristine_available() is not None, reason=str(pristine_available())),
]


def test_serving_point_on_a_pristine_host(tmp_path):
    with pristine_hosts(1, tmp_path / "hosts") as pool:
        host = pool.hosts[0]
        with open(SERVER, "rb") as src:  # the user's copy of their server
            subprocess.run(host.ssh_argv(f"cat > {ON_HOST}"), stdin=src, check=True, timeout=60)
        inv = pool.inventory(tmp_path / "hosts.yml", group="testhosts")
        spec = write_spec(
            tmp_path / "spec.yaml",
            {
                "campaign": "serve-pristine",
                "hosts": {"group": "testhosts"},
                "experiments": [
                    {
                        "name": "scripted",
                        "kind": "serving",
                        "timeout_s": 120,
                        "serving": {
                            "arms": [
                                {
                                    "name": "all",
                                    "placement": "all",
                                    "command": [
                                        "python3",
                                        ON_HOST,
                                        "--host",
                                        "{address}",
                                        "--port",
                                        "{port}",
                                        "--first-ms",
                                        "5",
                                        "--every-ms",
                                        "1",
                                    ],
                                }
                            ],
                            "baseline": "all",
                            "load": {"concurrency": [2]},
                            "input_tokens": 16,
                            "output_tokens": 8,
                            "requests": 6,
                            "warmup_requests": 1,
                            "ready_timeout_s": 30,
                        },
                    },
                ],
            },
        )
        results = tmp_path / "results"
        assert (
            main(["run", str(spec), "--results", str(results), "--inventory", str(inv), "--plain"])
            == 0
        )
        (run,) = stored(results, "serve-pristine").values()
        assert run.status == "ok", run.reason
        assert run.extra["client_on"] == "controller"
        assert run.extra["ready_url"].startswith(f"http://{host.address}:")
        # the server's PIDs are the host's (its own PID namespace): none is left there
        assert run.extra["server_pids"] and run.extra["server_pids_left"] == []
        for pid in run.extra["server_pids"]:
            left = subprocess.run(
                host.ssh_argv(f"cat /proc/{pid}/cmdline 2>/dev/null"),
                capture_output=True,
                text=True,
                timeout=60,
            ).stdout
            assert "testserver" not in left, (pid, left)
        with Store(store_path("serve-pristine", results), create=False) as store:
            frame = store.metrics_frame("serve-pristine")
        metrics = set(frame[frame.run_key == run.run_key].metric)
        print(sorted(metrics))
        assert {"median_ttft_ms", "peak_pss_bytes", "server_cpu_s"} <= metrics, metrics
        ttft = frame[(frame.run_key == run.run_key) & (frame.metric == "median_ttft_ms")]
        assert ttft.value.min() >= 5.0  # the server's first-token delay is a floor
        [(key, records)] = load_requests(store_path("serve-pristine", results), run.run_key).items()
        measured = [r for r in records if r.phase == "measured"]
        assert key[1] == "c2" and len(measured) == 6
        assert all(r.status == "ok" and len(r.events) >= 2 for r in measured), measured
