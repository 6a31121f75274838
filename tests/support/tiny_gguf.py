"""Write a tiny random-weight llama-architecture GGUF that llama.cpp loads and serves.

Recipe from shared/reference/this-machine.md §5: 2 layers, n_embd 64, an SPM vocabulary of
unique token strings (llama.cpp aborts on duplicates), F32 weights, about 0.5 MB. With random
weights the model emits EOS and byte tokens early, so clients pass ``SUPPRESS_LOGIT_BIAS``.
"""

from __future__ import annotations

import string
import sys
from pathlib import Path

EOS_ID = 2
BYTE_IDS = range(3, 259)
#: logit_bias that keeps the random model from stopping (EOS) or emitting byte tokens,
#: which would give empty or merged chunks.
SUPPRESS_LOGIT_BIAS = {str(i): -100 for i in [EOS_ID, *BYTE_IDS]}


def write_tiny_gguf(out: Path | str, seed: int = 0, n_layer: int = 2) -> Path:
    import gguf
    import numpy as np

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    n_embd, n_head, n_head_kv, n_ff, n_ctx = 64, 4, 4, 128, 512
    rng = np.random.default_rng(seed)
    tokens = ["<unk>", "<s>", "</s>"]
    scores = [0.0, 0.0, 0.0]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        scores.append(0.0)
        types.append(gguf.TokenType.BYTE)
    pieces = ["\u2581"] + ["\u2581" + c for c in string.ascii_letters + string.digits]
    pieces += list(string.ascii_letters + string.digits + string.punctuation)
    pieces += [
        "\u2581the",
        "\u2581and",
        "\u2581hello",
        "\u2581world",
        "ing",
        "ed",
        "er",
        "\u2581is",
    ]
    pieces = list(dict.fromkeys(pieces))  # llama.cpp asserts token strings are unique
    for i, p in enumerate(pieces):
        tokens.append(p)
        scores.append(-float(i))
        types.append(gguf.TokenType.NORMAL)
    n_vocab = len(tokens)

    w = gguf.GGUFWriter(str(out), "llama")
    w.add_name("tiny-random-llama")
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(EOS_ID)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_chat_template(
        "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )

    def t(name, shape, scale=0.02):
        w.add_tensor(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    # numpy shape = (out, in)  ->  ggml ne = (in, out)
    t("token_embd.weight", (n_vocab, n_embd), 1.0)
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    t("output.weight", (n_vocab, n_embd), 0.5)
    kv = n_embd // n_head * n_head_kv
    for i in range(n_layer):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        t(f"blk.{i}.attn_q.weight", (n_embd, n_embd))
        t(f"blk.{i}.attn_k.weight", (kv, n_embd))
        t(f"blk.{i}.attn_v.weight", (kv, n_embd))
        t(f"blk.{i}.attn_output.weight", (n_embd, n_embd))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        t(f"blk.{i}.ffn_gate.weight", (n_ff, n_embd))
        t(f"blk.{i}.ffn_up.weight", (n_ff, n_embd))
        t(f"blk.{i}.ffn_down.weight", (n_embd, n_ff))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


if __name__ == "__main__":
    print(write_tiny_gguf(sys.argv[1] if len(sys.argv) > 1 else "tiny-llama.gguf"))
