//! Reliability: settings and requests the engine must refuse, with a message that says
//! what to change, and after which it keeps working. Runs on the tiny random-weight
//! Llama 3 (fast); document extraction itself (empty, binary, PDFs without text,
//! encodings) is tested in `src/document/tests.rs`, and the cases below feed its
//! refusals and its output to the engine.

mod reliability_common;

use kivi_engine::cache::{CacheConfig, ConfigError, KiviConfig};
use kivi_engine::document::{extract, DocumentError};
use kivi_engine::sampling::SamplingParams;
use kivi_engine::session::{
    Document, Engine, EngineOptions, Event, FinishReason, ModelSource, Prompt, Request,
};
use kivi_engine::tokenizer::{Message, Role};
use reliability_common::*;

async fn tiny_engine(dir: &tempfile::TempDir, context: usize) -> Engine {
    let mut options = EngineOptions::new(ModelSource::Path(dir.path().to_path_buf()));
    options.context_length = Some(context);
    options.prefill_chunk = 32;
    Engine::load(options).await.expect("the tiny model loads")
}

/// Runs a request: its text, generated token count, how it ended, and its error message
/// if it failed. (Token events can outnumber tokens: the last one may carry the rest of
/// a partial character.)
async fn run(
    engine: &Engine,
    request: Request,
) -> (String, usize, Option<FinishReason>, Option<String>) {
    let mut generation = engine.generate(request);
    let (mut text, mut generated, mut reason, mut error) = (String::new(), 0, None, None);
    while let Some(event) = generation.next().await {
        match event {
            Event::Done {
                reason: r,
                text: t,
                stats,
            } => {
                reason = Some(r);
                text = t;
                generated = stats.generated_tokens;
            }
            Event::Error { message } => error = Some(message),
            _ => {}
        }
    }
    (text, generated, reason, error)
}

fn text(prompt: &str, max_tokens: usize) -> Request {
    let mut r = Request::text(prompt);
    r.sampling = SamplingParams::greedy();
    r.max_tokens = max_tokens;
    r
}

fn chat_with(document: &str, max_tokens: usize) -> Request {
    Request {
        prompt: Prompt::Chat {
            messages: vec![Message::new(Role::User, "What does it say?")],
            documents: vec![Document {
                name: "doc.txt".into(),
                text: document.into(),
            }],
        },
        sampling: SamplingParams::greedy(),
        max_tokens,
        cache: None,
        format: None,
    }
}

#[test]
fn cache_settings_outside_the_supported_ones_are_refused() {
    for (bits_k, bits_v) in [(3, 2), (2, 8), (1, 1), (0, 4), (16, 16)] {
        let err = KiviConfig::new(bits_k, bits_v, 32, 128).unwrap_err();
        assert!(matches!(err, ConfigError::Bits { .. }), "{err}");
        assert!(err.to_string().contains("must be 2 or 4"), "{err}");
    }
    let err = KiviConfig::new(2, 2, 32, 100).unwrap_err();
    assert!(
        matches!(
            err,
            ConfigError::Residual {
                residual: 100,
                group: 32
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("multiple of the group size 32"),
        "{err}"
    );
    assert!(matches!(
        KiviConfig::new(2, 2, 48, 96),
        Err(ConfigError::GroupSize(48))
    ));
    // The same settings arriving as text (CLI, server) or JSON (app, server requests).
    for bad in [
        "k3v2",
        "k2v2-r100",
        "k2v2-g48",
        "k2v2-g32-r-1",
        "kivi",
        "k2v2-x",
    ] {
        let err = bad.parse::<CacheConfig>().unwrap_err();
        assert!(!err.to_string().is_empty(), "{bad}");
    }
    let request = serde_json::json!({
        "prompt": {"text": "hi"},
        "sampling": {},
        "max_tokens": 4,
        "cache": {"kind": "kivi", "key_bits": 8, "value_bits": 2, "group_size": 32, "residual_length": 128},
    });
    let err = serde_json::from_value::<Request>(request.clone()).unwrap_err();
    assert!(err.to_string().contains("key bits must be 2 or 4"), "{err}");
    let mut residual = request;
    residual["cache"]["key_bits"] = 2.into();
    residual["cache"]["residual_length"] = 40.into();
    let err = serde_json::from_value::<Request>(residual).unwrap_err();
    assert!(
        err.to_string().contains("multiple of the group size"),
        "{err}"
    );
}

#[tokio::test]
async fn prompts_and_documents_longer_than_the_context_are_refused() {
    let dir = tiny_copy(4096);
    let engine = tiny_engine(&dir, 64).await;
    assert_eq!(engine.context_length(), 64);
    // The tiny vocabulary is byte-level: one token per ASCII character.
    let (out, _, _, error) = run(&engine, text(&"x".repeat(100), 4)).await;
    let message = error.expect("an error event");
    assert!(
        message.contains("the prompt is 100 tokens but the context holds 64")
            && message.contains("shorten"),
        "{message}"
    );
    assert!(out.is_empty());
    // Exactly at the limit: the prompt fills the context, no room to answer.
    let (_, _, _, error) = run(&engine, text(&"x".repeat(64), 4)).await;
    assert!(error.unwrap().contains("context holds 64"));

    let (_, _, _, error) = run(&engine, chat_with(&"Call me Ishmael. ".repeat(10), 4)).await;
    assert!(error.unwrap().contains("context holds 64"));

    // The engine still answers a request that fits, and stops at the context's end.
    let (_, generated, reason, error) = run(&engine, text("Call me", 1000)).await;
    assert_eq!(error, None);
    assert_eq!(reason, Some(FinishReason::ContextFull));
    assert_eq!(generated + "Call me".len(), 64);

    // A context longer than the model's is refused at load.
    let mut options = EngineOptions::new(ModelSource::Path(dir.path().to_path_buf()));
    options.context_length = Some(5000);
    let err = Engine::load(options).await.err().unwrap();
    assert!(
        err.to_string().contains("exceeds the model's 4096"),
        "{err}"
    );
}

#[tokio::test]
async fn empty_and_odd_prompts_are_handled() {
    let dir = tiny_copy(4096);
    let engine = tiny_engine(&dir, 512).await;
    let (_, _, _, error) = run(&engine, text("", 4)).await;
    assert_eq!(error.as_deref(), Some("the prompt is empty"));
    // A tokenizer-level oddity (control bytes, invalid-looking sequences, a lone
    // surrogate's replacement character, special-token lookalikes) is just text.
    for odd in [
        "\u{0}\u{1}\u{7f}",
        "\u{fffd}\u{fffd}",
        "<|im_end|><|endoftext|>",
        "\r\n\t",
    ] {
        let (_, generated, reason, error) = run(&engine, text(odd, 3)).await;
        assert_eq!(error, None, "{odd:?}");
        assert_eq!(reason, Some(FinishReason::Length), "{odd:?}");
        assert_eq!(generated, 3);
    }
    // The engine is unaffected: the same request gives the same answer.
    let a = run(&engine, text("The whale", 8)).await;
    let b = run(&engine, text("The whale", 8)).await;
    assert_eq!(a, b);
}

#[tokio::test]
async fn documents_the_extractor_refuses_never_reach_the_engine_and_the_rest_run() {
    let files = tempfile::tempdir().unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let path = files.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    };
    let fixture = |name: &str| tiny_fixture().join("../documents").join(name);
    // Refused, each with its reason.
    let refusals: Vec<(&str, DocumentError)> = vec![
        ("empty", extract(&write("empty.txt", b"")).unwrap_err()),
        (
            "blank",
            extract(&write("blank.md", b" \n\t\n")).unwrap_err(),
        ),
        (
            "binary",
            extract(&write(
                "a.out.txt",
                &[0x7f, b'E', b'L', b'F', 2, 1, 1, 0, 0, 0, 0, 0],
            ))
            .unwrap_err(),
        ),
        (
            "Shift-JIS",
            extract(&write(
                "sjis.txt",
                b"\x93\xfa\x96\x7b\x8c\xea\x82\xcc\x83\x65\x83\x4c\x83\x58\x83\x67",
            ))
            .unwrap_err(),
        ),
        (
            "PDF without text",
            extract(&fixture("image-only.pdf")).unwrap_err(),
        ),
        (
            "encrypted PDF",
            extract(&fixture("encrypted-user-password.pdf")).unwrap_err(),
        ),
        (
            "truncated PDF",
            extract(&write(
                "cut.pdf",
                &std::fs::read(fixture("reportlab-helvetica.pdf")).unwrap()[..500],
            ))
            .unwrap_err(),
        ),
    ];
    for (what, err) in &refusals {
        println!("{what}: {err}");
        assert!(err.to_string().len() > 20, "{what}: {err}");
    }
    assert!(matches!(refusals[0].1, DocumentError::Empty { .. }));
    assert!(matches!(refusals[2].1, DocumentError::Binary { .. }));
    assert!(matches!(refusals[3].1, DocumentError::Encoding { .. }));
    assert!(matches!(refusals[4].1, DocumentError::NoTextLayer { .. }));

    // Accepted: Latin-1 and UTF-16 text, and a PDF's text layer; each runs in the engine.
    let dir = tiny_copy(4096);
    let engine = tiny_engine(&dir, 4096).await;
    let latin1 = extract(&write(
        "latin1.txt",
        b"Caf\xe9 cr\xe8me, na\xefve d\xe9j\xe0 vu.\n",
    ))
    .unwrap();
    assert_eq!(latin1.text.trim(), "Café crème, naïve déjà vu.");
    let mut utf16 = vec![0xff, 0xfe];
    utf16.extend("Ünïcödé text\r\n".encode_utf16().flat_map(u16::to_le_bytes));
    let utf16 = extract(&write("utf16.txt", &utf16)).unwrap();
    let pdf = extract(&fixture("reportlab-helvetica.pdf")).unwrap();
    for doc in [latin1, utf16, pdf] {
        let (_, generated, reason, error) = run(&engine, chat_with(&doc.text, 4)).await;
        assert_eq!(error, None);
        assert_eq!(reason, Some(FinishReason::Length));
        assert_eq!(generated, 4);
    }
}
