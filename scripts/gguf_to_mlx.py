"""Convert a Llama-architecture GGUF file into a Hugging Face / MLX model folder.

Writes config.json, model.safetensors, tokenizer.json and tokenizer_config.json, so that
mlx-lm (and the engine's safetensors loader) can run the same weights as the GGUF file.

  --format exact  (default) Q4_0/Q4_1/Q8_0 tensors as MLX-quantized triplets with groups of
                  32, bit-identical to the GGUF blocks (scales and biases in float32, so
                  that mlx-lm computes in float32 like the engine on the CPU);
  --format mlx4   dequantized and re-quantized by MLX at 4 bits, group 64 (what
                  mlx-community publishes);
  --format dense  dequantized float32 weights.

llama.cpp stores the Q/K rows of the `llama` architecture permuted for interleaved RoPE;
they are permuted back to the Hugging Face layout here (rows of weight, scales and biases
alike, since quantization groups run along rows).

  .venv/bin/python scripts/gguf_to_mlx.py .data/models/SmolLM2-135M-Instruct.Q4_1.gguf OUT_DIR
"""

import argparse
import json
from pathlib import Path

import mlx.core as mx
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, AddedToken

GGUF_TO_HF = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def hf_name(name):
    base, suffix = name.rsplit(".", 1)
    if base == "token_embd":
        module = "model.embed_tokens"
    elif base == "output_norm":
        module = "model.norm"
    elif base == "output":
        module = "lm_head"
    else:
        _, layer, part = base.split(".", 2)
        module = f"model.layers.{layer}.{GGUF_TO_HF[part]}"
    return f"{module}.{suffix}"


def unpermute(rows, n_heads):
    """Inverse of llama.cpp's `permute`: (heads, 2, D/2) row order back to (heads, D/2, 2)."""
    shape = rows.shape
    head_dim = shape[0] // n_heads
    return rows.reshape(n_heads, head_dim // 2, 2, *shape[1:]).swapaxes(1, 2).reshape(shape)


def scalar(meta, key, default=None):
    value = meta.get(key, default)
    return value.item() if isinstance(value, mx.array) else value


def build_tokenizer(meta):
    """The byte-level BPE the GGUF describes, with the pre-tokenizer its `tokenizer.ggml.pre`
    names (llama.cpp's rules; SmolLM2's tokenizer.json uses the same Digits + ByteLevel)."""
    tokens = meta["tokenizer.ggml.tokens"]
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    pre = meta.get("tokenizer.ggml.pre", "default")
    if pre in ("smollm", "starcoder", "refact", "codeshell"):
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True),
             pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    elif pre in ("gpt2", "default"):
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        raise SystemExit(f"pre-tokenizer {pre!r} not handled by this script")
    tok.decoder = decoders.ByteLevel()
    types = meta["tokenizer.ggml.token_type"].tolist()
    tok.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types) if ty == 3])
    return tok, tokens


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("gguf")
    ap.add_argument("out")
    ap.add_argument("--format", choices=["exact", "mlx4", "dense"], default="exact")
    args = ap.parse_args()

    weights, meta = mx.load(args.gguf, return_metadata=True)
    arch = meta["general.architecture"]
    if arch != "llama":
        raise SystemExit(f"architecture {arch!r}: this script converts llama GGUFs")
    n_heads = scalar(meta, "llama.attention.head_count")
    n_kv = scalar(meta, "llama.attention.head_count_kv", n_heads)
    hidden = scalar(meta, "llama.embedding_length")

    out = {}
    bits_of = {}
    for name, array in weights.items():
        new = hf_name(name)
        if ".self_attn.q_proj." in new:
            array = unpermute(array, n_heads)
        elif ".self_attn.k_proj." in new:
            array = unpermute(array, n_kv)
        out[new] = array
    # Bits per quantized module, from the packed width: in = scales_cols * 32.
    for name in list(out):
        if name.endswith(".scales"):
            module = name[: -len(".scales")]
            packed = out[f"{module}.weight"].shape[-1]
            bits_of[module] = packed * 32 // (out[name].shape[-1] * 32)

    quantization = None
    if args.format == "exact":
        for name in out:
            if name.endswith((".scales", ".biases")):
                out[name] = out[name].astype(mx.float32)
        default_bits = max(set(bits_of.values()), key=list(bits_of.values()).count)
        quantization = {"group_size": 32, "bits": default_bits}
        for module, bits in bits_of.items():
            if bits != default_bits:
                quantization[module] = {"group_size": 32, "bits": bits}
    else:
        for module, bits in bits_of.items():
            w = mx.dequantize(out.pop(f"{module}.weight"), out.pop(f"{module}.scales"),
                              out.pop(f"{module}.biases"), group_size=32, bits=bits)
            if args.format == "mlx4":
                w, s, b = mx.quantize(w.astype(mx.float32), group_size=64, bits=4)
                out[f"{module}.weight"], out[f"{module}.scales"], out[f"{module}.biases"] = w, s, b
            else:
                out[f"{module}.weight"] = w.astype(mx.float32)
        if args.format == "mlx4":
            quantization = {"group_size": 64, "bits": 4}
    out = {k: (v.astype(mx.float32) if v.dtype in (mx.float16, mx.bfloat16) else v) for k, v in out.items()}

    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "num_hidden_layers": scalar(meta, "llama.block_count"),
        "intermediate_size": scalar(meta, "llama.feed_forward_length"),
        "num_attention_heads": n_heads,
        "num_key_value_heads": n_kv,
        "head_dim": hidden // n_heads,
        "rms_norm_eps": scalar(meta, "llama.attention.layer_norm_rms_epsilon"),
        "rope_theta": scalar(meta, "llama.rope.freq_base", 10000.0),
        "max_position_embeddings": scalar(meta, "llama.context_length"),
        "vocab_size": len(meta["tokenizer.ggml.tokens"]),
        "tie_word_embeddings": "lm_head.weight" not in out,
        "bos_token_id": scalar(meta, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": scalar(meta, "tokenizer.ggml.eos_token_id"),
        "torch_dtype": "float32",
    }
    if quantization:
        config["quantization"] = quantization

    dest = Path(args.out)
    dest.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(dest / "model.safetensors"), out, metadata={"format": "mlx"})
    (dest / "config.json").write_text(json.dumps(config, indent=2))
    tok, tokens = build_tokenizer(meta)
    tok.save(str(dest / "tokenizer.json"))
    bos, eos = (tokens[config["bos_token_id"]], tokens[config["eos_token_id"]])
    (dest / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": bos, "eos_token": eos, "add_bos_token": bool(scalar(meta, "tokenizer.ggml.add_bos_token", False)),
        "chat_template": meta.get("tokenizer.chat_template"),
        "clean_up_tokenization_spaces": False,
        "model_max_length": config["max_position_embeddings"],
    }, indent=2))
    print(f"wrote {dest} ({args.format}, quantization={quantization})")


if __name__ == "__main__":
    main()
