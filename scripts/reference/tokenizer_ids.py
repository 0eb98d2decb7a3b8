"""Reference token ids for engine/tests/tokenizer_reference.rs.

Two independent builds of the offline SmolLM2's tokenizer, both from the GGUF metadata:

1. transformers' own GGUF tokenizer converter
   (transformers.integrations.gguf.gguf_tokenizer_mapping.convert_gguf_tokenizer, metadata
   read with the `gguf` package). It gives a "smollm" vocabulary GPT-2's split and so does
   not isolate digits, unlike llama.cpp and SmolLM2's published tokenizer.json: it is the
   reference for the strings without digits.
2. transformers' PreTrainedTokenizerFast on the tokenizer.json written by
   scripts/gguf_to_mlx.py (Digits(individual) + ByteLevel, as SmolLM2 publishes it).

Both must agree on every string without digits; the ids printed are those of (2).

  .venv/bin/python scripts/gguf_to_mlx.py .data/models/SmolLM2-135M-Instruct.Q4_1.gguf /tmp/smol-exact
  .venv/bin/python scripts/reference/tokenizer_ids.py /tmp/smol-exact
"""

import sys
from pathlib import Path

from gguf import GGUFReader
from transformers import PreTrainedTokenizerFast
from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer

ROOT = Path(__file__).resolve().parents[2]
GGUF = ROOT / ".data/models/SmolLM2-135M-Instruct.Q4_1.gguf"

TEXTS = [
    "Hello world",
    "Call me Ishmael. Some years ago--never mind how long precisely--having little or no money in my purse,",
    "In 1851, 12345 whales; 3.14159 and 1,000,000.",
    "  leading spaces\n\n\ttabs and\r\nnewlines   ",
    "naïve café, Straße, 日本語, Привет, emoji 🐳🐋!",
    "don't won't I'm you're they've we'll she'd",
    "<|im_start|>user\nWhat is the whale's name?<|im_end|>\n<|im_start|>assistant\n",
    "def f(x):\n    return x**2  # square\n",
]


def gguf_tokenizer_dict():
    reader = GGUFReader(str(GGUF))

    strings = lambda key: [bytes(reader.fields[key].parts[i]).decode("utf-8") for i in reader.fields[key].data]
    numbers = lambda key: [reader.fields[key].parts[i].tolist()[0] for i in reader.fields[key].data]
    return {
        "tokenizer_type": strings("tokenizer.ggml.model")[0],
        "pre_tokenizer_type": strings("tokenizer.ggml.pre")[0],
        "tokens": strings("tokenizer.ggml.tokens"),
        "merges": strings("tokenizer.ggml.merges"),
        "token_type": numbers("tokenizer.ggml.token_type"),
        "bos_token_id": numbers("tokenizer.ggml.bos_token_id")[0],
        "eos_token_id": numbers("tokenizer.ggml.eos_token_id")[0],
    }


def main():
    converted, _ = convert_gguf_tokenizer("llama", gguf_tokenizer_dict())
    fast = PreTrainedTokenizerFast(tokenizer_file=str(Path(sys.argv[1]) / "tokenizer.json"))
    for text in TEXTS:
        ids = fast.encode(text, add_special_tokens=False)
        other = converted.encode(text, add_special_tokens=False).ids
        if not any(c.isdigit() for c in text):
            assert ids == other, (text, ids, other)
        print(f"    ({text!r}, &{ids}),")


if __name__ == "__main__":
    main()
