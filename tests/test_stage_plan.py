"""The stage planner (socketlab.plan.stage*, `orchestrate stage-plan`): with the seed's constants it
reproduces the published predictions and plans (plow-campaign.md §5.10, seed 000); the packer
keeps its invariants; bad input is one line and exit 2. Pure: nothing here depends on the host."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from socketlab.errors import PlanError, SocketlabError, SpecError
from socketlab.plan.stage import Budget, Constants, layer_stage, plan
from socketlab.plan.stage_cluster import project
from socketlab.plan.stage_constants import SEED, load_constants
from socketlab.plan.stage_model import load_model, model_files, units

ORCH = str(Path(sys.executable).parent / "orchestrate")
C = load_constants(SEED)
KIB12, KIB14 = 1344 * 1024, 1568 * 1024


def u(name: str):
    return units(load_model(name))


def rnd(x: float, nd: int) -> float:
    """Round half up, as the published tables do."""
    return float(f"{x + 1e-9:.{nd}f}")


# §5.10 plan table: (model, B, ctx) -> (stages, layers/stage, bottleneck µs, latency ms, tok/s)
TABLE = {
    ("gemma4-e2b", 1, 2048): (38, 0.92, 99.2, 2.4, 9594),
    ("gemma4-e2b", 1, 16384): (38, 0.92, 148.2, 2.7, 6529),
    ("gemma4-e2b", 16, 2048): (38, 0.92, 648.9, 12.5, 24468),
    ("gemma4-e2b", 16, 16384): (38, 0.92, 1431.8, 18.0, 11136),
    ("gemma4-e4b", 1, 2048): (77, 0.55, 74.1, 3.8, 12640),
    ("gemma4-e4b", 1, 16384): (77, 0.55, 172.0, 4.5, 5650),
    ("gemma4-e4b", 16, 2048): (77, 0.55, 614.6, 21.1, 25823),
    ("gemma4-e4b", 16, 16384): (77, 0.55, 2180.5, 32.1, 7321),
}


@pytest.mark.parametrize("key", sorted(TABLE))
def test_seed_constants_reproduce_the_published_plan_table(key):
    """The table's plans are pipe splits at 1,344 KiB (the LM head packed in order: its 7 / 11
    sockets are pipeline stages, which the 38 / 77 count and the sequences in flight include)."""
    model, b, ctx = key
    stages, lps, bn, lat, tps = TABLE[key]
    s = plan(u(model), Budget(bytes_per_core=KIB12, batch=b, context=ctx, split="pipe"), C).summary
    got = (
        s.stages,
        rnd(s.layers_per_stage, 2),
        rnd(s.bottleneck_us, 1),
        rnd(s.token_latency_us / 1e3, 1),
        round(s.tokens_per_s),
    )
    print(key, "published", TABLE[key], "planned", got)
    assert got[:2] == (stages, lps) and s.sequences_in_flight == b * stages
    assert abs(s.bottleneck_us - bn) <= 0.05 + 1e-9  # within the rounding of the published µs
    assert got[3] == lat
    assert abs(s.tokens_per_s - tps) <= 1


def test_e2b_l0_layer_predictions_44_and_209_us():
    """E2B L0 alone on a socket at 2K: 44 µs at B=1; at B=16 the published check is
    44 + 15 x 37,376 B / 3.4 GB/s = 209 µs. The check's formula carries the B=1 KV term only
    (the §5.10 16K rows need KV x B, so the planner scales it): the extra 15 rows' KV at
    600 GB/s add 13.1 µs, so the full prediction is 222 µs. The test holds both."""
    e2b = u("gemma4-e2b")
    b1 = layer_stage(e2b, 0, Budget(batch=1, context=2048), C)
    b16 = layer_stage(e2b, 0, Budget(batch=16, context=2048), C)
    assert rnd(b1.total_us, 0) == 44
    act_bytes = 15 * 37376 / (C.act_gbps * 1e3)
    assert b16.act_us == pytest.approx(act_bytes)  # the published 37,376 B per row
    published_form = b16.total_us - (b16.kv_us - b1.kv_us)
    assert rnd(published_form, 0) == 209
    assert rnd(b16.total_us, 0) == 222 and b16.kv_us == pytest.approx(16 * b1.kv_us)
    # a pipeline stage also gathers the layer output, 6,144 B per row: 236 µs (§5.10)
    piped = layer_stage(e2b, 0, Budget(batch=16, context=2048), C, gather_output=True)
    assert rnd(piped.total_us - (b16.kv_us - b1.kv_us), 0) == 236


def test_tied_head_sockets_7_and_11():
    for model, n in (("gemma4-e2b", 7), ("gemma4-e4b", 11)):
        st = plan(u(model), Budget(bytes_per_core=KIB12), C).stages[-1]
        assert st.label == f"head x{n}" and st.sockets == n


@pytest.mark.parametrize(
    "model,kib,tier,sockets",
    [
        ("gemma4-e2b", 1568, "l2", 33),
        ("gemma4-e4b", 1344, "l2", 96),
        ("gemma4-12b", 1568, "l2", 206),
        ("gemma4-31b", 1568, "l2", 500),
        ("gemma4-26b-a4b", 1344, "l2", 437),
        ("gemma4-26b-a4b", 1344, "l3", 137),
    ],
)
def test_p6_socket_counts(model, kib, tier, sockets):
    """P6 cluster sockets (§5.10) and MoE L2-only 437 vs L2+L3 137 (seed: 390 of 437 on
    experts; 3 expert sockets per layer). 12B/26B/31B shapes are partly assumed: see their
    model files' `derived`."""
    p = plan(
        u(model),
        Budget(bytes_per_core=kib * 1024, expert_tier=tier, l3_bytes_per_core=480 * 2**20 // 90),
        C,
    )
    assert p.summary.sockets == sockets
    if model == "gemma4-12b":
        assert {s.sockets for s in p.stages[:-1]} == {4}  # 12B at TP4 (seed)
    if model == "gemma4-31b":
        assert {s.sockets for s in p.stages[:-1]} == {8}  # 31B at TP8 (seed)
    if model == "gemma4-26b-a4b":
        experts = sum(s.sockets for s in p.stages if ".experts" in s.label)
        assert experts == (390 if tier == "l2" else 90)


def test_12b_projection_and_sensitivity():
    """12B at 1,568 KiB, hop 5 / all-reduce 10: published TPOT 4.1 ms (58 tok/s per socket) at
    B=1. The published cluster used measured 12B stage runs (cluster.py), which the text does
    not give; the planner alone gives 4.2 ms at saturation (3.6 ms for one sequence alone), and
    the sensitivity rows come out as published: +41% B=1 TPOT, -6% B=16 throughput."""
    m = u("gemma4-12b")
    p1 = plan(m, Budget(bytes_per_core=KIB14, batch=1), C)
    p16 = plan(m, Budget(bytes_per_core=KIB14, batch=16), C)
    base1, slow1 = project(p1, 5, 10), project(p1, 10, 25)
    base16, slow16 = project(p16, 5, 10), project(p16, 10, 25)
    print("12B B=1 TPOT", base1.tpot_saturated_us, "tok/s/socket", base1.tokens_per_s_per_socket)
    assert abs(base1.tpot_saturated_us / 4100 - 1) < 0.05
    assert abs(base1.tokens_per_s_per_socket / 58 - 1) < 0.05
    rise = slow1.tpot_saturated_us / base1.tpot_saturated_us - 1
    drop = 1 - slow16.tokens_per_s / base16.tokens_per_s
    print(f"sensitivity: B=1 TPOT +{rise:.1%}, B=16 throughput -{drop:.1%}")
    assert 0.39 <= rise <= 0.42
    assert 0.03 <= drop <= 0.07
    # the +1.7 ms is structural: 48 hops x 5 µs + (48 TP stages x 2 + the head's top-k merge)
    # all-reduces x 15 µs
    assert slow1.token_latency_us - base1.token_latency_us == pytest.approx(48 * 5 + 97 * 15)


def test_packing_invariants():
    """Every weight byte placed once; no socket over budget; row pieces in tile multiples;
    layers too large for a socket become the smallest TP group that fits."""
    m = u("gemma4-e4b")
    b = Budget(bytes_per_core=KIB12, split="pipe")
    p = plan(m, b, C)
    assert sum(s.load.bytes for s in p.stages) == sum(x.bytes for x in m)
    for s in p.stages:
        assert s.load.bytes <= b.cap and s.fill <= 1.0
        for pc in s.pieces:
            if pc.of_rows and pc.row1 != pc.of_rows:
                assert (pc.row1 - pc.row0) % 16 == 0
    tp = plan(m, Budget(bytes_per_core=KIB12, split="tp"), C)
    layer_stages = [s for s in tp.stages if s.label.startswith("L")]
    assert {s.sockets for s in layer_stages} == {2} and all(
        s.load.allreduces == 2 for s in layer_stages
    )
    # a bigger budget lets every E4B layer fit one socket: no TP left
    big = plan(m, Budget(bytes_per_core=4 * 2**20, split="tp"), C)
    assert all(s.sockets == 1 for s in big.stages if s.label.startswith("L"))


def test_terms_add_up_and_scale():
    m = u("gemma4-e2b")
    one = plan(m, Budget(bytes_per_core=KIB12, split="pipe"), C)
    fast = plan(
        m,
        Budget(bytes_per_core=KIB12, split="pipe"),
        C.replace(gemv_gbps_per_core=2 * C.gemv_gbps_per_core),
    )
    for a, b in zip(one.stages, fast.stages, strict=True):
        t = a.pred.terms()
        assert t["total_us"] == pytest.approx(sum(t[k] for k in t if k != "total_us"))
        assert b.pred.gemv_us == pytest.approx(a.pred.gemv_us / 2)
        assert b.pred.sync_us == a.pred.sync_us


def test_hf_config_json_gives_the_same_units(tmp_path):
    """A Hugging Face config.json (multimodal, text_config inside) is read as the model file."""
    model = load_model("gemma4-e2b")
    d = tmp_path / "gemma-4-e2b"
    d.mkdir()
    (d / "config.json").write_text(
        json.dumps({"model_type": "gemma4", "text_config": model.config})
    )
    assert units(load_model(d)) == units(model)
    assert units(load_model(d / "config.json")) == units(model)


def test_model_files_are_complete():
    names = {p.stem for p in model_files()}
    assert names == {"gemma4-e2b", "gemma4-e4b", "gemma4-12b", "gemma4-26b-a4b", "gemma4-31b"}
    for n in names:
        m = load_model(n)
        assert m.derived, n  # every shipped model says where its numbers came from


@pytest.mark.parametrize(
    "drop,field",
    [
        ("hidden_size", "hidden_size"),
        ("layer_types", "layer_types"),
        ("sliding_window", "sliding_window"),
    ],
)
def test_config_missing_field_is_one_line(tmp_path, drop, field):
    cfg = dict(load_model("gemma4-e2b").config)
    del cfg[drop]
    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    with pytest.raises(SpecError, match=rf"config.json: {field}: "):
        load_model(f)
    proc = subprocess.run([ORCH, "stage-plan", str(f)], capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and field in proc.stderr


def test_moe_config_needs_its_fields(tmp_path):
    cfg = dict(load_model("gemma4-26b-a4b").config)
    del cfg["moe_intermediate_size"]
    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    with pytest.raises(SpecError, match="moe_intermediate_size: missing"):
        load_model(f)


def test_budget_smaller_than_one_row_unit():
    with pytest.raises(PlanError, match="smaller than one row unit"):
        plan(u("gemma4-e2b"), Budget(bytes_per_core=4096), C)
    with pytest.raises(PlanError, match="does not fit one socket"):
        plan(u("gemma4-e2b"), Budget(bytes_per_core=64 * 1024, split="pipe"), C)
    proc = subprocess.run(
        [ORCH, "stage-plan", "gemma4-e2b", "--budget-kib", "4"], capture_output=True, text=True
    )
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "smaller than one row unit" in proc.stderr


def test_host_without_measured_constants_names_the_experiment(tmp_path):
    proc = subprocess.run(
        [ORCH, "stage-plan", "gemma4-e2b", "--host", "nowhere", "--results", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    line = proc.stderr.strip()
    assert len(line.splitlines()) == 1
    assert "host nowhere: no measured gemv_gbps_per_core" in line and "run layer --slice" in line


def test_bad_constants_file(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text(
        "version: 1\nexchange_us: {value: 1}\nkv_gbps: {value: 1}\n"
        "act_gbps: {value: 1}\ngemv_gbps_per_core: {value: -3}\n"
    )
    with pytest.raises(SocketlabError, match=r"gemv_gbps_per_core.value: expected a positive"):
        load_constants(f)


def test_cli_json_and_projection():
    proc = subprocess.run(
        [ORCH, "stage-plan", "gemma4-e2b", "--split", "pipe", "--json", "--project"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["summary"]["stages"] == 38 and doc["summary"]["sockets"] == 38
    assert {x["batch"] for x in doc["projection"]} == {1, 16}
    assert all(
        set(("gemv_us", "sync_us", "kv_us", "act_us", "allreduce_us")) <= set(s)
        for s in doc["stages"]
    )
    assert doc["constants"]["provenance"]["act_gbps"].startswith("published")


def test_constants_replace_is_a_copy():
    c = dataclasses.replace(C, exchange_us=1.0)
    assert isinstance(c, Constants) and C.exchange_us == 3.9


def test_cli_layer_jsonl_is_the_runner_contract():
    """`--layer 0 --jsonl`: the metric records a campaign experiment stores (parsed by the
    runner's own jsonl parser): the full B=16 prediction 222 µs and the published check's form
    209 µs; `--gather-output yes` adds the 6,144 B output rows (236 µs in the check's form)."""
    from socketlab.parse.jsonl import parse_jsonl

    def run(*extra):
        proc = subprocess.run(
            [ORCH, "stage-plan", "gemma4-e2b", "--layer", "0", "--batch", "16", "--jsonl", *extra],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        metrics, meta, errors = parse_jsonl(proc.stdout)
        assert not errors and meta and meta[0]["constants"]["act_gbps"] == 3.4
        return {x["name"]: x["value"] for x in metrics}

    got = run()
    assert rnd(got["layer_us"], 0) == 222 and rnd(got["layer_check_us"], 0) == 209
    assert got["layer_us"] == pytest.approx(
        sum(got[f"layer_{t}"] for t in ("gemv_us", "sync_us", "kv_us", "act_us", "allreduce_us"))
    )
    assert rnd(run("--gather-output", "yes")["layer_check_us"], 0) == 236
    proc = subprocess.run(
        [ORCH, "stage-plan", "gemma4-e2b", "--layer", "99"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1


def test_cli_plan_jsonl_and_sensitivity_records():
    from socketlab.parse.jsonl import parse_jsonl

    proc = subprocess.run(
        [
            ORCH,
            "stage-plan",
            "gemma4-12b",
            "--budget-kib",
            "1568",
            "--project",
            "--hop-us",
            "10",
            "--allreduce-us",
            "25",
            "--jsonl",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    metrics, _, errors = parse_jsonl(proc.stdout)
    got = {x["name"]: x for x in metrics}
    assert not errors and got["sockets"]["value"] == 206
    # one projection row per run: this batch, these links (the dims say which)
    assert [x["dims"] for x in metrics if x["name"] == "tpot_saturated_ms"] == [
        {"hop_us": 10.0, "allreduce_us": 25.0}
    ]
    assert 0.40 <= got["tpot_rise"]["value"] <= 0.42


def test_points_file_bad_input_is_one_line(tmp_path):
    f = tmp_path / "p.yaml"
    for text, want in (
        ("points: [{model: gemma4-e2b, batchh: 1}]", "points[0]: unknown key 'batchh'"),
        ("points: [{batch: 1}]", "points[0]: model: missing"),
        ("points: [{model: gemma4-e2b, batch: one}]", "points[0].batch: expected int"),
        ("nothing: 1", "points: expected a list"),
    ):
        f.write_text(text)
        proc = subprocess.run(
            [ORCH, "stage-plan", "--points", str(f), "--jsonl"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and want in proc.stderr, proc.stderr


def test_elem_term_counts_the_stages_vector_and_gelu_work(tmp_path):
    """The non-GEMV term (issue 13, on-host 10%): per batch row, every core does the norms,
    residuals and head norms / RoPE on whole vectors (8 H + QD + 2 KD for a Gemma-4 layer with
    PLE), the combine over QD / cores elements and the gelus over (I + P) / cores. E2B L0:
    H 1,536, 8 q heads x 256, 1 KV head, I 6,144, P 256. The seed's constants have no element
    costs, so the published predictions do not move; a constants file may give them."""
    e2b = u("gemma4-e2b")
    h, qd, kd, inter, ple = 1536, 8 * 256, 256, 6144, 256
    for cores, b in ((1, 1), (4, 16), (90, 16)):
        bud = Budget(cores=cores, batch=b)
        vec = layer_stage(e2b, 0, bud, C.replace(elem_ns=1.0))
        assert vec.elem_us == pytest.approx(b * (8 * h + qd + 2 * kd + qd / cores) / 1e3)
        gel = layer_stage(e2b, 0, bud, C.replace(gelu_ns=1.0))
        assert gel.elem_us == pytest.approx(b * (inter + ple) / cores / 1e3)
        both = layer_stage(e2b, 0, bud, C.replace(elem_ns=2.0, gelu_ns=20.0))
        assert both.elem_us == pytest.approx(2 * vec.elem_us + 20 * gel.elem_us)
        assert both.total_us == pytest.approx(layer_stage(e2b, 0, bud, C).total_us + both.elem_us)
    assert layer_stage(e2b, 0, Budget(), C).elem_us == 0 and C.elem_ns == C.gelu_ns == 0
    # under TP the heads' and the FFN rows' share splits with the degree; the norms do not
    tp = plan(
        u("gemma4-31b"),
        Budget(bytes_per_core=KIB14, split="tp"),
        C.replace(elem_ns=1.0, gelu_ns=1.0),
    )
    st = next(s for s in tp.stages if s.label.startswith("L0 tp"))
    whole = layer_stage(u("gemma4-31b"), 0, Budget(), C.replace(elem_ns=1.0, gelu_ns=1.0))
    assert 0 < st.pred.elem_us < whole.elem_us
    f = tmp_path / "c.yaml"
    f.write_text(
        SEED.read_text() + "elem_ns: {value: 2.5, source: test}\n"
        "gelu_ns: {value: 21, source: test}\n"
    )
    got = load_constants(f)
    assert (got.elem_ns, got.gelu_ns) == (2.5, 21.0) and got.provenance["gelu_ns"] == "test"
