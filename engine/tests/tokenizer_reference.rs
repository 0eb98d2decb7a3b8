//! The tokenizers rebuilt from the offline GGUFs against reference ids: SmolLM2's byte-level
//! BPE against transformers, Gemma 3's SentencePiece vocabulary against the `sentencepiece`
//! library.

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

/// What the `sentencepiece` library encodes `texts` to, with the vocabulary of the GGUF at
/// `path` (`scripts/reference/sentencepiece_ids.py`).
fn sentencepiece_ids(path: &std::path::Path, texts: &[String]) -> Vec<Vec<u32>> {
    use std::io::Write;
    let root = offline::workspace_root();
    let mut child = std::process::Command::new(root.join(".venv/bin/python"))
        .arg(root.join("scripts/reference/sentencepiece_ids.py"))
        .arg(path)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the project's .venv Python runs (scripts/setup.sh venv)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(serde_json::to_string(texts).unwrap().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "sentencepiece_ids.py failed");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Texts that reach every rule: the strings above, runs of spaces and newlines (Gemma's
/// user-defined pieces), control tokens inside text, characters no piece covers (byte
/// fallback), and pages of both offline texts.
fn sentencepiece_texts() -> Vec<String> {
    let root = offline::workspace_root();
    let moby = std::fs::read_to_string(root.join(".data/texts/moby-dick.txt")).unwrap();
    let sotu_dir = root.join(".data/texts/sotu");
    let mut sotu_files: Vec<_> = std::fs::read_dir(&sotu_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    sotu_files.sort();
    let sotu = std::fs::read_to_string(sotu_files.last().unwrap()).unwrap();
    let page = |text: &str, from: usize, chars: usize| -> String {
        text.chars().skip(from).take(chars).collect()
    };
    let mut texts: Vec<String> = REFERENCE.iter().map(|(t, _)| t.to_string()).collect();
    texts.extend([
        "a  b   c    d\t\te".to_string(),
        format!("end{}start", "\n".repeat(40)),
        " leading space and trailing space ".to_string(),
        "<start_of_turn>user\nWho is Ahab?<end_of_turn>\n<start_of_turn>model\n".to_string(),
        "rare: \u{1F9FF}\u{10FFFD}\u{0}\u{7}".to_string(),
        String::new(),
        page(&moby, 0, 20_000),
        page(&moby, 600_000, 20_000),
        page(&sotu, 0, 20_000),
    ]);
    texts
}

#[test]
fn sentencepiece_vocabularies_encode_as_the_sentencepiece_library_does() {
    let path = offline::gemma3_path();
    let started = std::time::Instant::now();
    let tok = Tokenizer::from_gguf(&Gguf::open(&path).expect("GGUF opens"))
        .expect("the SentencePiece tokenizer builds from GGUF metadata");
    println!("built in {:?}", started.elapsed());
    let texts = sentencepiece_texts();
    let reference = sentencepiece_ids(&path, &texts);
    let mut tokens = 0;
    for (text, want) in texts.iter().zip(&reference) {
        let got = tok.encode(text, false).unwrap();
        if &got != want {
            let at = got.iter().zip(want).take_while(|(a, b)| a == b).count();
            panic!(
                "{:?}...: ids differ from sentencepiece's at {at}: {:?} vs {:?}",
                text.chars().take(60).collect::<String>(),
                &got[at..(at + 8).min(got.len())],
                &want[at..(at + 8).min(want.len())],
            );
        }
        tokens += got.len();
        // No space prefix in Gemma's vocabulary: decoding gives the text back, special
        // tokens included.
        assert_eq!(&tok.decode(&got, false).unwrap(), text);
    }
    println!(
        "{} texts, {tokens} tokens, equal to sentencepiece's",
        texts.len()
    );
    // Gemma 3 adds its BOS; its end of turn stops generation.
    assert_eq!(tok.encode("Hi", true).unwrap()[0], 2);
    let end_of_turn = tok.token_id("<end_of_turn>").unwrap();
    assert!(tok.is_stop(end_of_turn) && tok.is_stop(1));
}
