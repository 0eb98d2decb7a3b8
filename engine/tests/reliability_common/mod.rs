//! Shared by the reliability tests (engine/tests/reliability_*.rs): copies of the tiny
//! random-weight Llama 3 fixture that can be edited or damaged, and event collection.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use serde_json::Value;

// The offline model's helpers, shared with the other model tests. Not every test file
// uses them (as with `dead_code` above).
#[path = "../offline/mod.rs"]
mod offline;
#[allow(unused_imports)]
pub use offline::{gemma3_path, smollm2_path, workspace_root};

/// The tiny random-weight Llama 3 checkpoint (2 layers, d = 64, 256 byte-level tokens).
pub fn tiny_fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-llama3")
}

/// A chat template for the tiny model, which has none.
pub const TINY_TEMPLATE: &str = "{% for m in messages %}<{{ m.role }}>{{ m.content }}\n\
    {% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}";

/// A copy of the tiny Llama 3 in a temporary folder, with its context raised to
/// `context` tokens (the weights do not depend on it) and a chat template.
pub fn tiny_copy(context: usize) -> tempfile::TempDir {
    tiny_copy_of("tiny-llama3", context)
}

/// The same for another tiny fixture (`tiny-mistral` has head_dim 32, which KIVI's
/// groups need; the Llama 3 one has 16).
pub fn tiny_copy_of(fixture: &str, context: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let source = tiny_fixture().parent().unwrap().join(fixture);
    for entry in std::fs::read_dir(source).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.path().join(path.file_name().unwrap())).unwrap();
    }
    edit_json(&dir.path().join("config.json"), |c| {
        c["max_position_embeddings"] = context.into();
    });
    edit_json(&dir.path().join("tokenizer_config.json"), |c| {
        c["chat_template"] = TINY_TEMPLATE.into();
    });
    dir
}

/// Rewrites a JSON file.
pub fn edit_json(path: &Path, edit: impl FnOnce(&mut Value)) {
    let mut value: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    edit(&mut value);
    std::fs::write(path, serde_json::to_string_pretty(&value).unwrap()).unwrap();
}

/// A safetensors file's header JSON and data section.
pub fn split_safetensors(bytes: &[u8]) -> (Value, Vec<u8>) {
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    (
        serde_json::from_slice(&bytes[8..8 + n]).unwrap(),
        bytes[8 + n..].to_vec(),
    )
}

/// A safetensors file from a header and data.
pub fn join_safetensors(header: &Value, data: &[u8]) -> Vec<u8> {
    let json = serde_json::to_vec(header).unwrap();
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend(json);
    out.extend(data);
    out
}
