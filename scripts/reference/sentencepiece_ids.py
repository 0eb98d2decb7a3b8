"""Token ids from the `sentencepiece` library for a GGUF's SentencePiece vocabulary, the
reference for engine/tests/tokenizer_reference.rs.

The GGUF holds the pieces, their scores and types, and the space-prefix flag, not the
original tokenizer.model; the model is rebuilt from them as a SentencePiece BPE model
(byte fallback, spaces escaped as U+2581, no other normalization: llama.cpp's reading of
the same metadata) and encoded by SentencePiece's own C++ encoder. As llama.cpp does with
special tokens parsed, the texts of control and user-defined pieces are cut out of the raw
text first (longest first, leftmost) and become their ids; SentencePiece encodes the text
between them.

  .venv/bin/python scripts/reference/sentencepiece_ids.py MODEL.gguf < texts.json

Reads a JSON list of strings on stdin; prints a JSON list of id lists.
"""

import json
import re
import sys

import sentencepiece as spm
from gguf import GGUFReader
from sentencepiece import sentencepiece_model_pb2 as pb


def field(reader, name, default=None):
    f = reader.fields.get(name)
    return default if f is None else f.contents()


def processor(path):
    reader = GGUFReader(path)
    assert field(reader, "tokenizer.ggml.model") == "llama", "not a SentencePiece vocabulary"
    tokens = field(reader, "tokenizer.ggml.tokens")
    scores = field(reader, "tokenizer.ggml.scores")
    types = field(reader, "tokenizer.ggml.token_type")
    model = pb.ModelProto()
    model.trainer_spec.model_type = pb.TrainerSpec.BPE
    model.trainer_spec.byte_fallback = True
    model.trainer_spec.unk_id = int(field(reader, "tokenizer.ggml.unknown_token_id", 0))
    # The special ids must name pieces of the right types, or none.
    model.trainer_spec.bos_id = -1
    model.trainer_spec.eos_id = -1
    model.trainer_spec.pad_id = -1
    model.normalizer_spec.name = "identity"
    model.normalizer_spec.add_dummy_prefix = bool(field(reader, "tokenizer.ggml.add_space_prefix", True))
    model.normalizer_spec.remove_extra_whitespaces = False
    model.normalizer_spec.escape_whitespaces = True
    for text, score, kind in zip(tokens, scores, types):
        piece = model.pieces.add()
        piece.piece = text
        piece.score = score
        piece.type = int(kind)
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(model.SerializeToString())
    special = {text: id for id, (text, kind) in enumerate(zip(tokens, types)) if kind in (3, 4)}
    return sp, special


def encode(sp, special, text):
    pattern = "|".join(re.escape(t) for t in sorted(special, key=len, reverse=True))
    ids, at = [], 0
    for match in re.finditer(pattern, text):
        if match.start() > at:
            ids += sp.encode(text[at:match.start()])
        ids.append(special[match.group()])
        at = match.end()
    if at < len(text):
        ids += sp.encode(text[at:])
    return ids


def main():
    sp, special = processor(sys.argv[1])
    texts = json.load(sys.stdin)
    json.dump([encode(sp, special, t) for t in texts], sys.stdout)


if __name__ == "__main__":
    main()
