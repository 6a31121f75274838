"""The stage planner's attention and communication terms (issue 27 item 4): the KV rate carries
the attention's class (head_dim, GQA group), the batch and the KV bytes per step; hop and
all-reduce costs are bytes over a link. Pure: known inputs, nothing measured here."""

from __future__ import annotations

import dataclasses

import pytest

from socketlab.errors import SpecError
from socketlab.plan.stage import (
    Budget,
    Constants,
    KvRate,
    Link,
    kv_evicted,
    layer_load,
    layer_stage,
    plan,
    stage_load,
)
from socketlab.plan.stage_cluster import SEED_LINK, link_through, project
from socketlab.plan.stage_constants import SEED, _kv_attention, kv_classes, load_constants
from socketlab.plan.stage_model import layer_model, load_model, units

C = load_constants(SEED)
BASE = Constants(gemv_gbps_per_core=1e9, exchange_us=0, kv_gbps=100.0, act_gbps=1e9)
#: two classes at two batches: tiny-full's (128, 2) and E2B L0's (256, 8)
CLASSES = (
    KvRate(128, 2, 1, 1e6, 20.0),
    KvRate(128, 2, 16, 1e7, 8.0),
    KvRate(256, 8, 1, 5e5, 4.0),
    KvRate(256, 8, 16, 8e6, 1.0),
    KvRate(256, 8, 16, 1e5, 3.0),
)


def attn_load(shape: str, batch: int, context: int):
    us = units(layer_model(shape))
    att = [(i, x) for i, x in enumerate(us) if x.kind == "attn"]
    from socketlab.plan.stage import Piece

    pieces = [Piece(i, x.kind, 0, 0, 0, 0, x.bytes) for i, x in att]
    return stage_load(us, pieces, Budget(cores=1, batch=batch, context=context))


#: E2B L0's (256, 8) at B=16, 8 MiB per step: warm, and rotated over 64 MiB (cold); the
#: Granite Rapids guest's rates (3.9 and 1.4 GB/s)
WARM_COLD = (
    KvRate(256, 8, 16, 8.4e6, 3.9),
    KvRate(256, 8, 16, 8.4e6, 1.4, 64 * 2**20),
    KvRate(256, 8, 16, 2.1e5, 3.5),
    KvRate(256, 8, 16, 2.1e5, 1.5, 64 * 2**20),
)


def test_units_and_loads_carry_head_dim_and_group():
    e2b = attn_load("gemma4-e2b-l0", 16, 2048)
    # E2B L0: 8 q heads over 1 KV head of 256, window 512 (511 cached rows attended), 16 rows
    assert e2b.kv_parts == ((256, 8, 16 * 511 * 2 * 256 * 2),)
    assert e2b.kv_bytes == e2b.kv_parts[0][2]
    full = attn_load("tiny-full", 1, 16384)
    assert full.kv_parts == ((128, 2, 16384 * 2 * 2 * 128 * 2),)


def test_kv_rate_picks_class_then_batch_then_bytes():
    c = BASE.replace(kv_classes=CLASSES)
    assert c.kv_rate(256, 8, 16, 8e6)[0] == 1.0
    assert c.kv_rate(256, 8, 16, 1e5)[0] == 3.0  # the context pair nearest the KV bytes
    assert c.kv_rate(256, 8, 1, 8e6)[0] == 4.0  # the batch before the bytes
    assert c.kv_rate(128, 2, 16, 8e6)[0] == 8.0
    assert c.kv_rate(256, 8, 4, 8e6)[0] in (4.0, 1.0)  # nearest batch (log distance 2 both)
    # unmeasured classes take the nearest: (512, 8) -> (256, 8); (64, 2) -> (128, 2)
    assert c.kv_rate(512, 8, 16, 8e6)[1].head_dim == 256
    assert c.kv_rate(64, 2, 1, 1e6)[1] == CLASSES[0]
    # no classes, or a unit without a head_dim: kv_gbps
    assert BASE.kv_rate(256, 8, 16, 8e6) == (100.0, None)
    assert c.kv_rate(0, 0, 16, 8e6) == (100.0, None)


def test_attention_term_uses_the_stage_class_and_batch():
    c = BASE.replace(kv_classes=CLASSES)
    us = units(layer_model("gemma4-e2b-l0"))
    for b, rate in ((1, 4.0), (16, 1.0)):
        load = attn_load("gemma4-e2b-l0", b, 2048)
        p = layer_stage(us, 0, Budget(cores=1, batch=b, context=2048), c)
        assert p.kv_us == pytest.approx(load.kv_bytes / (rate * 1e3))
    # the same constants give tiny-full its own class's rate, not E2B's
    tf = units(layer_model("tiny-full"))
    p = layer_stage(tf, 0, Budget(cores=1, batch=16, context=16384), c)
    assert p.kv_us == pytest.approx(attn_load("tiny-full", 16, 16384).kv_bytes / 8e3)
    # without classes the term is the old bytes / kv_gbps
    p = layer_stage(us, 0, Budget(cores=1, batch=16, context=2048), BASE)
    assert p.kv_us == pytest.approx(attn_load("gemma4-e2b-l0", 16, 2048).kv_bytes / 100e3)


def test_tensor_parallel_socket_group():
    """31B L5: 32 q heads over 4 KV heads of 512; at TP8 a socket holds 4 q heads and one
    (replicated) KV head: group 4, not 8."""
    us = units(load_model("gemma4-31b"))
    pl = plan(us, Budget(bytes_per_core=1568 * 1024, batch=1, context=2048), C)
    tp = [s for s in pl.stages if s.sockets == 8 and "tp8" in s.label]
    assert tp
    groups = {(hd, g) for s in tp for hd, g, _ in s.load.kv_parts}
    assert (512, 4) in groups and (256, 2) in groups  # full and sliding layers' own classes


def test_link_costs_scale_with_bytes():
    link = Link(latency_us=2.0, gbps=10.0)
    assert link.us(0) == 2.0
    assert link.us(20_000) - 2.0 == pytest.approx(2 * (link.us(10_000) - 2.0))
    assert link.hop_us(5376 * 4, 1) == pytest.approx(2.0 + 21_504 / 10e3)
    assert link.hop_us(5376 * 4, 16) - 2.0 == pytest.approx(16 * (link.hop_us(5376 * 4, 1) - 2.0))
    # the seed's 588 KiB per TP8 all-reduce at B=16 (31B, hidden 5,376, FP32)
    assert link.allreduce_us(5376 * 4, 16, 8) == pytest.approx(2.0 + 602_112 / 10e3)
    assert 602_112 // 1024 == 588
    assert link.allreduce_us(5376 * 4, 16, 1) == 0.0


def test_seed_link_reproduces_the_seed_assumptions():
    assert SEED_LINK.hop_us(5376 * 4, 1) == pytest.approx(5.0)
    assert SEED_LINK.allreduce_us(5376 * 4, 16, 8) == pytest.approx(10.0)
    assert SEED_LINK.latency_us == pytest.approx(4.815, abs=1e-3)
    assert SEED_LINK.gbps == pytest.approx(116.1, abs=0.1)
    with pytest.raises(ValueError):
        link_through((1000, 5.0), (2000, 4.0))


def test_projection_with_a_link_uses_the_plan_bytes():
    us = units(load_model("gemma4-31b"))
    b16 = plan(us, Budget(bytes_per_core=1568 * 1024, batch=16, context=2048), C)
    fixed = project(b16, 5.0, 10.0)
    assert fixed.link_gbps is None and fixed.allreduce_us == 10.0
    slow = project(b16, 5.0, 10.0, link=Link(5.0, 10.0))
    fast = project(b16, 5.0, 10.0, link=Link(5.0, 100.0))
    assert slow.allreduce_bytes == fast.allreduce_bytes == 602_112  # 588 KiB, the seed's
    assert slow.hop_bytes == 16 * 5376 * 4
    assert slow.allreduce_us == pytest.approx(5.0 + 602_112 / 10e3)
    assert slow.tpot_saturated_us > fast.tpot_saturated_us > 0
    # the seed-equivalent link at 31B's own bytes gives the seed's 10 µs all-reduce
    seed = project(b16, 5.0, 10.0, link=SEED_LINK)
    assert seed.allreduce_us == pytest.approx(10.0)
    # B=1: a 21 KiB hop; E2B: 6 KiB
    b1 = plan(us, Budget(bytes_per_core=1568 * 1024, batch=1, context=2048), C)
    assert project(b1, 5.0, 10.0, link=SEED_LINK).hop_bytes == 21_504
    e2b = plan(units(load_model("gemma4-e2b")), Budget(bytes_per_core=1568 * 1024), C)
    assert project(e2b, 5.0, 10.0, link=SEED_LINK).hop_bytes == 1536 * 4


def test_plan_summary_hops_from_the_link():
    us = units(load_model("gemma4-e2b"))
    bud = Budget(bytes_per_core=1344 * 1024, batch=16, split="pipe")
    fixed = plan(us, bud, C).summary
    linked = plan(us, bud, C.replace(link=Link(1.0, 1.0))).summary  # 96 KiB a hop: 99 µs
    hop = 1.0 + 16 * 1536 * 4 / 1e3
    assert linked.token_latency_us - fixed.token_latency_us == pytest.approx(
        (hop - C.hop_us) * (fixed.stages - 1)
    )


def test_constants_file_link_and_classes(tmp_path):
    base = SEED.read_text()
    f = tmp_path / "c.yaml"
    f.write_text(
        base + "link_us: {value: 2.0, source: assumed}\nlink_gbps: {value: 50, source: "
        "assumed}\nkv_classes: {value: [[256, 8, 16, 8000000, 1.5]], source: bench}\n"
    )
    c = load_constants(f)
    assert c.link == Link(2.0, 50.0) and c.kv_classes == (KvRate(256, 8, 16, 8e6, 1.5),)
    assert c.provenance["kv_classes"] == "bench"
    f.write_text(base + "link_us: 2.0\n")
    with pytest.raises(SpecError, match="link_us and link_gbps"):
        load_constants(f)
    f.write_text(base + "kv_classes: [[256, 8, 16]]\n")
    with pytest.raises(SpecError, match=r"kv_classes.value\[0\]"):
        load_constants(f)


def _run(
    hd: int, grp: int, b: int, ctx: int, att_us: float, rep: int = 0, cold_mib: int = 0
) -> dict:
    kvb = b * ctx * 4 * hd
    return {
        "key": f"k{hd}-{grp}-{b}-{ctx}-{rep}-{cold_mib}",
        "repetition": rep,
        "experiment": "kv-attn",
        "params": {"context": ctx, "batch": b, "head_dim": hd, "group": grp},
        "argv": [
            "/x/layer",
            "--dump",
            f"/d/attn-h{hd}-g{grp}",
            "--gemv",
            "avx512",
            "--slice",
            "0/1",
            "--batch",
            str(b),
            "--ctx",
            str(ctx),
            *(["--kv-cold-mib", str(cold_mib)] if cold_mib else []),
        ],
        "metrics": [
            ("kv_bytes_per_step", kvb, {"shape": f"attn-h{hd}-g{grp}"}),
            ("phase_gemv_p50", att_us, {"phase": "attention"}),
        ],
    }


def test_store_reader_rates_per_class_and_batch():
    runs = []
    # (256, 8): 1 ns per byte at B=16, 0.25 at B=1; (128, 2): 0.1 ns per byte at both
    for ctx in (256, 1024):
        runs += [
            _run(256, 8, 16, ctx, 16 * ctx * 1024 * 1e-3),
            _run(256, 8, 1, ctx, ctx * 1024 * 0.25e-3),
            _run(128, 2, 16, ctx, 16 * ctx * 512 * 0.1e-3),
        ]
    got = {(k.head_dim, k.group, k.batch, k.kv_bytes): k for k, _ in kv_classes(runs, "avx512")}
    assert len(got) == 6  # one rate per class, batch and context
    assert got[256, 8, 16, 16 * 256 * 1024].gbps == pytest.approx(1.0)
    assert got[256, 8, 1, 1024 * 1024].gbps == pytest.approx(4.0)
    assert got[128, 2, 16, 16 * 1024 * 512].gbps == pytest.approx(10.0)
    assert kv_classes(runs, "avx2") == []
    # the single kv_gbps (a difference of two contexts) of the stage's class
    m = _kv_attention(runs, "avx512", 16, None, 256, 8)
    assert m.value == pytest.approx(1.0) and "head_dim 256, group 8" in m.detail
    assert _kv_attention(runs, "avx512", 16, None, 128, 2).value == pytest.approx(10.0)
    # nearest class where the stage's is not measured
    assert _kv_attention(runs, "avx512", 16, None, 512, 8).value == pytest.approx(1.0)
    c = dataclasses.replace(BASE, kv_classes=tuple(k for k, _ in kv_classes(runs, "avx512")))
    p = layer_stage(units(layer_model("gemma4-e2b-l0")), 0, Budget(cores=1, batch=16), c)
    assert p.kv_us == pytest.approx(attn_load("gemma4-e2b-l0", 16, 2048).kv_bytes / 1e3)


def test_store_reader_class_rate_keeps_the_fixed_work_and_takes_the_median_repetition():
    """A ratio at one size: a 10 µs fixed cost per step stays in the rate (a short window's
    attention is mostly that), and of three repetitions the median one counts."""
    runs = [_run(64, 2, 16, 64, 10.0 + 16 * 64 * 256 * 1e-3, rep) for rep in range(2)]
    runs.append(_run(64, 2, 16, 64, 1e6, 2))  # a descheduled repetition
    ((k, keys),) = kv_classes(runs, "avx512")
    kvb = 16 * 64 * 256
    assert k.kv_bytes == kvb and len(keys) == 3
    assert k.gbps == pytest.approx(kvb / ((10.0 + kvb * 1e-3) * 1e3))


def test_kv_rate_takes_cold_points_for_a_stage_whose_kv_is_evicted():
    c = BASE.replace(kv_classes=WARM_COLD)
    assert c.kv_rate(256, 8, 16, 8.4e6)[0] == 3.9  # warm by default
    assert c.kv_rate(256, 8, 16, 8.4e6, cold=True)[0] == 1.4
    assert c.kv_rate(256, 8, 16, 2.1e5, cold=True)[0] == 1.5  # the bytes still pick the context
    assert c.kv_rate(256, 8, 16, 2.1e5)[0] == 3.5
    # a class measured warm only gives its warm rate to a cold stage (and cold only, cold)
    assert c.replace(kv_classes=WARM_COLD[::2]).kv_rate(256, 8, 16, 8.4e6, cold=True)[0] == 3.9
    assert c.replace(kv_classes=WARM_COLD[1::2]).kv_rate(256, 8, 16, 8.4e6)[0] == 1.4


def test_kv_is_evicted_where_the_weights_overflow_the_l2():
    """E2B L0 at B=16 on one core: 73 MB of weights stream past the KV every step (cold); on
    90 cores each holds 0.8 MB, inside the 2 MiB L2, and the KV stays warm; tiny on one core
    (1.7 MB) fits too, though it is over the 1,344 KiB lock budget."""
    us = units(layer_model("gemma4-e2b-l0"))
    c = BASE.replace(kv_classes=WARM_COLD)
    one, many = Budget(cores=1, batch=16, context=2048), Budget(cores=90, batch=16, context=2048)
    lo1, lo90 = layer_load(us, 0, one), layer_load(us, 0, many)
    assert kv_evicted(lo1, one) and not kv_evicted(lo90, many)
    assert layer_stage(us, 0, one, c).kv_us == pytest.approx(lo1.kv_bytes / 1.4e3)
    assert layer_stage(us, 0, many, c).kv_us == pytest.approx(lo90.kv_bytes / 3.9e3)
    tiny = layer_load(units(layer_model("tiny")), 0, Budget(cores=1, batch=16, context=100))
    assert one.bytes_per_core < tiny.bytes <= one.l2_bytes_per_core
    assert not kv_evicted(tiny, one)
    # a smaller L2 (a host with 1 MiB per core) makes tiny's KV cold
    assert kv_evicted(tiny, Budget(cores=1, l2_bytes_per_core=2**20))


def test_store_reader_keeps_cold_points_apart_from_warm_ones():
    """A run with --kv-cold-mib is a cold point of its class (footprint = the rotated copies'
    bytes), never averaged with the warm run at its context, and never in kv_gbps."""
    runs = []
    for ctx in (256, 1024):
        kvb = 16 * ctx * 1024
        runs += [
            _run(256, 8, 16, ctx, kvb * 1e-3),  # 1 GB/s warm
            _run(256, 8, 16, ctx, kvb * 4e-3, cold_mib=64),  # 0.25 GB/s cold
        ]
    got = {(k.kv_bytes, k.footprint): k.gbps for k, _ in kv_classes(runs, "avx512")}
    kvb = 16 * 1024 * 1024
    assert got == {
        (16 * 256 * 1024, 0.0): pytest.approx(1.0),
        (16 * 256 * 1024, 16 * 256 * 1024 * 16): pytest.approx(0.25),  # 16 copies of 4 MiB
        (kvb, 0.0): pytest.approx(1.0),
        (kvb, kvb * 4): pytest.approx(0.25),
    }
    assert _kv_attention(runs, "avx512", 16, None, 256, 8).value == pytest.approx(1.0)
    c = dataclasses.replace(BASE, kv_classes=tuple(k for k, _ in kv_classes(runs, "avx512")))
    assert c.kv_rate(256, 8, 16, kvb, cold=True)[0] == pytest.approx(0.25)
    assert c.kv_rate(256, 8, 16, kvb)[0] == pytest.approx(1.0)


def test_constants_file_cold_class_rows(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text(SEED.read_text() + "kv_classes: [[256, 8, 16, 8400000, 1.4, 67108864]]\n")
    assert load_constants(f).kv_classes == (KvRate(256, 8, 16, 8.4e6, 1.4, 67108864.0),)
    f.write_text(SEED.read_text() + "kv_classes: [[256, 8, 16, 8400000, 1.4, -1]]\n")
    with pytest.raises(SpecError, match=r"kv_classes.value\[0\]: .*footprint"):
        load_constants(f)
