//! Shared by the tests that run the offline SmolLM2 model.

#![allow(dead_code)]

use std::path::PathBuf;

use kivi_engine::session::{Engine, EngineOptions, Event, FinishReason, ModelSource, Request};

/// The workspace root (the engine crate's parent folder), or `KIVI_WORKSPACE` where the
/// test binaries run away from the source tree (scripts/gpu-check.sh unpacks the data they
/// read there).
pub fn workspace_root() -> PathBuf {
    if let Some(root) = std::env::var_os("KIVI_WORKSPACE").filter(|r| !r.is_empty()) {
        return PathBuf::from(root);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("engine/ has a parent")
        .to_path_buf()
}

/// An offline model file under `.data/models`; panics with the fix when it is absent.
fn offline_model(file: &str) -> PathBuf {
    let path = workspace_root().join(".data/models").join(file);
    assert!(
        path.is_file(),
        "offline model missing at {}: run `scripts/setup.sh data` to fetch it",
        path.display()
    );
    path
}

/// The offline SmolLM2-135M-Instruct GGUF.
pub fn smollm2_path() -> PathBuf {
    offline_model("SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// The offline Qwen2.5-Coder-0.5B-Instruct GGUF (Q4_K_M).
pub fn qwen25_path() -> PathBuf {
    offline_model("Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf")
}

/// The offline Gemma 3 270M GGUF (Q4_K_M, a SentencePiece vocabulary, window layers).
pub fn gemma3_path() -> PathBuf {
    offline_model("gemma-3-270m-Q4_K_M.gguf")
}

/// An engine on the offline model with the given options tweaks.
pub async fn engine(tweak: impl FnOnce(&mut EngineOptions)) -> Engine {
    let mut options = EngineOptions::new(ModelSource::Path(smollm2_path()));
    tweak(&mut options);
    Engine::load(options)
        .await
        .expect("the offline model loads")
}

/// Everything one generation reported.
#[derive(Debug, Default)]
pub struct Outcome {
    pub events: Vec<Event>,
    pub ids: Vec<u32>,
    pub pieces: Vec<String>,
    pub text: String,
    pub reason: Option<FinishReason>,
    pub reused: usize,
    pub prompt_tokens: usize,
    pub error: Option<String>,
}

/// Runs a request to the end.
pub async fn run(engine: &Engine, request: Request) -> Outcome {
    collect(engine.generate(request)).await
}

/// Every event of a generation.
pub async fn collect(mut generation: kivi_engine::session::Generation) -> Outcome {
    let mut out = Outcome::default();
    while let Some(event) = generation.next().await {
        match &event {
            Event::Started {
                prompt_tokens,
                reused_tokens,
            } => {
                out.prompt_tokens = *prompt_tokens;
                out.reused = *reused_tokens;
            }
            Event::Token { id, text } => {
                out.ids.push(*id);
                out.pieces.push(text.clone());
            }
            Event::Done { reason, text, .. } => {
                out.reason = Some(*reason);
                out.text = text.clone();
            }
            Event::Error { message } => out.error = Some(message.clone()),
            _ => {}
        }
        out.events.push(event);
    }
    out
}

/// Runs a request to the end in a named conversation's cache.
pub async fn run_in(engine: &Engine, conversation: &str, request: Request) -> Outcome {
    collect(engine.generate_in(conversation, request)).await
}
