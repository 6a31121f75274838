"""One Gemma-4 decoder layer as data: shapes, weights, the FP32/BF16 reference, dumps.

Modules: shapes (shape files), weights (random or checkpoint), rope, history (the KV cache),
reference (the math at every op boundary), generate (build + write a dump), dump (the format
native/layer reads), check (re-read a dump, gate a result), checkpoint (safetensors). See
docs/layer.md.
"""

VERSION = 2  # 2: meta.json gained bf16_ref_spread (dump caches keyed by it regenerate)
