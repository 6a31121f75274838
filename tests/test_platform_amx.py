"""AMX verdicts from oneDNN kernel-selection traces (collectors/platform_onednn.py).

Recorded traces of a Granite Rapids guest (tests/fixtures/onednn/gnr-kvm-2vcpu/), SYNTHESIZED
traces of an AVX-512-only host and of older oneDNN naming (tests/fixtures/onednn/synthesized/),
and one real run on the machine that runs the tests, whose expected verdict follows its CPUID
(the test says which branch it took).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from socketlab.hostside.platform_amx import cpu_flags
from socketlab.hostside.platform_onednn import EXECUTING, NOT_USED, parse_trace, verdict

FIX = Path(__file__).parent / "fixtures" / "onednn"
GNR = FIX / "gnr-kvm-2vcpu"
SYN = FIX / "synthesized"
GNR_FLAGS = ["avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8"]
ZEN4_FLAGS = ["avx2", "avx512f", "avx512_bf16", "avx512_vnni"]


def judge(path: Path, precision: str, flags=GNR_FLAGS, control=False):
    return verdict(parse_trace(path.read_text()), precision, flags, control)


def test_recorded_bf16_runs_amx_matmul():
    v = judge(GNR / "bf16.log", "bf16")
    assert v.verdict == EXECUTING
    assert v.implementations == ("brg_matmul:avx10_1_512_amx",)
    assert "2 of 2 bf16" in v.reason


def test_recorded_int8_onednn_engine_runs_amx_on_u8_s8():
    v = judge(GNR / "int8-onednn.log", "int8")
    assert v.verdict == EXECUTING
    assert v.implementations == ("brg_matmul:avx10_1_512_amx",)
    # reorders named brgemm_matmul_copy_reorder_t are not compute: they must not be counted
    assert "reorder" not in v.reason


def test_recorded_int8_default_engine_never_reaches_onednn_matmul():
    v = judge(GNR / "int8.log", "int8")
    assert v.verdict == NOT_USED
    assert "no oneDNN matmul/inner-product/convolution on int8 data ran" in v.reason


def test_recorded_fp32_gelu_eltwise_is_the_grep_false_positive():
    text = (GNR / "fp32.log").read_text()
    # the seed's one-liner would call this AMX ...
    assert re.findall(r"avx10_1_512_amx[a-z_]*", text) == ["avx10_1_512_amx"]
    v = verdict(parse_trace(text), "fp32", GNR_FLAGS)
    # ... but only an eltwise printed it, and FP32 has no tiles
    assert v.verdict == NOT_USED
    assert "not counted (ISA level, no tiles): eltwise jit:avx10_1_512_amx" in v.reason
    assert v.host_amx is True


def test_recorded_negative_control_passes():
    v = judge(GNR / "bf16-maxisa.log", "bf16", control=True)
    assert v.verdict == NOT_USED and v.control_ok is True
    assert v.implementations == ("brg_matmul:avx512_core_bf16",)
    assert v.isa == "Intel AVX-512 with Intel DL Boost and bfloat16 support"


def test_control_that_ran_amx_is_flagged():
    v = judge(GNR / "bf16.log", "bf16", control=True)
    assert v.control_ok is False


def test_synthesized_avx512_only_host_gets_not_used_with_its_kernels():
    bf16 = judge(SYN / "avx512-zen4-bf16.log", "bf16", ZEN4_FLAGS)
    int8 = judge(SYN / "avx512-zen4-int8.log", "int8", ZEN4_FLAGS)
    assert (bf16.verdict, int8.verdict) == (NOT_USED, NOT_USED)
    assert bf16.implementations == ("brg_matmul:avx512_core_bf16",)
    assert int8.implementations == ("brg_matmul:avx512_core_vnni",)
    assert bf16.reason.startswith("no AMX on this host (CPUID has no amx_tile)")
    assert bf16.host_amx is False


def test_synthesized_legacy_naming_inner_product_and_isa_with_commas():
    trace = parse_trace((SYN / "legacy-amx-int8.log").read_text())
    assert trace.version == "v2.7.3"
    assert trace.isa.endswith("Intel AMX with bfloat16 and 8-bit integer support")
    int8 = verdict(trace, "int8", GNR_FLAGS)
    assert int8.verdict == EXECUTING and int8.implementations == ("brgemm:avx512_core_amx",)
    fp32 = verdict(trace, "fp32", GNR_FLAGS)  # the f32 inner product ran gemm:jit
    assert fp32.verdict == NOT_USED and fp32.implementations == ("gemm:jit",)


def test_synthesized_dnnl_timestamps_count_exec_not_create():
    trace = parse_trace((SYN / "dnnl-timestamp-bf16.log").read_text())
    assert len(trace.primitives) == 1 and trace.primitives[0].primitive == "convolution"
    v = verdict(trace, "bf16", None)
    assert v.verdict == EXECUTING and v.host_amx is None


def test_unknown_precision_is_refused():
    with pytest.raises(ValueError, match="expected one of bf16, int8, fp32"):
        verdict(parse_trace(""), "fp64")


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "socketlab.cli", *args], capture_output=True, text=True, timeout=300
    )


def test_cli_recorded_jsonl_records(tmp_path):
    proc = _cli(
        "platform",
        "amx",
        "--trace",
        str(GNR / "bf16.log"),
        "--precision",
        "bf16",
        "--flags",
        ",".join(GNR_FLAGS),
        "--jsonl",
    )
    assert proc.returncode == 0, proc.stderr
    (record,) = [json.loads(line) for line in proc.stdout.splitlines()]
    assert record["value"] == 1 and record["verdict"] == EXECUTING
    assert record["implementation"] == "brg_matmul:avx10_1_512_amx"


def test_cli_bad_traces_one_line_exit_2(tmp_path):
    missing = _cli("platform", "amx", "--trace", str(tmp_path / "nope.log"))
    assert missing.returncode == 2
    assert missing.stderr.strip().count("\n") == 0 and "nope.log: cannot read" in missing.stderr
    empty = tmp_path / "empty.log"
    empty.write_text("hello\n")
    proc = _cli("platform", "amx", "--trace", str(empty))
    assert proc.returncode == 2 and "no onednn_verbose lines" in proc.stderr
    assert "Traceback" not in proc.stderr + missing.stderr


def test_live_probe_on_this_host_matches_its_cpuid(tmp_path):
    """About the host: the expected verdict follows this machine's CPUID (printed)."""
    pytest.importorskip("torch", reason="torch not installed (the ref extra)")
    flags = set(cpu_flags() or [])
    amx = "amx_tile" in flags
    print(f"host branch: {'AMX (amx_tile in CPUID)' if amx else 'no AMX in CPUID'}")
    proc = _cli("platform", "amx", "--jsonl", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = {r["run"]: r for r in map(json.loads, proc.stdout.splitlines())}
    assert set(records) == {"bf16", "int8", "fp32", "bf16-control"}
    assert {p.name for p in tmp_path.iterdir()} == {f"{r}.log" for r in records}
    for run, rec in records.items():
        print(f"{run}: {rec['verdict']}: {rec['reason']}")
        assert rec["isa"] != "unknown"  # the workload's FP32 GELU always prints the ISA line
    assert records["fp32"]["verdict"] == NOT_USED
    assert records["bf16-control"]["verdict"] == NOT_USED
    if amx:
        assert records["bf16"]["verdict"] == EXECUTING
        assert records["int8"]["verdict"] == EXECUTING
    else:
        for run in ("bf16", "int8"):
            assert records[run]["verdict"] == NOT_USED
            assert records[run]["reason"].startswith("no AMX on this host")
            assert "AMX" not in records[run]["isa"]
