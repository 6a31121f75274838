"""A small Gemma-4 text checkpoint in the real Hugging Face layout, written by transformers and
safetensors: BF16 tensors named model.language_model.layers.N.* (the multimodal layout), a vision
tower tensor to skip, config.json with a text_config. Layer 0 is tiny.yaml's shape (sliding),
layer 1 tiny-full.yaml's (full attention)."""

from __future__ import annotations

import json
from pathlib import Path


def tiny_checkpoint(path: Path, drop: str | None = None, seed: int = 0) -> Path:
    """Write the checkpoint to `path` (created); `drop` leaves one tensor out."""
    import torch
    from safetensors.torch import save_file
    from transformers.models.gemma4 import Gemma4TextConfig
    from transformers.models.gemma4.modeling_gemma4 import Gemma4TextDecoderLayer

    torch.manual_seed(seed)
    cfg = Gemma4TextConfig(
        vocab_size=256,
        vocab_size_per_layer_input=256,
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        global_head_dim=128,
        sliding_window=32,
        hidden_size_per_layer_input=64,
        layer_types=["sliding_attention", "full_attention"],
        num_kv_shared_layers=0,
    )
    tensors = {}
    for i in range(2):
        layer = Gemma4TextDecoderLayer(cfg, i)
        with torch.no_grad():  # HF inits norms to 1 and the scalar to 1: make them visible
            for p in layer.parameters():
                if p.ndim == 1:
                    p.add_(torch.randn_like(p) * 0.1)
            layer.layer_scalar.fill_(0.75)
        for k, v in layer.state_dict().items():
            tensors[f"model.language_model.layers.{i}.{k}"] = v.to(torch.bfloat16).contiguous()
    tensors["model.vision_tower.encoder.layers.1.mlp.up_proj.weight"] = torch.zeros(2, 2)
    if drop:
        del tensors[drop]
    path.mkdir(parents=True)
    save_file(tensors, str(path / "model.safetensors"))
    (path / "config.json").write_text(
        json.dumps({"model_type": "gemma4", "text_config": cfg.to_dict()})
    )
    return path
