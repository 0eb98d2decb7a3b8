//! The tokenizer rebuilt from the offline SmolLM2 GGUF against reference ids.

mod offline;

use kivi_engine::tokenizer::{Message, Role, TextStream, Tokenizer};
use kivi_engine::weights::gguf::Gguf;

/// Produced by `scripts/reference/tokenizer_ids.py` (transformers' PreTrainedTokenizerFast
/// on the tokenizer.json of scripts/gguf_to_mlx.py, cross-checked on every digit-free
/// string against transformers' own GGUF tokenizer converter):
///
/// ```text
/// .venv/bin/python scripts/gguf_to_mlx.py .data/models/SmolLM2-135M-Instruct.Q4_1.gguf /tmp/smol-exact
/// .venv/bin/python scripts/reference/tokenizer_ids.py /tmp/smol-exact
/// ```
const REFERENCE: &[(&str, &[u32])] = &[
    ("Hello world", &[19556, 905]),
    ("Call me Ishmael. Some years ago--never mind how long precisely--having little or no money in my purse,", &[12800, 549, 46588, 30, 2015, 929, 3156, 423, 15661, 1945, 638, 986, 10031, 423, 32120, 1838, 355, 787, 2478, 281, 957, 42882, 28]),
    ("In 1851, 12345 whales; 3.14159 and 1,000,000.", &[788, 216, 33, 40, 37, 33, 28, 216, 33, 34, 35, 36, 37, 13346, 43, 216, 35, 30, 33, 36, 33, 37, 41, 284, 216, 33, 28, 32, 32, 32, 28, 32, 32, 32, 30]),
    ("  leading spaces\n\n\ttabs and\r\nnewlines   ", &[216, 2899, 5600, 1116, 197, 100, 7366, 284, 201, 198, 2241, 5110, 333]),
    ("naïve café, Straße, 日本語, Привет, emoji 🐳🐋!", &[3546, 46494, 37366, 28, 19144, 34878, 85, 28, 17097, 241, 115, 40993, 179, 120, 248, 28, 5470, 249, 46879, 16464, 32547, 28, 649, 33777, 15107, 234, 128, 10813, 234, 229, 17]),
    ("don't won't I'm you're they've we'll she'd", &[12420, 982, 3763, 982, 339, 5248, 346, 2316, 502, 3543, 392, 3060, 1041, 6737]),
    ("<|im_start|>user\nWhat is the whale's name?<|im_end|>\n<|im_start|>assistant\n", &[1, 4093, 198, 1780, 314, 260, 15682, 506, 1462, 47, 2, 198, 1, 520, 9531, 198]),
    ("def f(x):\n    return x**2  # square\n", &[1604, 275, 24, 104, 727, 472, 1003, 1792, 828, 34, 216, 907, 5222, 198]),
];

fn tokenizer() -> Tokenizer {
    let gguf = Gguf::open(&offline::smollm2_path()).expect("GGUF opens");
    Tokenizer::from_gguf(&gguf).expect("tokenizer builds from GGUF metadata")
}

#[test]
fn encodes_exactly_like_the_reference_and_decodes_back() {
    let tok = tokenizer();
    for (text, ids) in REFERENCE {
        assert_eq!(&tok.encode(text, false).unwrap(), ids, "{text:?}");
        // SmolLM2 adds no BOS, so special tokens change nothing for plain text.
        assert_eq!(&tok.encode(text, true).unwrap(), ids, "{text:?}");
        assert_eq!(&tok.decode(ids, false).unwrap(), text);
    }
}

#[test]
fn chat_template_and_stop_tokens_come_from_the_gguf() {
    let tok = tokenizer();
    let text = tok
        .apply_chat_template(
            &[
                Message::new(Role::System, "Be brief."),
                Message::new(Role::User, "What is the whale's name?"),
            ],
            true,
        )
        .unwrap();
    assert_eq!(
        text,
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is the whale's name?<|im_end|>\n<|im_start|>assistant\n"
    );
    let (_, reference) = REFERENCE[6];
    assert!(tok.encode(&text, false).unwrap().ends_with(reference));
    // <|im_end|> (the GGUF's EOS) ends a turn; so does <|endoftext|>.
    assert!(tok.is_stop(2) && tok.is_stop(0));
    assert!(!tok.is_stop(1));
    assert_eq!(tok.vocab_size(), 49152);
}

#[test]
fn streaming_decode_emits_whole_characters_only() {
    let tok = tokenizer();
    let (text, ids) = REFERENCE[4];
    let mut stream = TextStream::new();
    let mut pieces = Vec::new();
    for &id in ids {
        if let Some(piece) = stream.push(&tok, id).unwrap() {
            pieces.push(piece);
        }
    }
    pieces.extend(stream.flush(&tok).unwrap());
    assert_eq!(pieces.concat(), text);
    assert!(pieces.iter().all(|p| !p.contains('\u{FFFD}')), "{pieces:?}");
    // The whale emoji spans several byte-level tokens: some pushes emit nothing.
    assert!(pieces.len() < ids.len());
}
