"""Tiny random-weight checkpoints of the other model families, with mlx-lm's logits.

No real Qwen2 or Mistral weights are available offline, so each family gets a two-layer
model with random weights, saved as a Hugging Face / MLX folder under
engine/tests/fixtures/tiny-<name>/ together with reference.json: the logits mlx-lm
computes after loading that folder back (mlx_lm.load, its own model code). The engine's
tests load the same folders and must produce the same logits.

  tiny-llama3   Llama with Llama 3.1 RoPE scaling and tied embeddings
  tiny-mistral  Mistral (Llama architecture in mlx-lm) with an explicit head_dim
                larger than hidden/heads, and an untied lm_head
  tiny-qwen2    Qwen2 (q/k/v biases, rope_theta 1e6), MLX-quantized at 4 bits, group 64
  tiny-qwen3    Qwen3 (per-head query and key norms, no biases, head_dim 32 larger than
                hidden/heads), float32; beside it model.gguf, the same weights as llama.cpp's
                converter lays them out (architecture `qwen3`, F32 tensors)
  tiny-gemma3   Gemma 3 text: layers alternating an 8-token sliding window (local RoPE
                base) with global attention, query and key norms, four norms per block,
                GELU, scaled embeddings, a query scale that is not head_dim's; 48 tokens,
                six windows long

  .venv/bin/python scripts/reference/tiny_models.py [NAME...]
"""

import json
import sys
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_map
from mlx_lm import load
from mlx_lm.utils import _get_classes
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
import numpy as np
from gguf import GGUFWriter

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "engine/tests/fixtures"

BASE = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-5,
    "vocab_size": 256,
    "max_position_embeddings": 256,
}

MODELS = {
    "tiny-llama3": dict(BASE, model_type="llama", rope_theta=10000.0, tie_word_embeddings=True,
                        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 16}),
    "tiny-mistral": dict(BASE, model_type="mistral", rope_theta=1000000.0, head_dim=32,
                         tie_word_embeddings=False, sliding_window=4096),
    "tiny-qwen2": dict(BASE, model_type="qwen2", rope_theta=1000000.0, tie_word_embeddings=True,
                       quantization={"group_size": 64, "bits": 4}),
    "tiny-qwen3": dict(BASE, model_type="qwen3", rope_theta=1000000.0, head_dim=32,
                       tie_word_embeddings=True, vocab_size=258),
    "tiny-gemma3": dict(BASE, model_type="gemma3_text", head_dim=32, num_hidden_layers=4,
                        sliding_window=8, sliding_window_pattern=2, rope_theta=1000000.0,
                        rope_local_base_freq=10000.0, query_pre_attn_scalar=24,
                        rms_norm_eps=1e-6),
}

# Prompts longer than the default one, by fixture.
LONG_TOKENS = {
    "tiny-gemma3": list(b"Call me Ishmael. Some years ago--never mind how "),
}

# The fixtures also written as GGUF (model.gguf beside the safetensors).
GGUF_EXPORTS = {"tiny-qwen3"}

# Prompt ids (bytes of "The whale, 1851!" in the byte-level vocabulary).
TOKENS = [84, 104, 101, 32, 119, 104, 97, 108, 101, 44, 32, 49, 56, 53, 49, 33]


def byte_tokenizer():
    """Byte-level BPE over the 256 byte symbols, no merges: one token per byte."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    from transformers.convert_slow_tokenizer import bytes_to_unicode
    symbols = bytes_to_unicode()
    assert set(symbols.values()) == set(alphabet)
    vocab = {symbols[b]: b for b in range(256)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok


def make(name, config):
    mx.random.seed(sum(map(ord, name)))
    model_class, args_class = _get_classes(config)
    model = model_class(args_class.from_dict(config))
    # Random everything, norms included (they are ones by default and would hide a bug).
    params = tree_map(lambda p: mx.random.normal(p.shape) * 0.2, model.parameters())
    model.update(params)
    if "quantization" in config:
        q = config["quantization"]
        nn.quantize(model, group_size=q["group_size"], bits=q["bits"])
    mx.eval(model.parameters())

    dest = FIXTURES / name
    dest.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(dest / "model.safetensors"), dict(tree_flatten(model.parameters())),
                        metadata={"format": "mlx"})
    (dest / "config.json").write_text(json.dumps(config, indent=1))
    byte_tokenizer().save(str(dest / "tokenizer.json"))
    (dest / "tokenizer_config.json").write_text(json.dumps({"eos_token": None, "bos_token": None}))

    # The reference: what mlx-lm computes after loading the folder back.
    reference_model, _ = load(str(dest))
    tokens = LONG_TOKENS.get(name, TOKENS)
    logits = reference_model(mx.array([tokens]))[0].astype(mx.float32)
    (dest / "reference.json").write_text(json.dumps({
        "source": "scripts/reference/tiny_models.py, mlx_lm.load + forward",
        "tokens": tokens,
        "logits": [[round(v, 6) for v in row] for row in logits.tolist()],
    }))
    if name in GGUF_EXPORTS:
        write_gguf(dest / "model.gguf", config, dict(tree_flatten(model.parameters())))
    print(f"wrote {dest}")


# Hugging Face tensor names (after `model.layers.N.`) as llama.cpp's converter names them.
GGUF_NAMES = {
    "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def write_gguf(path, config, params):
    """The checkpoint as a GGUF file: F32 tensors under llama.cpp's names (Qwen rows are not
    permuted), the hyper-parameters under `<arch>.`, and the byte vocabulary as a GPT-2 style
    tokenizer (GGUF needs at least one merge: "h e" and "Ġ t" are added, ids 256 and 257,
    which is why this model's vocabulary has 258 entries)."""
    arch = config["model_type"]
    w = GGUFWriter(str(path), arch)
    w.add_context_length(config["max_position_embeddings"])
    w.add_embedding_length(config["hidden_size"])
    w.add_block_count(config["num_hidden_layers"])
    w.add_feed_forward_length(config["intermediate_size"])
    w.add_head_count(config["num_attention_heads"])
    w.add_head_count_kv(config["num_key_value_heads"])
    w.add_key_length(config["head_dim"])
    w.add_value_length(config["head_dim"])
    w.add_layer_norm_rms_eps(config["rms_norm_eps"])
    w.add_rope_freq_base(config["rope_theta"])
    w.add_file_type(0)
    from transformers.convert_slow_tokenizer import bytes_to_unicode
    symbols = bytes_to_unicode()
    tokens = [symbols[b] for b in range(256)] + ["he", "\u0120t"]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types([1] * len(tokens))
    w.add_token_merges(["h e", "\u0120 t"])
    for name, value in params.items():
        if name == "model.embed_tokens.weight":
            gguf_name = "token_embd.weight"
        elif name == "model.norm.weight":
            gguf_name = "output_norm.weight"
        elif name == "lm_head.weight":
            gguf_name = "output.weight"
        else:
            _, _, layer, rest = name.split(".", 3)
            module, suffix = rest.rsplit(".", 1)
            gguf_name = f"blk.{layer}.{GGUF_NAMES[module]}.{suffix}"
        w.add_tensor(gguf_name, np.array(value.astype(mx.float32)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    names = sys.argv[1:] or list(MODELS)
    for name in names:
        make(name, MODELS[name])


if __name__ == "__main__":
    main()
