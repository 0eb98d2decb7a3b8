"""Reference logits and a greedy continuation from mlx-lm for the offline SmolLM2.

mlx-lm runs the same weights as the GGUF file after scripts/gguf_to_mlx.py (--format
exact: bit-identical quantized blocks, Q/K rows in the Hugging Face layout), with its own
Llama implementation. Writes engine/tests/fixtures/smollm2_mlx_lm.json, which
engine/tests/mlx_lm_reference.rs compares the engine against.

  .venv/bin/python scripts/gguf_to_mlx.py .data/models/SmolLM2-135M-Instruct.Q4_1.gguf /tmp/smol-exact
  .venv/bin/python scripts/reference/mlx_lm_smollm2.py /tmp/smol-exact
"""

import json
import sys
from pathlib import Path

import mlx.core as mx
from mlx_lm import load

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "engine/tests/fixtures/smollm2_mlx_lm.json"

LOGITS_PROMPT = "The whale surfaced near the ship, and Ahab"
STORY_PROMPT = "Once upon a time, there was a little"
# A long prompt (the start of Moby-Dick's first chapter, cut to LONG_TOKENS tokens), so
# that the engine's chunked prefill (several chunks, the dense matmul path) is checked.
LONG_TEXT = ROOT / ".data/texts/moby-dick/chapter_1.txt"
LONG_TOKENS = 600
GREEDY_TOKENS = 24
TOP = 8


def main():
    model, tokenizer = load(sys.argv[1])
    ids = tokenizer.encode(LOGITS_PROMPT, add_special_tokens=False)
    logits = model(mx.array([ids]))[0].astype(mx.float32)  # [L, vocab]
    positions = []
    for row in logits:
        top = mx.argsort(-row)[:TOP].tolist()
        positions.append({"top_ids": top, "top_logits": row[mx.array(top)].tolist()})

    long_ids = tokenizer.encode(LONG_TEXT.read_text(), add_special_tokens=False)[:LONG_TOKENS]
    last = model(mx.array([long_ids]))[0, -1].astype(mx.float32)
    long_top = mx.argsort(-last)[:TOP].tolist()

    story = tokenizer.encode(STORY_PROMPT, add_special_tokens=False)
    generated = []
    tokens = list(story)
    for _ in range(GREEDY_TOKENS):
        # No cache: the full sequence every step, the plainest possible reference.
        out = model(mx.array([tokens]))[0, -1]
        token = int(mx.argmax(out).item())
        generated.append(token)
        tokens.append(token)

    OUT.write_text(json.dumps({
        "source": "mlx-lm " + __import__("mlx_lm").__version__ + " on scripts/gguf_to_mlx.py --format exact",
        "logits_prompt": LOGITS_PROMPT,
        "logits_prompt_ids": ids,
        "positions": positions,
        "long_prompt_ids": long_ids,
        "long_last": {"top_ids": long_top, "top_logits": last[mx.array(long_top)].tolist()},
        "story_prompt": STORY_PROMPT,
        "story_prompt_ids": story,
        "greedy_ids": generated,
        "greedy_text": tokenizer.decode(generated),
    }, indent=1))
    print(f"wrote {OUT}: greedy {tokenizer.decode(generated)!r}")


if __name__ == "__main__":
    main()
