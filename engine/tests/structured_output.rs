//! Structured output through the whole engine on the offline SmolLM2: every answer asked
//! for in a JSON schema parses and keeps to the schema, whatever the sampler draws; an
//! answer cut by `max_tokens` says `Length`; a schema the grammar engine refuses fails
//! before the prompt is read. (The server's `response_format` is checked with the
//! official client and an independent validator in `scripts/structured_output_check.py`.)

mod offline;

use kivi_engine::backend::{Backend, Device, Precision};
use kivi_engine::grammar::{Constraint, GrammarError, OutputFormat, TokenTable};
use kivi_engine::sampling::SamplingParams;
use kivi_engine::session::{Event, FinishReason, Prompt, Request};
use kivi_engine::tokenizer::{Message, Role, Tokenizer};
use kivi_engine::weights::gguf::Gguf;
use serde_json::{json, Value};

/// A contract's parties, date and sum: nested objects, an array with bounds, an enum,
/// required fields, a bounded integer and strings whose length is capped.
fn contract_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "title": {"type": "string", "maxLength": 40},
            "parties": {
                "type": "array",
                "minItems": 1,
                "maxItems": 3,
                "items": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string", "maxLength": 30},
                        "role": {"enum": ["buyer", "seller", "witness"]}
                    },
                    "required": ["name", "role"],
                    "additionalProperties": false
                }
            },
            "year": {"type": "integer", "minimum": 1900, "maximum": 2100},
            "signed": {"type": "boolean"}
        },
        "required": ["title", "parties", "year", "signed"],
        "additionalProperties": false
    })
}

/// Checks `value` against [`contract_schema`] field by field (the independent validator
/// is the Python `jsonschema` package, in the server's check).
fn assert_contract(value: &Value, text: &str) {
    let object = value
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {text}"));
    let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["parties", "signed", "title", "year"], "{text}");
    assert!(
        object["title"]
            .as_str()
            .is_some_and(|t| t.chars().count() <= 40),
        "{text}"
    );
    let parties = object["parties"].as_array().expect("parties is an array");
    assert!((1..=3).contains(&parties.len()), "{text}");
    for party in parties {
        let party = party.as_object().expect("a party is an object");
        assert_eq!(party.len(), 2, "{text}");
        assert!(
            party["name"]
                .as_str()
                .is_some_and(|n| n.chars().count() <= 30),
            "{text}"
        );
        assert!(
            ["buyer", "seller", "witness"].contains(&party["role"].as_str().unwrap_or("")),
            "{text}"
        );
    }
    assert!(
        object["year"]
            .as_i64()
            .is_some_and(|y| (1900..=2100).contains(&y)),
        "{text}"
    );
    assert!(object["signed"].is_boolean(), "{text}");
}

const CONTRACT: &str = "This agreement, made in 2024 between Ada Lovelace (seller) and \
    Charles Babbage (buyer), sells one analytical engine. Signed by both. Give the \
    contract's title, parties, year and whether it is signed as JSON.";

fn request(format: OutputFormat, sampling: SamplingParams, max_tokens: usize) -> Request {
    Request {
        prompt: Prompt::Chat {
            messages: vec![Message::new(Role::User, CONTRACT.to_string())],
            documents: Vec::new(),
        },
        sampling,
        max_tokens,
        cache: None,
        format: Some(format),
    }
}

/// Asks for the contract under its schema and checks the answer.
async fn contract_answer(engine: &kivi_engine::session::Engine, sampling: SamplingParams) {
    let schema = OutputFormat::JsonSchema {
        schema: contract_schema(),
    };
    let out = offline::run(engine, request(schema, sampling.clone(), 400)).await;
    assert_eq!(out.error, None);
    assert_eq!(
        out.reason,
        Some(FinishReason::Stop),
        "{sampling:?}: {}",
        out.text
    );
    let value: Value = serde_json::from_str(&out.text)
        .unwrap_or_else(|e| panic!("{sampling:?}: not JSON ({e}): {}", out.text));
    assert_contract(&value, &out.text);
}

#[tokio::test]
async fn a_greedy_schema_answer_parses_and_keeps_to_the_schema() {
    let engine = offline::engine(|_| {}).await;
    contract_answer(&engine, SamplingParams::greedy()).await;
}

/// The MLX runtime, whose decode loop is pipelined except under a constraint, keeps to a
/// schema too (in float32 on the CPU: MLX's float16 products there take minutes for one
/// answer; `scripts/gpu-check.sh` runs the same on a GPU).
#[tokio::test]
async fn the_mlx_runtime_keeps_to_a_schema() {
    let engine =
        offline::engine(|e| e.backend = Some(Backend::mlx(Device::Cpu, Precision::F32))).await;
    let family = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 20},
            "children": {
                "type": "array",
                "maxItems": 3,
                "items": {"type": "string", "maxLength": 20}
            }
        },
        "required": ["name", "children"],
        "additionalProperties": false
    });
    let mut ask = request(
        OutputFormat::JsonSchema { schema: family },
        SamplingParams::greedy(),
        60,
    );
    ask.prompt = Prompt::Chat {
        messages: vec![Message::new(
            Role::User,
            "Mary has two children, Tom and Ann. Describe the family as JSON.".to_string(),
        )],
        documents: Vec::new(),
    };
    let out = offline::run(&engine, ask).await;
    assert_eq!(out.error, None);
    assert_eq!(out.reason, Some(FinishReason::Stop), "{}", out.text);
    let value: Value = serde_json::from_str(&out.text).expect(&out.text);
    assert!(
        value["name"].is_string() && value["children"].is_array(),
        "{}",
        out.text
    );
}

/// A sampler that draws unlikely tokens still gets only the tokens the schema allows.
#[tokio::test]
async fn hot_sampled_schema_answers_keep_to_the_schema() {
    let engine = offline::engine(|_| {}).await;
    for seed in 1..=3 {
        let sampling = SamplingParams {
            temperature: 1.5,
            seed: Some(seed),
            ..SamplingParams::default()
        };
        contract_answer(&engine, sampling).await;
    }
}

#[tokio::test]
async fn a_json_object_answer_is_an_object() {
    let engine = offline::engine(|_| {}).await;
    let mut ask = request(OutputFormat::JsonObject, SamplingParams::greedy(), 300);
    ask.prompt = Prompt::Chat {
        messages: vec![Message::new(
            Role::User,
            "Alice is 30 years old and lives in Paris. Give her name, age and city as a \
             JSON object."
                .to_string(),
        )],
        documents: Vec::new(),
    };
    let out = offline::run(&engine, ask).await;
    assert_eq!(out.error, None);
    assert_eq!(out.reason, Some(FinishReason::Stop), "{}", out.text);
    let value: Value = serde_json::from_str(&out.text).expect(&out.text);
    assert!(value.is_object(), "{}", out.text);
}

#[tokio::test]
async fn an_answer_cut_by_max_tokens_says_length() {
    let engine = offline::engine(|_| {}).await;
    let schema = OutputFormat::JsonSchema {
        schema: contract_schema(),
    };
    let out = offline::run(&engine, request(schema, SamplingParams::greedy(), 4)).await;
    assert_eq!(out.error, None);
    assert_eq!(out.reason, Some(FinishReason::Length));
    assert!(
        serde_json::from_str::<Value>(&out.text).is_err(),
        "{}",
        out.text
    );
}

#[tokio::test]
async fn a_schema_the_grammar_engine_refuses_fails_before_the_prompt_is_read() {
    let engine = offline::engine(|_| {}).await;
    let bad = OutputFormat::JsonSchema {
        schema: json!({"type": "object", "properties": {"a": {"type": "no-such-type"}}}),
    };
    let out = offline::run(&engine, request(bad, SamplingParams::greedy(), 10)).await;
    let message = out.error.expect("the schema is refused");
    assert!(message.starts_with(GrammarError::PREFIX), "{message}");
    assert!(
        !out.events
            .iter()
            .any(|e| matches!(e, Event::Started { .. } | Event::Prefill { .. })),
        "the prompt ran: {:?}",
        out.events
    );
    // The engine answers the next request as before.
    let again = offline::run(&engine, Request::text("Once upon a time")).await;
    assert_eq!(again.error, None);
}

/// The mask over `vocab` logits as booleans.
fn allowed(constraint: &mut Constraint, vocab: usize) -> Vec<bool> {
    let mask = constraint.mask(vocab).expect("a mask");
    mask.eval().unwrap();
    mask.as_slice::<f32>().iter().map(|b| *b == 0.0).collect()
}

/// Feeds `text`'s tokens one by one, each checked against the mask first; the index of
/// the first token the mask refuses, if any.
fn feed(tokenizer: &Tokenizer, constraint: &mut Constraint, text: &str) -> Option<usize> {
    let vocab = tokenizer.vocab_size();
    let ids = tokenizer.encode(text, false).unwrap();
    for (at, &id) in ids.iter().enumerate() {
        if !allowed(constraint, vocab)[id as usize] {
            return Some(at);
        }
        constraint.commit(id).unwrap();
    }
    None
}

/// On each real vocabulary (byte-level BPE: SmolLM2, Qwen2.5; SentencePiece with byte
/// fallback: Gemma 3), written JSON with escaped quotes, newlines and non-ASCII text is
/// accepted token by token, after which only end-of-turn tokens may follow; a raw newline
/// inside a string, a missing required field and a value outside an enum are refused.
#[test]
fn the_mask_accepts_valid_json_and_refuses_the_rest_on_every_vocabulary() {
    let schema = OutputFormat::JsonSchema {
        schema: json!({
            "type": "object",
            "properties": {
                "quote": {"type": "string"},
                "mood": {"enum": ["calm", "stormy"]}
            },
            "required": ["quote", "mood"],
            "additionalProperties": false
        }),
    };
    for path in [
        offline::smollm2_path(),
        offline::qwen25_path(),
        offline::gemma3_path(),
    ] {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let gguf = Gguf::open(&path).unwrap();
        let tokenizer = Tokenizer::from_gguf(&gguf).unwrap();
        let table = TokenTable::new(&tokenizer).unwrap_or_else(|e| panic!("{name}: {e}"));
        let vocab = tokenizer.vocab_size();
        assert!(table.len() <= vocab, "{name}");

        let fresh = || Constraint::new(&table, &schema).unwrap();
        let good =
            r#"{"quote": "He said \"Call me Ishmael\"\nthen left: café, 日本", "mood": "stormy"}"#;
        let mut c = fresh();
        assert_eq!(feed(&tokenizer, &mut c, good), None, "{name}: {good}");
        assert!(c.is_complete(), "{name}");
        let after = allowed(&mut c, vocab);
        for (id, ok) in after.iter().enumerate() {
            assert_eq!(
                *ok,
                tokenizer.is_stop(id as u32),
                "{name}: token {id} after the end"
            );
        }

        for bad in [
            "{\"quote\": \"a raw\nnewline\", \"mood\": \"calm\"}",
            r#"{"mood": "calm"}"#,
            r#"{"quote": "x", "mood": "sunny"}"#,
            r#"{"quote": "x", "mood": "calm", "extra": 1}"#,
        ] {
            let mut c = fresh();
            assert!(
                feed(&tokenizer, &mut c, bad).is_some(),
                "{name}: accepted {bad:?}"
            );
        }
    }
}
