"""`together` with `adaptive` in one experiment: the group climbs one ladder.

Two sshd hosts in network namespaces run an upward sweep at the same moment (`together`) with a
stop rule (`adaptive`). Only one host's metric grows, so a decision per host would stop that
host's ladder and leave the other climbing alone into a barrier its peer abandoned (its next
point fails). Decided over the group (every host's step stored, pooled, one decision), both
stop at the same step: no point fails, no higher step runs, both hosts' decisions say why.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from socketlab.store import Store, store_path
from tests.support.campaign import PY, write_spec

pytestmark = pytest.mark.netns

#: x = 1 on every host but argv[3], where x = n * n (and whose step 2 is slower: its peer
#: must wait for its runs to be stored before deciding, not climb on to step 3 alone)
GROWS = (
    "import json, sys, time; n, host, grows = int(sys.argv[1]), sys.argv[2], sys.argv[3]; "
    "x = n * n if host == grows else 1; time.sleep(0.5 if host == grows and n == 2 else 0); "
    "print(json.dumps({'type': 'metric', 'name': 'x', 'value': x, 'unit': '1'})); "
    "sys.exit(3 if sys.argv[4] == 'fail' and host == grows and n == 2 else 0)"
)


def climb(
    ssh_pool, tmp_path, campaign: str, mode: str, ns: list[int], above: float, repetitions: int
) -> tuple[list[str], object, object]:
    """The two-host group ladder of GROWS (mode "ok" or "fail" on the second host): the argv
    of its run, the first run's result and the results folder."""
    h0, h1 = ssh_pool.hosts[:2]
    work = {"socketlab_workroot": str(tmp_path / "work")}
    inventory = ssh_pool.inventory(tmp_path / "hosts.yml", extra={h.name: work for h in (h0, h1)})
    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "campaign": campaign,
            "hosts": {"group": "testhosts"},
            "defaults": {"timeout_s": 60, "repetitions": repetitions},
            "experiments": [
                {
                    "name": "climb",
                    "command": [PY, "-c", GROWS, "{{ n }}", "{{ host }}", h1.name, mode],
                    "sweep": {"matrix": {"n": ns}},
                    "metrics": {"parser": "jsonl"},
                    "sanity": {"required_metrics": ["x"]},
                    "together": "pair",
                    "adaptive": {"param": "n", "stop": [{"metric": "x", "above": above}]},
                }
            ],
        },
    )
    results = tmp_path / "results"
    argv = [
        sys.executable,
        "-m",
        "socketlab.cli",
        "run",
        str(spec),
        "--results",
        str(results),
        "--inventory",
        str(inventory),
        "--plain",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    print(done.stderr)
    return argv, done, results


def test_the_group_stops_its_ladder_at_one_step_on_every_host(ssh_pool, tmp_path):
    h0, h1 = ssh_pool.hosts[:2]
    argv, done, results = climb(ssh_pool, tmp_path, "group-ladder", "ok", [1, 2, 3, 4], 1.5, 2)
    with Store(store_path("group-ladder", results), create=False) as store:
        runs = sorted(
            (r.host, r.params["n"], r.repetition, r.status) for r in store.runs("group-ladder")
        )
        stops = {k: json.loads(v) for k, v in store.meta_items("adaptive:").items()}
    print(runs, stops)
    # step 2 pooled: x = [1, 1, 4, 4], median 2.5 > 1.5 x 1: both hosts stop there
    assert runs == [
        (h, n, rep, "ok") for h in sorted((h0.name, h1.name)) for n in (1, 2) for rep in (0, 1)
    ]
    assert done.returncode == 0, done.stderr
    assert sorted((k.split(":")[1], v["value"], v["kind"]) for k, v in stops.items()) == [
        (h0.name, 2.0, "breach"),
        (h1.name, 2.0, "breach"),
    ]
    assert all("x 2.5 > 1.5 x 1 = 1.5 at n=2" in v["reason"] for v in stops.values()), stops

    again = subprocess.run(argv, capture_output=True, text=True, timeout=300)  # resume: decided
    assert again.returncode == 0, again.stderr
    with Store(store_path("group-ladder", results), create=False) as store:
        assert len(store.runs("group-ladder")) == len(runs)


def test_a_failed_step_on_one_host_stops_the_whole_group_there(ssh_pool, tmp_path):
    """h1's step 2 fails: h0's own runs were fine, but the group's ladder stops at step 2 on
    both (kind "failed", naming h1); h0 does not climb into a barrier h1 abandoned."""
    h0, h1 = ssh_pool.hosts[:2]
    _, _, results = climb(ssh_pool, tmp_path, "group-fails", "fail", [1, 2, 3], 100, 1)
    with Store(store_path("group-fails", results), create=False) as store:
        runs = sorted((r.host, r.params["n"], r.status) for r in store.runs("group-fails"))
        stops = {k: json.loads(v) for k, v in store.meta_items("adaptive:").items()}
    print(runs, stops)
    assert runs == [
        (h0.name, 1, "ok"),
        (h0.name, 2, "ok"),
        (h1.name, 1, "ok"),
        (h1.name, 2, "failed"),
    ]
    assert sorted((k.split(":")[1], v["value"], v["kind"]) for k, v in stops.items()) == [
        (h0.name, 2.0, "failed"),
        (h1.name, 2.0, "failed"),
    ]
    assert all(
        f"n=2 did not run ok: {h1.name}: failed: exit code 3" in v["reason"] for v in stops.values()
    ), stops
