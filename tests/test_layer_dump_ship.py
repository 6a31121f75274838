"""Layer dumps are generated on the controller and shipped to hosts (socketlab.execute.dumps):
copied once over SSH, checksum verified, a cut-short copy resumed, a corrupted file caught; and
a spec's `layer_dump:` / `runs_on:` blocks, with their one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from socketlab.errors import HostError, SpecError
from socketlab.execute.dumps import host_links, host_sums, ship_dump
from socketlab.execute.ssh import SshExecutor
from socketlab.inventory import load_inventory
from socketlab.layer.cache import MANIFEST, dump_ref, ensure_dump, manifest
from socketlab.spec.load import load_spec

REPO = Path(__file__).resolve().parents[1]
TINY = dict(shape="tiny", context=32, batch=2, seed=5)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("dump-cache")


@pytest.fixture(scope="module")
def executor(ssh_pool, tmp_path_factory):
    inventory = ssh_pool.inventory(tmp_path_factory.mktemp("inv") / "hosts.yml")
    host = sorted(load_inventory(inventory), key=lambda h: h.name)[0]
    ex = SshExecutor(host, workroot=str(tmp_path_factory.mktemp("work")))
    ex.connect()
    ex.install_tools(tmp_path_factory.mktemp("scratch"))
    ex.lock({"campaign": "test"})
    yield ex
    ex.close()


def test_the_key_is_pure_and_follows_what_the_dump_depends_on():
    a = dump_ref(**TINY)
    assert a == dump_ref(**TINY)
    assert a.key.startswith("tiny-c32-b2-s5-") and a.ctx_repeat == 1
    assert dump_ref(**{**TINY, "seed": 6}).key != a.key
    long = dump_ref("tiny-full", 65536, 2, 1)  # full attention past the cap repeats the KV
    assert (long.context, long.ctx_repeat) == (16384, 4)
    with pytest.raises(Exception, match="no such shape file"):
        dump_ref("nosuch", 8)


@pytest.mark.netns
def test_a_dump_is_copied_once_verified_and_a_cut_copy_resumes(executor, cache):
    ref = dump_ref(**TINY).as_dict()
    local = ensure_dump(ref["shape"], ref["context"], ref["batch"], ref["seed"], cache)
    sums = manifest(local)["files"]
    links = manifest(local)["links"]
    assert links  # the rows' shared weights are symlinks, shipped as symlinks
    target = f"{executor.workdir}/layer-dumps/{ref['key']}"
    how = ship_dump(executor, ref, target, cache=cache)
    print(how)
    assert how.startswith(f"copied {len(sums)} files and {len(links)} links")
    assert host_sums(executor, target) == sums  # every file, byte for byte
    assert host_links(executor, target) == links
    assert ship_dump(executor, ref, target, cache=cache) == "present"  # once per host

    # a copy cut short: the finished folder gone, half the files in .part, one of them torn
    executor.check(["mv", "-T", target, f"{target}.part"])
    executor.check(["rm", "-f", f"{target}.part/{MANIFEST}"])
    names = sorted(sums)
    for name in names[: len(names) // 2]:
        executor.check(["rm", "-f", f"{target}.part/{name}"])
    executor.check(["truncate", "-s", "1", f"{target}.part/{names[-1]}"])
    how = ship_dump(executor, ref, target, cache=cache)
    print(how)
    resent = len(names) // 2 + 1
    assert (
        how.startswith(f"copied {resent} files") and f"{len(names) - resent} already there" in how
    )
    assert host_sums(executor, target) == sums


@pytest.mark.netns
def test_a_file_that_differs_after_the_copy_fails_the_point_with_one_line(
    executor, cache, monkeypatch
):
    ref = dump_ref(**{**TINY, "seed": 7}).as_dict()
    target = f"{executor.workdir}/layer-dumps/{ref['key']}"
    real_put = executor.put

    def flipping_put(local, remote):  # the wire changes one file's bytes
        real_put(local, remote)
        if remote == f"{target}.part/meta.json":
            executor.check(["truncate", "-s", "3", remote])

    monkeypatch.setattr(executor, "put", flipping_put)
    with pytest.raises(HostError, match=r"1 file\(s\) differ after the copy \(first: meta.json\)"):
        ship_dump(executor, ref, target, cache=cache)
    code, _ = executor.call(["test", "-e", target])
    assert code != 0  # nothing half-shipped is in place


def _spec(tmp_path, **exp):
    doc = {
        "schema_version": 1,
        "campaign": "c",
        "builds": {"native": {}},
        "experiments": [{"name": "e", "command": ["/bin/echo", "{{ dump.dir }}"], **exp}],
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_spec_errors_name_the_field(tmp_path):
    with pytest.raises(SpecError) as bad:
        load_spec(_spec(tmp_path, runs_on="controller", build="native"))
    assert "experiments[0].runs_on: runs_on: controller can't use a build" in str(bad.value)
    with pytest.raises(SpecError) as bad:  # `dump` only exists with a layer_dump block
        load_spec(_spec(tmp_path))
    assert "dump" in str(bad.value) and "\n" not in str(bad.value)
    with pytest.raises(SpecError) as bad:
        load_spec(_spec(tmp_path, layer_dump={"shape": "tiny"}))
    assert "layer_dump" in str(bad.value) and "context" in str(bad.value)


def test_a_bad_shape_or_context_is_one_line_at_plan_time(tmp_path):
    from socketlab.spec.expand import expand_points
    from socketlab.spec.hosts import host_entry
    from socketlab.topology import topology_from_snapshot

    snap = json.loads((REPO / "tests/fixtures/topology/c8i-metal-48xl.json").read_text())
    for block, why in (
        ({"shape": "nosuch", "context": 8}, "no such shape file"),
        ({"shape": "tiny", "context": "{{ 'x' }}"}, "expected a whole number"),
    ):
        spec = load_spec(_spec(tmp_path, layer_dump=block))
        with pytest.raises(SpecError) as bad:
            expand_points(spec, {"c8i": host_entry(topology_from_snapshot(snap), spec)})
        text = str(bad.value)
        assert "spec.yaml:" in text and "layer_dump" in text and why in text, text
        assert "\n" not in text


def test_stage_plan_runs_on_the_controller_and_tile_balance_needs_no_shape_on_the_host(tmp_path):
    """campaign-oct's stage-plan (runs_on: controller) and tile-balance through `orchestrate
    run`: stage-plan's argv starts with the orchestrator's own interpreter and it ran in the
    controller's work folder; tile-balance's gemv got the shape's matrices rendered here."""
    import sys

    from socketlab.layer.shapes import load_shape
    from socketlab.store import Store, store_path
    from tests.support.campaign import run_quick

    doc = yaml.safe_load((REPO / "experiments" / "campaign-oct.yaml").read_text())
    doc["experiments"] = [
        e for e in doc["experiments"] if e["name"] in ("stage-plan", "tile-balance")
    ]
    for e in doc["experiments"]:
        if e["name"] == "tile-balance":  # one stage, a kernel every x86 host has
            e["sweep"] = {"matrix": {"stage": ["E2B L0 2K"], "kernel": ["avx2-bf16"]}}
            e.pop("requires", None)
    doc["profiles"]["quick"]["experiments"] = {}
    root = run_quick(doc, tmp_path, "campaign-oct.yaml", timeout=600)
    with Store(store_path("campaign-oct", root)) as store:
        runs = {r.experiment: r for r in store.runs("campaign-oct")}
    plan, tiles = runs["stage-plan"], runs["tile-balance"]
    assert plan.status == "ok" and plan.argv[0] == sys.executable, plan
    assert tiles.status == "ok", tiles
    assert (
        tiles.argv[tiles.argv.index("--layer") + 1] == load_shape("gemma4-e2b-l0").gemv_layer_arg()
    )
