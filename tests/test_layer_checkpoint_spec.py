"""Real weights from a spec (issue 27 item 4): a `layer_dump:` block naming a checkpoint folder
and a layer; the controller generates the dump from the checkpoint's tensors, keyed by the
digest of its config and the layer's tensors, and native/layer runs it through `orchestrate
run`. The checkpoint is generated here in the real Hugging Face layout (transformers +
safetensors, BF16, Gemma-4 names)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from socketlab.errors import SocketlabError
from socketlab.layer.cache import dump_ref
from socketlab.layer.checkpoint import checkpoint_shape, layer_tensors, read_header
from socketlab.layer.dump import Dump
from tests.support.campaign import stored, write_spec
from tests.support.tiny_checkpoint import tiny_checkpoint

ORCHESTRATE = Path(sys.executable).parent / "orchestrate"


@pytest.fixture(autouse=True)
def _builtin_sys_intern(monkeypatch):
    """As tests/test_layer_reference.py: give torch's import the builtin sys.intern back."""
    original = getattr(type(sys.intern), "unpatched_implementation", None)
    if original is not None:
        monkeypatch.setattr(sys, "intern", original)


def spec_body(layer: int) -> dict:
    return {
        "campaign": "ckpt-layer",
        "hosts": {"pattern": "localhost"},
        "builds": {"native": {"source": ".", "target": "build/cc/layer"}},
        "experiments": [
            {
                "name": "layer-ckpt",
                "build": "native",
                "layer_dump": {
                    "shape": "tiny-full" if layer else "tiny",
                    "context": 64,
                    "batch": "{{ batch }}",
                    "checkpoint": "ckpt",
                    "layer": layer,
                },
                "command": [
                    "{{ build.dir }}/layer",
                    "--dump={{ dump.dir }}",
                    "--cpus=0",
                    "--gemv=avx2",
                    "--batch={{ batch }}",
                    "--steps=6",
                    "--timeout=120",
                ],
                "sweep": {"matrix": {"batch": [2]}},
                "metrics": {"parser": "jsonl"},
                "sanity": {"exit_codes": [0], "required_metrics": ["step_p50"]},
            }
        ],
    }


def raw_tensors(ckpt: Path, layer: int) -> dict[str, np.ndarray]:
    """The layer's tensors as the file holds them (uint16 BF16 bit patterns)."""
    shape = checkpoint_shape(ckpt, layer)
    out = {}
    for param, (path, _, info, data0) in layer_tensors(ckpt, shape, layer).items():
        a, z = info["data_offsets"]
        raw = np.fromfile(path, dtype="<u2", count=(z - a) // 2, offset=data0 + a)
        out[param] = raw.reshape(info["shape"])
    return out


def test_a_spec_runs_a_checkpoints_layer_bit_for_bit(tmp_path):
    ckpt = tiny_checkpoint(tmp_path / "ckpt")
    spec = write_spec(tmp_path / "ckpt.yaml", spec_body(layer=0))
    cache = tmp_path / "dump-cache"
    env = {**os.environ, "SOCKETLAB_DUMP_CACHE": str(cache)}
    proc = subprocess.run(
        [str(ORCHESTRATE), "run", str(spec), "--plain", "--results", str(tmp_path / "res")],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = stored(tmp_path / "res", "ckpt-layer")
    assert [r.status for r in runs.values()] == ["ok"]  # the stage's gate passed
    (dump_dir,) = [d for d in cache.iterdir() if d.is_dir() and not d.name.startswith(".")]
    ref = dump_ref("tiny", 64, 2, 1, checkpoint=str(ckpt), layer=0)
    assert dump_dir.name == ref.key and "-ck" in ref.key and "L0-" in ref.key
    d = Dump(dump_dir)
    assert d.meta["weights"] == "checkpoint" and d.meta["hf"] == str(ckpt)
    want = raw_tensors(ckpt, 0)
    assert len(want) == 17  # 16 weights + layer_scalar (the vision tensor skipped)
    for param, bits in want.items():
        # layer_scalar is f32 in the dump: the BF16 value widened exactly
        got = d.f32(param).view(np.uint32) >> 16 if param == "layer_scalar" else d.raw(f"w.{param}")
        assert np.array_equal(got.reshape(bits.shape), bits), param  # bit for bit
    print(f"{len(want)} tensors of layer 0 bit for bit in {dump_dir.name}")


def test_the_key_follows_the_checkpoints_tensors_and_bad_input_is_one_line(tmp_path):
    ckpt = tiny_checkpoint(tmp_path / "ckpt")
    a = dump_ref("tiny", 64, 2, 1, checkpoint=str(ckpt), layer=0)
    assert a == dump_ref("tiny", 64, 2, 1, checkpoint=str(ckpt), layer=0)
    assert a.key != dump_ref("tiny", 64, 2, 1).key
    assert dump_ref("tiny-full", 64, 2, 1, checkpoint=str(ckpt), layer=1).key != a.key
    # the same names, headers and sizes, one value changed: another digest
    f = ckpt / "model.safetensors"
    header, data0 = read_header(f)
    a0, _ = header["model.language_model.layers.0.mlp.down_proj.weight"]["data_offsets"]
    raw = bytearray(f.read_bytes())
    raw[data0 + a0] ^= 0x01
    f.write_bytes(bytes(raw))
    assert dump_ref("tiny", 64, 2, 1, checkpoint=str(ckpt), layer=0).key != a.key
    with pytest.raises(SocketlabError, match=r"layer 0: attention 'sliding', but .*tiny-full"):
        dump_ref("tiny-full", 64, checkpoint=str(ckpt), layer=0)
    with pytest.raises(SocketlabError, match="expected both or neither"):
        dump_ref("tiny", 64, checkpoint=str(ckpt))
    # through a spec: a missing folder is one line naming the spec's line and field
    body = spec_body(layer=0)
    body["experiments"][0]["layer_dump"]["checkpoint"] = "nosuch"
    spec = write_spec(tmp_path / "bad.yaml", body)
    proc = subprocess.run(
        [str(ORCHESTRATE), "plan", str(spec)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2, proc.stderr
    assert (
        "layer_dump.shape: on host localhost:" in proc.stderr
        and "no such directory" in proc.stderr
        and len(proc.stderr.strip().splitlines()) == 1
    )
