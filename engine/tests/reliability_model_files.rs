//! Reliability: damaged, inconsistent or unsupported model files are refused with a
//! clear error, never a crash. GGUF files are checked by the pure-Rust reader before
//! MLX's C++ reader sees them (a file it would crash on would end this test process);
//! safetensors headers before MLX's loader; config.json and the tokenizer against the
//! weights.

mod reliability_common;

use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use kivi_engine::backend::Backend;
use kivi_engine::error::LoadError;
use kivi_engine::gguf::{GgufError, GgufHeader, SUPPORTED_TENSOR_TYPES_TEXT};
use kivi_engine::loader::load_local;
use reliability_common::*;
use serde_json::json;

fn load_err(path: &Path) -> LoadError {
    match load_local(path, Backend::HOST) {
        Ok(_) => panic!("{} loaded", path.display()),
        Err(e) => e,
    }
}

/// The real model's header region (everything before the tensor data).
struct RealHeader {
    bytes: Vec<u8>,
}

fn real_header() -> RealHeader {
    let header = GgufHeader::read_file(&smollm2_path()).unwrap();
    let mut bytes = std::fs::read(smollm2_path()).unwrap();
    bytes.truncate(header.data_offset as usize);
    RealHeader { bytes }
}

/// Where `needle` first occurs (at or after `from`).
fn find(bytes: &[u8], needle: &[u8], from: usize) -> usize {
    from + bytes[from..]
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap_or_else(|| panic!("{:?} not found", String::from_utf8_lossy(needle)))
}

/// Offset of the description of tensor `name` (after its name), in the header region.
fn tensor_desc(h: &RealHeader, name: &str) -> usize {
    // Tensor descriptions follow the metadata; the last occurrence of the name is there.
    let needle = [&(name.len() as u64).to_le_bytes()[..], name.as_bytes()].concat();
    let at = h
        .bytes
        .windows(needle.len())
        .rposition(|w| w == needle.as_slice())
        .unwrap();
    at + needle.len()
}

fn patch(bytes: &mut [u8], at: usize, value: &[u8]) {
    bytes[at..at + value.len()].copy_from_slice(value);
}

/// Writes `bytes` to a temporary .gguf file.
fn write_gguf(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// A full-size copy of the real model with `edits` (offset, bytes) applied.
fn patched_copy(dir: &Path, name: &str, edits: &[(usize, Vec<u8>)]) -> PathBuf {
    let path = dir.join(name);
    std::fs::copy(smollm2_path(), &path).unwrap();
    let mut file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    for (at, bytes) in edits {
        file.seek(SeekFrom::Start(*at as u64)).unwrap();
        file.write_all(bytes).unwrap();
    }
    path
}

fn invalid_gguf(e: &LoadError) -> &GgufError {
    match e {
        LoadError::InvalidGguf { source, .. } => source,
        other => panic!("expected an invalid GGUF file, got: {other}"),
    }
}

#[test]
fn truncated_gguf_downloads_are_refused_before_mlx_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let full = std::fs::read(smollm2_path()).unwrap();
    let h = GgufHeader::parse(&full).unwrap();
    // Cut in the tensor data (an interrupted download), in the tensor table, in the
    // metadata, and in the fixed header.
    for cut in [
        full.len() * 3 / 5,
        full.len() - 1,
        h.data_offset as usize - 10,
        1 << 20,
        100,
        12,
        0,
    ] {
        let path = write_gguf(dir.path(), "cut.gguf", &full[..cut]);
        let err = load_err(&path);
        let msg = err.to_string();
        assert!(
            msg.contains("truncated")
                || matches!(invalid_gguf(&err), GgufError::Implausible { .. }),
            "cut at {cut}: {msg}"
        );
        assert!(msg.contains("cut.gguf"), "{msg}");
    }
}

#[test]
fn corrupt_gguf_headers_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let real = real_header();
    let check = |name: &str, edit: &dyn Fn(&mut Vec<u8>), expect: &str| {
        let mut bytes = real.bytes.clone();
        edit(&mut bytes);
        let err = load_err(&write_gguf(dir.path(), name, &bytes));
        let msg = err.to_string();
        assert!(msg.contains(expect), "{name}: want {expect:?} in {msg}");
        err
    };
    let err = check("magic.gguf", &|b| patch(b, 0, b"GGML"), "not a GGUF file");
    assert!(matches!(invalid_gguf(&err), GgufError::NotGguf { .. }));
    check(
        "html.gguf",
        &|b| b.splice(0.., b"<html>404".iter().copied()).for_each(drop),
        "not a GGUF file",
    );
    check(
        "v1.gguf",
        &|b| patch(b, 4, &1u32.to_le_bytes()),
        "GGUF version 1 is not supported",
    );
    check(
        "v9.gguf",
        &|b| patch(b, 4, &9u32.to_le_bytes()),
        "versions 2 and 3",
    );
    check(
        "be.gguf",
        &|b| patch(b, 4, &3u32.to_be_bytes()),
        "big-endian",
    );
    check(
        "tensors.gguf",
        &|b| patch(b, 8, &(1u64 << 60).to_le_bytes()),
        "tensor count",
    );
    check(
        "kv.gguf",
        &|b| patch(b, 16, &u64::MAX.to_le_bytes()),
        "metadata entry count",
    );

    // The vocabulary array claims 2^60 strings.
    let key = b"tokenizer.ggml.tokens";
    let count = find(&real.bytes, key, 0) + key.len() + 4 + 4;
    assert_eq!(
        real.bytes[count..count + 8],
        49152u64.to_le_bytes(),
        "found the vocabulary's count"
    );
    let err = check(
        "count.gguf",
        &|b| patch(b, count, &(1u64 << 60).to_le_bytes()),
        "tokenizer.ggml.tokens",
    );
    assert!(matches!(
        invalid_gguf(&err),
        GgufError::Implausible { value, .. } if *value == 1 << 60
    ));
    // The chat template's length runs past the end of the file.
    let key = b"tokenizer.chat_template";
    let len_at = find(&real.bytes, key, 0) + key.len() + 4;
    check(
        "string.gguf",
        &|b| patch(b, len_at, &(u64::MAX / 2).to_le_bytes()),
        "tokenizer.chat_template",
    );
    // The first vocabulary string's length, likewise.
    check(
        "token.gguf",
        &|b| patch(b, count + 8, &(real.bytes.len() as u64).to_le_bytes()),
        "tokenizer.ggml.tokens",
    );
    // A metadata value of an unknown type.
    let key = b"general.architecture";
    let type_at = find(&real.bytes, key, 0) + key.len();
    check(
        "vtype.gguf",
        &|b| patch(b, type_at, &77u32.to_le_bytes()),
        "unknown value type 77",
    );
}

#[test]
fn corrupt_gguf_tensor_tables_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let real = real_header();
    let norm = tensor_desc(&real, "output_norm.weight");
    // output_norm.weight: 1 dimension (576), F32.
    assert_eq!(real.bytes[norm..norm + 4], 1u32.to_le_bytes());
    assert_eq!(real.bytes[norm + 4..norm + 12], 576u64.to_le_bytes());
    let (dims, ty, offset) = (norm + 4, norm + 12, norm + 16);
    let embd = tensor_desc(&real, "token_embd.weight");
    let check = |name: &str, edits: Vec<(usize, Vec<u8>)>, expect: &str| {
        let path = patched_copy(dir.path(), name, &edits);
        let err = load_err(&path);
        assert!(
            err.to_string().contains(expect),
            "{name}: want {expect:?} in {err}"
        );
        std::fs::remove_file(path).unwrap();
        err
    };
    // Dimensions whose product overflows: 2^40 x 2^40 elements.
    let err = check(
        "overflow.gguf",
        vec![
            (embd + 4, (1u64 << 40).to_le_bytes().to_vec()),
            (embd + 12, (1u64 << 40).to_le_bytes().to_vec()),
        ],
        "overflows",
    );
    assert!(matches!(invalid_gguf(&err), GgufError::Overflow(_)));
    // A tensor whose data lies past the end of the file.
    check(
        "offset.gguf",
        vec![(offset, (1u64 << 40).to_le_bytes().to_vec())],
        "run past the end of the file",
    );
    // A dimension so large that the data cannot be in the file.
    check(
        "dims.gguf",
        vec![(dims, (1u64 << 34).to_le_bytes().to_vec())],
        "run past the end of the file",
    );
    // Overlapping data: the norm's offset moved onto the embedding's.
    let embd_offset = embd + 4 + 16 + 4;
    check(
        "overlap.gguf",
        vec![(offset, real.bytes[embd_offset..embd_offset + 8].to_vec())],
        "overlaps",
    );
    // An unknown tensor type, and a known one the engine does not decode.
    let err = check(
        "type.gguf",
        vec![(ty, 1000u32.to_le_bytes().to_vec())],
        "unknown type 1000",
    );
    assert!(matches!(
        invalid_gguf(&err),
        GgufError::UnknownTensorType { .. }
    ));
    // Codes 4 and 5 (removed from ggml) have a block size of 0 in gguflib's table: MLX's
    // reader dies of a division by zero on them.
    for code in [4u32, 5] {
        let err = check(
            "removed.gguf",
            vec![(ty, code.to_le_bytes().to_vec())],
            &format!("unknown type {code}"),
        );
        assert!(matches!(
            invalid_gguf(&err),
            GgufError::UnknownTensorType { .. }
        ));
    }
    let err = check(
        "iq4_nl.gguf",
        vec![(ty, 20u32.to_le_bytes().to_vec())],
        "stored as IQ4_NL",
    );
    assert!(
        matches!(err, LoadError::UnsupportedQuantization(_)),
        "{err}"
    );
    assert!(err.to_string().contains(SUPPORTED_TENSOR_TYPES_TEXT));
    // More dimensions than ggml has (gguflib asserts, aborting the process).
    check(
        "ndim.gguf",
        vec![(norm, 9u32.to_le_bytes().to_vec())],
        "9 dimensions",
    );
}

#[test]
fn unsupported_gguf_architecture_lists_the_supported_ones() {
    let dir = tempfile::tempdir().unwrap();
    let real = real_header();
    let key = b"general.architecture";
    let value = find(&real.bytes, key, 0) + key.len() + 4 + 8;
    assert_eq!(&real.bytes[value..value + 5], b"llama");
    let path = patched_copy(dir.path(), "gemma.gguf", &[(value, b"gemma".to_vec())]);
    let err = load_err(&path);
    assert!(
        matches!(err, LoadError::UnsupportedArchitecture(ref a) if a == "gemma"),
        "{err}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("Llama") && msg.contains("Mistral") && msg.contains("Qwen2"),
        "{msg}"
    );
}

/// A copy of the tiny model whose model.safetensors is rewritten by `edit`.
fn with_safetensors(
    edit: impl FnOnce(&mut serde_json::Value, &mut Vec<u8>) -> Option<Vec<u8>>,
) -> LoadError {
    let dir = tiny_copy(256);
    let path = dir.path().join("model.safetensors");
    let (mut header, mut data) = split_safetensors(&std::fs::read(&path).unwrap());
    let bytes = edit(&mut header, &mut data).unwrap_or_else(|| join_safetensors(&header, &data));
    std::fs::write(&path, bytes).unwrap();
    load_err(dir.path())
}

#[test]
fn safetensors_with_bad_headers_are_refused() {
    let cases: Vec<(&str, LoadError)> = vec![
        (
            "bad JSON",
            with_safetensors(|_, data| {
                let json = b"{\"model.norm.weight\": {\"dtype\": \"F32\", ".to_vec();
                let mut out = (json.len() as u64).to_le_bytes().to_vec();
                out.extend(json);
                out.extend(data.iter());
                Some(out)
            }),
        ),
        (
            "header length past the end",
            with_safetensors(|h, data| {
                let mut out = join_safetensors(h, data);
                let len = out.len() as u64;
                out[..8].copy_from_slice(&(len + 100).to_le_bytes());
                Some(out)
            }),
        ),
        (
            "header length of 2^63",
            with_safetensors(|h, data| {
                let mut out = join_safetensors(h, data);
                out[..8].copy_from_slice(&(1u64 << 63).to_le_bytes());
                Some(out)
            }),
        ),
        (
            "three bytes",
            with_safetensors(|_, _| Some(b"{}\n".to_vec())),
        ),
        (
            "offsets out of range",
            with_safetensors(|h, _| {
                let t = &mut h["model.norm.weight"]["data_offsets"];
                let end = t[1].as_u64().unwrap();
                *t = json!([end, end + 1_000_000]);
                None
            }),
        ),
        (
            "overlapping offsets",
            with_safetensors(|h, _| {
                h["model.norm.weight"]["data_offsets"] =
                    h["model.embed_tokens.weight"]["data_offsets"].clone();
                h["model.norm.weight"]["shape"] = json!([256, 64]);
                None
            }),
        ),
        (
            "shape that does not match the bytes",
            with_safetensors(|h, _| {
                h["model.embed_tokens.weight"]["shape"] = json!([256, 65]);
                None
            }),
        ),
        (
            "dtype that does not match the bytes",
            with_safetensors(|h, _| {
                h["model.embed_tokens.weight"]["dtype"] = json!("F16");
                None
            }),
        ),
        (
            "unknown dtype",
            with_safetensors(|h, _| {
                h["model.embed_tokens.weight"]["dtype"] = json!("F5");
                None
            }),
        ),
        (
            "truncated data",
            with_safetensors(|_, data| {
                data.truncate(data.len() - 100);
                None
            }),
        ),
        (
            "trailing bytes",
            with_safetensors(|_, data| {
                data.extend([0u8; 64]);
                None
            }),
        ),
    ];
    for (what, err) in cases {
        let msg = err.to_string();
        assert!(matches!(err, LoadError::Weights(_)), "{what}: {msg}");
        assert!(
            msg.contains("is not a valid safetensors file")
                && msg.contains("download the model again"),
            "{what}: {msg}"
        );
        println!("{what}: {msg}");
    }
}

/// A copy of the tiny model with its config.json edited.
fn with_config(edit: impl FnOnce(&mut serde_json::Value)) -> LoadError {
    let dir = tiny_copy(256);
    edit_json(&dir.path().join("config.json"), edit);
    load_err(dir.path())
}

#[test]
fn missing_or_inconsistent_config_is_refused() {
    let dir = tiny_copy(256);
    std::fs::remove_file(dir.path().join("config.json")).unwrap();
    let err = load_err(dir.path());
    assert!(matches!(err, LoadError::Missing { .. }), "{err}");
    assert!(err.to_string().contains("config.json"), "{err}");

    let dir = tiny_copy(256);
    std::fs::write(
        dir.path().join("config.json"),
        "{\"model_type\": \"llama\",",
    )
    .unwrap();
    assert!(matches!(load_err(dir.path()), LoadError::Json { .. }));

    let cases: Vec<(&str, LoadError, &str)> = vec![
        (
            "missing field",
            with_config(|c| {
                c.as_object_mut().unwrap().remove("hidden_size");
            }),
            "hidden_size",
        ),
        (
            "missing model type",
            with_config(|c| {
                c.as_object_mut().unwrap().remove("model_type");
            }),
            "model_type",
        ),
        (
            "hidden size not divisible by heads",
            with_config(|c| c["num_attention_heads"] = 3.into()),
            "not divisible by the 3 attention heads",
        ),
        (
            "KV heads not dividing heads",
            with_config(|c| c["num_key_value_heads"] = 3.into()),
            "cannot share 3 key/value heads",
        ),
        (
            "zero heads",
            with_config(|c| c["num_attention_heads"] = 0.into()),
            "attention heads",
        ),
        (
            "vocab size not matching the embedding",
            with_config(|c| c["vocab_size"] = 300.into()),
            "has 256 rows",
        ),
        (
            "absurd size",
            with_config(|c| c["intermediate_size"] = (1u64 << 40).into()),
            "implausible",
        ),
        (
            "hidden size not matching the weights",
            with_config(|c| {
                c["hidden_size"] = 128.into();
                c["head_dim"] = 16.into();
            }),
            "rows but the configuration implies 128",
        ),
    ];
    for (what, err, expect) in cases {
        println!("{what}: {err}");
        assert!(
            err.to_string().contains(expect),
            "{what}: want {expect:?} in {err}"
        );
    }
}

#[test]
fn unsupported_architecture_and_quantization_list_what_is_supported() {
    let err = with_config(|c| c["model_type"] = "gemma2".into());
    assert!(
        matches!(err, LoadError::UnsupportedArchitecture(_)),
        "{err}"
    );
    assert!(err.to_string().contains("supported are Llama"), "{err}");

    let err =
        with_config(|c| c["quantization_config"] = json!({"quant_method": "gptq", "bits": 4}));
    assert!(
        matches!(err, LoadError::UnsupportedQuantization(_)),
        "{err}"
    );
    assert!(
        err.to_string().contains("only MLX affine quantization"),
        "{err}"
    );
    let err =
        with_config(|c| c["quantization"] = json!({"group_size": 64, "bits": 4, "mode": "mxfp4"}));
    assert!(err.to_string().contains("only \"affine\""), "{err}");
}

#[test]
fn a_tokenizer_beyond_the_embedding_is_refused() {
    let dir = tiny_copy(256);
    edit_json(&dir.path().join("tokenizer.json"), |t| {
        t["added_tokens"] = json!([{"id": 256, "content": "<|extra|>", "single_word": false,
            "lstrip": false, "rstrip": false, "normalized": false, "special": true}]);
    });
    let err = load_err(dir.path());
    assert!(matches!(err, LoadError::Tokenizer(_)), "{err}");
    assert!(
        err.to_string().contains("token ids up to 256") && err.to_string().contains("256 rows"),
        "{err}"
    );
    // A smaller vocabulary (padding rows in the embedding) is fine.
    let dir = tiny_copy(256);
    edit_json(&dir.path().join("tokenizer.json"), |t| {
        t["model"]["vocab"].as_object_mut().unwrap().remove("ÿ");
    });
    load_local(dir.path(), Backend::HOST).unwrap();
}
