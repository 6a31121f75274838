"""Shape files (experiments/shapes/*.yaml): the published layer sizes, HF configs, bad files."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from socketlab.errors import SpecError
from socketlab.layer.shapes import (
    SHAPES_DIR,
    from_hf_text_config,
    load_shape,
    shape_files,
    weight_mib_rounded,
)

REPO = Path(__file__).resolve().parents[1]
GEMMA = ["gemma4-e2b-l0", "gemma4-e2b-l4", "gemma4-e4b-l0", "gemma4-e4b-l5"]


def test_every_shape_file_loads_and_keeps_the_features():
    names = {p.stem for p in shape_files()}
    assert set(GEMMA) | {"tiny", "tiny-full"} <= names
    for p in shape_files():
        s = load_shape(p)
        assert s.heads % s.kv_heads == 0
        if s.attention == "sliding":
            assert s.window is not None and s.window >= 2
    tiny = load_shape("tiny")
    # the small test layer keeps what the real ones have: GQA, PLE, a window below 100 tokens
    assert tiny.hidden <= 512 and tiny.groups > 1 and tiny.ple > 0 and tiny.window < 100


@pytest.mark.parametrize("name", GEMMA)
def test_gemma_shapes_give_the_published_layer_sizes(name):
    """69.0 / 82.5 / 177.5 / 202.5 MiB of bf16 matrices (plow-campaign.md §5.5); the file's
    `published` block is the published figure, the size is computed from the shape fields."""
    s = load_shape(name)
    assert s.published_weight_mib is not None
    assert weight_mib_rounded(s) == s.published_weight_mib, (name, s.matrix_bytes() / 2**20)
    expected = {
        "gemma4-e2b-l0": 69.0,
        "gemma4-e2b-l4": 82.5,
        "gemma4-e4b-l0": 177.5,
        "gemma4-e4b-l5": 202.5,
    }[name]
    assert s.published_weight_mib == expected


def test_campaign_tile_balance_reads_the_shape_files():
    """One source for each fact: campaign-oct.yaml's tile-balance experiment takes its matrices
    from the shape files (the `layer_matrices` filter, on the controller), never from lists typed
    inline; and the rendered --layer is the shape file's matrices."""
    text = (REPO / "experiments" / "campaign-oct.yaml").read_text()
    assert not re.findall(r"'(E[24]B L\d) 2K': '([0-9x,]+)'", text), "shapes typed inline"
    block = text[text.index("- name: tile-balance") :]
    block = block[: block.index("\n  - name:", 1)]
    assert "| layer_matrices" in block and "--layer" in block
    for name in ("gemma4-e2b-l0", "gemma4-e2b-l4", "gemma4-e4b-l5"):
        assert (REPO / "experiments" / "shapes" / f"{name}.yaml").is_file(), name
    from socketlab.spec.expand import expand_points
    from socketlab.spec.hosts import host_entry
    from socketlab.spec.load import load_spec
    from socketlab.topology import topology_from_snapshot

    spec = load_spec(REPO / "experiments" / "campaign-oct.yaml")
    snap = json.loads(
        (REPO / "tests" / "fixtures" / "topology" / "c8i-metal-48xl.json").read_text()
    )
    plan = expand_points(spec, {"c8i": host_entry(topology_from_snapshot(snap), spec)})
    points = [p for p in plan.points if p.experiment == "tile-balance"]
    assert len(points) == 6
    for p in points:
        model, layer, _ = p.params["stage"].split(" ")
        argv = list(p.argv)
        want = load_shape(f"gemma4-{model.lower()}-{layer.lower()}").gemv_layer_arg()
        assert argv[argv.index("--layer") + 1] == want


def test_hf_config_gives_the_same_shapes():
    """google/gemma-4-e2b's text config values (HF Gemma4TextConfig fields) give the shape files."""
    tc = {
        "hidden_size": 1536,
        "intermediate_size": 6144,
        "num_hidden_layers": 35,
        "num_attention_heads": 8,
        "num_key_value_heads": 1,
        "head_dim": 256,
        "global_head_dim": 512,
        "sliding_window": 512,
        "hidden_size_per_layer_input": 256,
        "num_kv_shared_layers": 20,
        "rms_norm_eps": 1e-6,
        "layer_types": (["sliding_attention"] * 4 + ["full_attention"]) * 7,
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {
                "rope_type": "proportional",
                "partial_rotary_factor": 0.25,
                "rope_theta": 1000000.0,
            },
        },
    }
    for layer, name in ((0, "gemma4-e2b-l0"), (4, "gemma4-e2b-l4")):
        got, want = from_hf_text_config(tc, layer, "config.json"), load_shape(name)
        for field in (
            "hidden",
            "heads",
            "kv_heads",
            "head_dim",
            "attention",
            "window",
            "inter",
            "ple",
            "rope_theta",
            "rope_type",
            "partial_rotary_factor",
            "eps",
            "kv_eq",
        ):
            assert getattr(got, field) == getattr(want, field), (name, field)
    with pytest.raises(SpecError, match=r"--layer 30: this layer reuses an earlier layer's KV"):
        from_hf_text_config(tc, 30, "config.json")
    with pytest.raises(SpecError, match=r"--layer: expected 0\.\.34, got 35"):
        from_hf_text_config(tc, 35, "config.json")


def test_moe_shape_from_the_model_config_and_its_expert():
    """26B-A4B's layer 5 from the planner's model file (its config block, as a checkpoint's
    config.json would give it) is the shape file's, MoE fields included (the model file leaves
    the per-layer input to its default; 26B has none); one expert's matrices are the published
    704 gate/up rows, and a dense shape has none."""
    cfg = yaml.safe_load((REPO / "experiments" / "models" / "gemma4-26b-a4b.yaml").read_text())
    got = from_hf_text_config(cfg["config"], 5, "config.json")
    want = load_shape("gemma4-26b-a4b-l5")
    for field in (
        "hidden",
        "heads",
        "kv_heads",
        "head_dim",
        "attention",
        "inter",
        "kv_eq",
        "experts",
        "top_k",
        "moe_inter",
        "rope_theta",
        "rope_type",
    ):
        assert getattr(got, field) == getattr(want, field), field
    assert (
        want.moe and want.ple == 0 and want.gemv_layer_arg("expert") == "704x2816,704x2816,2816x704"
    )
    assert ("router.proj.weight", 128, 2816) in want.matrices()
    with pytest.raises(SpecError, match="the layer is dense"):
        load_shape("tiny").gemv_layer_arg("expert")


BASE = yaml.safe_load((SHAPES_DIR / "tiny.yaml").read_text())


@pytest.mark.parametrize(
    "change, message",
    [
        ({"version": 2}, r"version: expected 1, got 2"),
        ({"hidden": None}, r"hidden: expected a positive integer, got None"),
        ({"hidden": True}, r"hidden: expected a positive integer, got True"),
        ({"heads": 0}, r"heads: expected a positive integer, got 0"),
        ({"kv_heads": 3}, r"kv_heads: expected a divisor of heads \(4\), got 3"),
        ({"head_dim": 63}, r"head_dim: expected a positive even integer, got 63"),
        ({"attention": "local"}, r"attention: expected sliding or full, got 'local'"),
        ({"window": None}, r"window: missing; expected an integer >= 2 for sliding attention"),
        ({"attention": "full"}, r"window: expected null or absent for full attention"),
        ({"rope_type": "yarn"}, r"rope_type: expected default or proportional, got 'yarn'"),
        (
            {"partial_rotary_factor": 0.25},
            r"partial_rotary_factor: expected 1.0 with rope_type default",
        ),
        ({"eps": 2}, r"eps: expected a number in \(0, 1\), got 2"),
        ({"hiden": 256}, r"hiden: unknown field; expected one of version, hidden"),
        ({"ple": -1}, r"ple: expected an integer >= 0"),
        ({"experts": 8, "moe_inter": 64}, r"top_k: expected 1\.\.experts \(8\) for a MoE layer"),
        ({"experts": 8, "top_k": 9, "moe_inter": 64}, r"top_k: expected 1\.\.experts \(8\)"),
        ({"experts": 8, "top_k": 2}, r"moe_inter: missing; expected a positive integer"),
        ({"top_k": 2}, r"experts: expected a positive count with top_k / moe_inter"),
    ],
)
def test_bad_shape_file_is_one_line_naming_file_and_field(tmp_path, change, message):
    doc = dict(BASE)
    for k, v in change.items():
        doc[k] = v
    if change.get("window", 0) is None:
        del doc["window"]
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(doc))
    with pytest.raises(SpecError, match=message) as exc:
        load_shape(p)
    assert str(exc.value).startswith(f"{p}: ") and "\n" not in str(exc.value)


def test_missing_field_and_bad_yaml(tmp_path):
    doc = dict(BASE)
    del doc["inter"]
    p = tmp_path / "nointer.yaml"
    p.write_text(yaml.safe_dump(doc))
    with pytest.raises(
        SpecError, match=r"nointer.yaml: inter: missing; expected a positive integer"
    ):
        load_shape(p)
    q = tmp_path / "broken.yaml"
    q.write_text("version: 1\nhidden: [1,\n")
    with pytest.raises(SpecError, match=r"broken.yaml:\d+: not valid YAML"):
        load_shape(q)
    with pytest.raises(
        SpecError, match=r"nosuch: no such shape file; expected a YAML file or one of: .*tiny"
    ):
        load_shape("nosuch")


def test_cli_bad_shape_file_exits_2_with_one_line(tmp_path):
    doc = dict(BASE, heads="four")
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(doc))
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "socketlab.cli",
            "layer-dump",
            str(p),
            "--context",
            "8",
            "--out",
            str(tmp_path / "d"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        f"orchestrate: error: {p}: heads: expected a positive integer, got 'four'"
    ]
    assert not (tmp_path / "d").exists()
