//! Seed inputs for the fuzz targets (fuzz/fuzz_targets), made from real files: the
//! offline model's GGUF header (its vocabulary cut down so that each run stays fast) and
//! cache files saved from real caches. As a test it checks that the seeds are what they
//! should be (the fuzzers start from inputs that reach deep into the parsers); with
//! `KIVI_FUZZ_SEEDS=<dir>` it also writes them to `<dir>/<target>/` (scripts/fuzz.sh does
//! this for fuzz/corpus, which git ignores).

mod reliability_common;

use std::collections::{BTreeMap, HashSet};

use kivi_engine::backend::Backend;
use kivi_engine::cache::file::{from_bytes, read_header, to_bytes};
use kivi_engine::cache::{CacheConfig, KiviConfig, KvCache};
use kivi_engine::gguf::write::{to_bytes as gguf_bytes, TensorData};
use kivi_engine::gguf::{code, Array, GgmlType, GgufHeader, Value};
use kivi_engine::tokenizer::Tokenizer;
use mlx_rs::Array as MlxArray;
use reliability_common::*;

/// Tokens of the real vocabulary kept in the reduced seed.
const KEEP_TOKENS: usize = 400;

/// A real model's metadata with its vocabulary cut to the first `keep` tokens (their
/// types and scores too) and the merges among them; everything else (chat template,
/// special ids, the model's hyper-parameters) as it is.
fn reduced_metadata(path: &std::path::Path, keep: usize) -> Vec<(String, Value)> {
    let header = GgufHeader::read_file(path).unwrap();
    let tokens = header
        .metadata
        .strings("tokenizer.ggml.tokens")
        .unwrap()
        .unwrap();
    let kept: Vec<String> = tokens[..keep].to_vec();
    let known: HashSet<&str> = kept.iter().map(String::as_str).collect();
    let merges: Vec<String> = header
        .metadata
        .strings("tokenizer.ggml.merges")
        .unwrap()
        .unwrap_or_default()
        .iter()
        .filter(|m| {
            m.split_once(' ').is_some_and(|(a, b)| {
                known.contains(a) && known.contains(b) && known.contains(format!("{a}{b}").as_str())
            })
        })
        .cloned()
        .collect();
    let mut entries: Vec<(String, Value)> = header
        .metadata
        .iter()
        .map(|(k, v)| {
            let v = match (k, v) {
                ("tokenizer.ggml.tokens", _) => Value::Array(Array::Strings(kept.clone())),
                ("tokenizer.ggml.merges", _) => Value::Array(Array::Strings(merges.clone())),
                (
                    "tokenizer.ggml.token_type" | "tokenizer.ggml.scores",
                    Value::Array(Array::Numbers { code, values }),
                ) => Value::Array(Array::Numbers {
                    code: *code,
                    values: values[..keep].to_vec(),
                }),
                _ => v.clone(),
            };
            (k.to_string(), v)
        })
        .collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    entries
}

fn tensor(name: &str, code: u32, dims: &[u64]) -> TensorData {
    let ty = GgmlType::from_code(code).unwrap();
    let elements: u64 = dims.iter().product();
    let size = elements / ty.block_elements * ty.block_bytes;
    TensorData {
        name: name.into(),
        code,
        dims: dims.to_vec(),
        data: (0..size).map(|i| (i * 37 % 251) as u8).collect(),
    }
}

/// A few small tensors like a model's, one of every type the loader accepts.
fn small_tensors() -> Vec<TensorData> {
    let mut tensors = vec![
        tensor("token_embd.weight", 8, &[64, 4]),
        tensor("output_norm.weight", 0, &[64]),
    ];
    let loadable = (0..64).filter(|&c| GgmlType::from_code(c).is_some_and(|t| t.loadable()));
    for (i, code) in loadable.enumerate() {
        tensors.push(tensor(&format!("blk.{i}.attn_q.weight"), code, &[256, 2]));
    }
    tensors
}

fn gguf_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let real = std::fs::read(smollm2_path()).unwrap();
    let metadata = reduced_metadata(&smollm2_path(), KEEP_TOKENS);
    // Gemma 3's SentencePiece vocabulary: its first 600 ids hold control, user-defined,
    // byte and normal pieces.
    let sentencepiece = reduced_metadata(&gemma3_path(), 600);
    let every_type = vec![
        ("u8".to_string(), Value::U8(1)),
        ("i8".into(), Value::I8(-1)),
        ("u16".into(), Value::U16(2)),
        ("i16".into(), Value::I16(-2)),
        ("u32".into(), Value::U32(3)),
        ("i32".into(), Value::I32(-3)),
        ("f32".into(), Value::F32(0.5)),
        ("bool".into(), Value::Bool(true)),
        ("string".into(), Value::String("text".into())),
        ("u64".into(), Value::U64(4)),
        ("i64".into(), Value::I64(-4)),
        ("f64".into(), Value::F64(0.25)),
        (
            "strings".into(),
            Value::Array(Array::Strings(vec!["a".into(), "b".into()])),
        ),
        (
            "numbers".into(),
            Value::Array(Array::Numbers {
                code: code::I32,
                values: vec![1.0, 2.0],
            }),
        ),
    ];
    vec![
        (
            "smollm2-reduced.gguf",
            gguf_bytes(&metadata, &small_tensors()),
        ),
        (
            "smollm2-reduced-no-tensors.gguf",
            gguf_bytes(&metadata, &[]),
        ),
        ("smollm2-first-4k.gguf", real[..4096].to_vec()),
        (
            "every-value-type.gguf",
            gguf_bytes(&every_type, &small_tensors()[..2]),
        ),
        ("empty.gguf", gguf_bytes(&[], &[])),
        (
            "gemma3-reduced-no-tensors.gguf",
            gguf_bytes(&sentencepiece, &[]),
        ),
    ]
}

/// `layers` caches fed `tokens` positions (1 KV head, head_dim 32); every other layer
/// over a sliding window of `window` positions where one is given.
fn filled(
    config: &CacheConfig,
    layers: usize,
    tokens: usize,
    window: Option<usize>,
) -> Vec<Box<dyn KvCache>> {
    (0..layers)
        .map(|layer| {
            let window = window.filter(|_| layer % 2 == 0);
            let mut cache = config.make_layer(window, &Backend::HOST);
            if tokens > 0 {
                let values: Vec<f32> = (0..tokens * 32)
                    .map(|i| ((i * 13 + layer * 5) % 41) as f32 / 41.0 - 0.5)
                    .collect();
                let kv = MlxArray::from_slice(&values, &[1, 1, tokens as i32, 32]);
                let q = MlxArray::zeros::<f32>(&[1, 2, tokens as i32, 32]).unwrap();
                cache.attend(&q, &kv, &kv, 0.2).unwrap().eval().unwrap();
            }
            cache
        })
        .collect()
}

fn cache_seeds() -> Vec<(String, Vec<u8>)> {
    let extra = BTreeMap::from([("document".to_string(), "notes.txt#sha256:fe28".to_string())]);
    let configs = [
        (CacheConfig::Full, 2, 5, None),
        (CacheConfig::Full, 1, 0, None),
        (
            CacheConfig::Kivi(KiviConfig::new(2, 2, 32, 32).unwrap()),
            2,
            70,
            None,
        ),
        (
            CacheConfig::Kivi(KiviConfig::new(4, 2, 64, 0).unwrap()),
            1,
            64,
            None,
        ),
        (
            CacheConfig::Kivi(KiviConfig::new(2, 4, 32, 128).unwrap()),
            1,
            20,
            None,
        ),
        // KIVI+'s adaptive basis: its queries counted, then each head's choice.
        ("k2v2-g32-r32-s4-rota".parse().unwrap(), 1, 20, None),
        ("k2v2-g32-r32-s4-rota".parse().unwrap(), 2, 70, None),
        // Window layers (a Gemma-like model) between KIVI layers.
        (
            CacheConfig::Kivi(KiviConfig::new(2, 2, 32, 32).unwrap()),
            2,
            70,
            Some(8),
        ),
    ];
    configs
        .iter()
        .map(|(config, layers, tokens, window)| {
            let caches = filled(config, *layers, *tokens, *window);
            let bytes = to_bytes(
                "fuzz",
                config,
                &Backend::HOST,
                caches.iter().map(|c| c.as_ref()),
                &extra,
            )
            .unwrap();
            let windowed = window.map_or(String::new(), |w| format!("-window{w}"));
            (format!("{config}-{layers}x{tokens}{windowed}.kvc"), bytes)
        })
        .collect()
}

#[test]
fn gguf_seeds_reach_the_tokenizer() {
    let seeds = gguf_seeds();
    for (name, bytes) in &seeds {
        println!("{name}: {} bytes", bytes.len());
        assert!(bytes.len() < 64 << 10, "{name} is too big to fuzz fast");
    }
    let reduced = GgufHeader::parse(&seeds[0].1).unwrap();
    reduced.check_loadable().unwrap();
    let tokenizer = Tokenizer::from_gguf_metadata(&reduced.metadata).unwrap();
    assert_eq!(tokenizer.vocab_size(), KEEP_TOKENS);
    let ids = tokenizer.encode("Hello there", true).unwrap();
    assert!(!ids.is_empty());
    assert!(tokenizer.chat_template().is_some());
    assert!(GgufHeader::parse(&seeds[1].1).is_ok());
    assert!(
        GgufHeader::parse(&seeds[2].1).is_err(),
        "the cut header is refused"
    );
    assert!(GgufHeader::parse(&seeds[3].1).is_ok());
    assert!(GgufHeader::parse(&seeds[4].1).is_ok());
    let gemma = GgufHeader::parse(&seeds[5].1).unwrap();
    let tokenizer = Tokenizer::from_gguf_metadata(&gemma.metadata).unwrap();
    assert_eq!(tokenizer.vocab_size(), 600);
    // Byte pieces carry what no kept piece covers.
    let ids = tokenizer.encode("the\u{1F40B}", false).unwrap();
    assert_eq!(tokenizer.decode(&ids, false).unwrap(), "the\u{1F40B}");
    write_seeds(
        "gguf_metadata",
        seeds.into_iter().map(|(n, b)| (n.to_string(), b)),
    );
}

#[test]
fn cache_seeds_load() {
    let seeds = cache_seeds();
    for (name, bytes) in &seeds {
        println!("{name}: {} bytes", bytes.len());
        let header = read_header(bytes).unwrap();
        let loaded = from_bytes(bytes, "fuzz", &header.config, &Backend::HOST).unwrap();
        assert_eq!(loaded.caches.len(), header.layers, "{name}");
        if name.contains("window") {
            assert_eq!(header.windows, [8, 0], "{name}");
        }
        assert!(bytes.len() < 64 << 10, "{name} is too big to fuzz fast");
    }
    write_seeds("cache_file", seeds);
}

fn write_seeds(target: &str, seeds: impl IntoIterator<Item = (String, Vec<u8>)>) {
    let Some(root) = std::env::var_os("KIVI_FUZZ_SEEDS") else {
        return;
    };
    let dir = std::path::Path::new(&root).join(target);
    std::fs::create_dir_all(&dir).unwrap();
    for (name, bytes) in seeds {
        std::fs::write(dir.join(format!("seed-{name}")), bytes).unwrap();
    }
    println!("seeds written to {}", dir.display());
}
