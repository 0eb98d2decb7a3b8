//! Reliability: saved KV cache files that are not what they claim. `cache/file_tests.rs`
//! covers another model, other settings, truncation at every length, flipped bits,
//! forged arrays and random bytes; this adds other format versions, other kinds of files
//! (model weights, a GGUF) given as a cache, forged counts, missing files, re-signed
//! (checksum recomputed) damage, and that every refusal tells the user what to do.

mod reliability_common;

use std::collections::BTreeMap;

use kivi_engine::backend::Backend;
use kivi_engine::cache::file::{
    from_bytes, load, read_header, resign, save, to_bytes, CacheFileError,
};
use kivi_engine::cache::{CacheConfig, KiviConfig, KvCache};
use mlx_rs::Array;
use reliability_common::*;

const MODEL: &str = "HuggingFaceTB/SmolLM2-135M-Instruct@Q4_1";

fn kivi() -> CacheConfig {
    CacheConfig::Kivi(KiviConfig::new(2, 2, 32, 32).unwrap())
}

/// Two layers of a cache fed `tokens` positions (1 KV head, head_dim 32).
fn filled(config: &CacheConfig, tokens: usize) -> Vec<Box<dyn KvCache>> {
    (0..2)
        .map(|layer| {
            let mut cache = config.make(&Backend::HOST);
            let values: Vec<f32> = (0..tokens * 32)
                .map(|i| ((i * 31 + layer * 7) % 97) as f32 / 97.0 - 0.5)
                .collect();
            let kv = Array::from_slice(&values, &[1, 1, tokens as i32, 32]);
            let q = Array::zeros::<f32>(&[1, 2, tokens as i32, 32]).unwrap();
            cache.attend(&q, &kv, &kv, 0.2).unwrap().eval().unwrap();
            cache
        })
        .collect()
}

fn file_bytes(config: &CacheConfig, tokens: usize) -> Vec<u8> {
    let caches = filled(config, tokens);
    to_bytes(
        MODEL,
        config,
        &Backend::HOST,
        caches.iter().map(|c| c.as_ref()),
        &BTreeMap::from([("document".to_string(), "notes.txt".to_string())]),
    )
    .unwrap()
}

/// The file with its header's metadata edited and the checksum recomputed.
fn with_metadata(bytes: &[u8], key: &str, value: &str) -> Vec<u8> {
    let (mut header, data) = split_safetensors(bytes);
    header["__metadata__"][key] = value.into();
    resign(&join_safetensors(&header, &data)).unwrap()
}

fn refused(bytes: &[u8], config: &CacheConfig) -> CacheFileError {
    let err = from_bytes(bytes, MODEL, config, &Backend::HOST).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("prefill") || msg.contains("switch the cache settings"),
        "says what to do: {msg}"
    );
    err
}

#[test]
fn resigning_a_valid_file_changes_nothing() {
    let bytes = file_bytes(&kivi(), 100);
    let signed = resign(&bytes).unwrap();
    assert_eq!(read_header(&signed).unwrap(), read_header(&bytes).unwrap());
    let loaded = from_bytes(&signed, MODEL, &kivi(), &Backend::HOST).unwrap();
    assert_eq!(loaded.caches.len(), 2);
    assert_eq!(loaded.caches[0].len(), 100);
    assert!(resign(b"not safetensors").is_none());
}

#[test]
fn other_format_versions_are_refused() {
    let bytes = file_bytes(&kivi(), 70);
    // Version 1 held float32 scales and windows; a later version is unknown.
    for old_or_new in ["1", "6"] {
        let err = refused(&with_metadata(&bytes, "version", old_or_new), &kivi());
        assert!(
            matches!(err, CacheFileError::Version { ref found } if found == old_or_new),
            "{err}"
        );
        assert!(err.to_string().contains("this build reads 2 to 5"), "{err}");
    }
    let err = refused(&with_metadata(&bytes, "format", "other-app-cache"), &kivi());
    assert!(matches!(err, CacheFileError::Corrupt(_)), "{err}");
}

#[test]
fn other_kinds_of_files_are_refused() {
    // Model weights are safetensors too, but not a cache.
    let weights = std::fs::read(tiny_fixture().join("model.safetensors")).unwrap();
    let err = refused(&weights, &CacheConfig::Full);
    assert!(
        err.to_string().contains("is not \"kivi-chat-kv-cache\""),
        "{err}"
    );
    // A GGUF model's first megabyte.
    let mut gguf = std::fs::read(smollm2_path()).unwrap();
    gguf.truncate(1 << 20);
    let err = refused(&gguf, &CacheConfig::Full);
    assert!(
        matches!(err, CacheFileError::Length(_) | CacheFileError::Corrupt(_)),
        "{err}"
    );
    // Text.
    refused(b"{\"format\": \"kivi-chat-kv-cache\"}", &CacheConfig::Full);
}

#[test]
fn forged_counts_are_refused() {
    let bytes = file_bytes(&kivi(), 70);
    for (key, value) in [
        ("layers", "1000000000"),
        ("layers", "3"),
        ("layers", "-1"),
        ("tokens", "18446744073709551615"),
        ("tokens", "69"),
        ("tokens", "many"),
        ("cache_config", "{\"kind\":\"kivi\",\"key_bits\":3,\"value_bits\":2,\"group_size\":32,\"residual_length\":32}"),
        ("extra", "[1, 2]"),
    ] {
        let forged = with_metadata(&bytes, key, value);
        let err = from_bytes(&forged, MODEL, &kivi(), &Backend::HOST).unwrap_err();
        assert!(
            matches!(err, CacheFileError::Corrupt(_) | CacheFileError::WrongSettings { .. }),
            "{key} = {value}: {err}"
        );
    }
}

#[test]
fn damage_behind_a_valid_checksum_is_still_refused() {
    // The checksum catches damage, not a forger: re-signed files must still be checked.
    let bytes = file_bytes(&kivi(), 100);
    let (mut header, data) = split_safetensors(&bytes);
    let name = header
        .as_object()
        .unwrap()
        .keys()
        .find(|k| k.ends_with("keys.scales"))
        .unwrap()
        .clone();
    // A shape that does not match the bytes: refused by the safetensors layer.
    let shape = header[&name]["shape"].clone();
    header[&name]["shape"] = serde_json::json!([1, 1, 32, 99]);
    let err = from_bytes(
        &join_safetensors(&header, &data),
        MODEL,
        &kivi(),
        &Backend::HOST,
    )
    .unwrap_err();
    assert!(
        matches!(err, CacheFileError::Corrupt(_) | CacheFileError::Checksum),
        "{err}"
    );
    // A shape with the same number of elements, re-signed: refused by the cache's checks.
    let dims: Vec<u64> = shape
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap())
        .collect();
    let elements: u64 = dims.iter().product();
    header[&name]["shape"] = serde_json::json!([elements]);
    let forged = resign(&join_safetensors(&header, &data)).unwrap();
    let err = refused(&forged, &kivi());
    assert!(matches!(err, CacheFileError::Corrupt(_)), "{err}");
    // Flipped data bytes, re-signed, load (values are not checked): no panic either way.
    let mut flipped = bytes.clone();
    let last = flipped.len() - 5;
    flipped[last] ^= 0xff;
    assert!(matches!(
        from_bytes(&flipped, MODEL, &kivi(), &Backend::HOST),
        Err(CacheFileError::Checksum)
    ));
    assert!(from_bytes(&resign(&flipped).unwrap(), MODEL, &kivi(), &Backend::HOST).is_ok());
}

#[test]
fn missing_and_unreadable_files_name_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing.kvc");
    let err = load(&path, MODEL, &kivi(), &Backend::HOST).unwrap_err();
    assert!(matches!(err, CacheFileError::Io { .. }), "{err}");
    assert!(err.to_string().contains("missing.kvc"), "{err}");
    // Saving into a folder that does not exist fails cleanly and leaves nothing behind.
    let caches = filled(&kivi(), 40);
    let bad = dir.path().join("no/such/folder/doc.kvc");
    let err = save(
        &bad,
        MODEL,
        &kivi(),
        &Backend::HOST,
        caches.iter().map(|c| c.as_ref()),
        &BTreeMap::new(),
    )
    .unwrap_err();
    assert!(matches!(err, CacheFileError::Io { .. }), "{err}");
    // A good save, then the file cut short (a crash mid-copy): refused.
    let good = dir.path().join("doc.kvc");
    save(
        &good,
        MODEL,
        &kivi(),
        &Backend::HOST,
        caches.iter().map(|c| c.as_ref()),
        &BTreeMap::new(),
    )
    .unwrap();
    assert!(load(&good, MODEL, &kivi(), &Backend::HOST).is_ok());
    assert!(!dir.path().join("doc.kvc.partial").exists());
    let bytes = std::fs::read(&good).unwrap();
    std::fs::write(&good, &bytes[..bytes.len() / 2]).unwrap();
    let err = load(&good, MODEL, &kivi(), &Backend::HOST).unwrap_err();
    assert!(
        matches!(err, CacheFileError::Length(_) | CacheFileError::Corrupt(_)),
        "{err}"
    );
}
