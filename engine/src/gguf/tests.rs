//! The GGUF reader: the real offline model, files written here, and every kind of damage
//! (bad magic and version, truncation at every byte, absurd counts and lengths, sizes
//! that overflow, unknown types, data past the end or overlapping), never panicking.

use std::path::PathBuf;

use super::write::{to_bytes, TensorData};
use super::*;

fn s(v: &str) -> Value {
    Value::String(v.to_string())
}

fn entry(key: &str, value: Value) -> (String, Value) {
    (key.to_string(), value)
}

fn tensor(name: &str, code: u32, dims: &[u64], len: usize) -> TensorData {
    TensorData {
        name: name.into(),
        code,
        dims: dims.to_vec(),
        data: (0..len).map(|i| (i * 7 % 251) as u8).collect(),
    }
}

/// A small valid file: a few metadata entries and three tensors (F32, Q4_1, F16).
fn small() -> Vec<u8> {
    to_bytes(&small_metadata(), &small_tensors())
}

fn small_metadata() -> Vec<(String, Value)> {
    vec![
        entry("general.architecture", s("llama")),
        entry("llama.block_count", Value::U32(1)),
        entry(
            "tokenizer.ggml.tokens",
            Value::Array(Array::Strings(vec!["a".into(), "b".into(), "ab".into()])),
        ),
        entry(
            "tokenizer.ggml.token_type",
            Value::Array(Array::Numbers {
                code: code::I32,
                values: vec![1.0, 1.0, 3.0],
            }),
        ),
    ]
}

fn small_tensors() -> Vec<TensorData> {
    vec![
        tensor("output_norm.weight", 0, &[32], 128),
        tensor("token_embd.weight", 3, &[32, 2], 40),
        tensor("blk.0.attn_q.weight", 1, &[4, 2], 16),
    ]
}

/// Offset of the first tensor description in `small()`.
fn tensor_infos_offset(bytes: &[u8]) -> usize {
    let mut at = 24;
    let h = GgufHeader::parse(bytes).unwrap();
    for (key, value) in small_metadata() {
        at += 8 + key.len() + 4;
        at += match value {
            Value::String(v) => 8 + v.len(),
            Value::U32(_) => 4,
            Value::Array(Array::Strings(v)) => 12 + v.iter().map(|s| 8 + s.len()).sum::<usize>(),
            Value::Array(Array::Numbers { values, .. }) => 12 + 4 * values.len(),
            _ => unreachable!(),
        };
    }
    assert_eq!(h.metadata.len(), 4);
    at
}

fn real_model() -> Option<PathBuf> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../.data/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    path.is_file().then_some(path)
}

#[test]
fn reads_the_offline_model() {
    let Some(path) = real_model() else {
        panic!("offline model missing: run `scripts/setup.sh data`");
    };
    let h = GgufHeader::read_file(&path).unwrap();
    h.check_loadable().unwrap();
    assert_eq!(h.version, 3);
    assert_eq!(
        h.metadata.string("general.architecture").unwrap(),
        Some("llama")
    );
    assert_eq!(
        h.metadata
            .strings("tokenizer.ggml.tokens")
            .unwrap()
            .unwrap()
            .len(),
        49152
    );
    assert_eq!(h.metadata.number("llama.block_count").unwrap(), Some(30.0));
    assert!(h
        .metadata
        .string("tokenizer.chat_template")
        .unwrap()
        .is_some());
    // 30 blocks of 9 tensors, the embedding and the final norm.
    assert_eq!(h.tensors.len(), 30 * 9 + 2);
    let embd = h.tensor("token_embd.weight").unwrap();
    assert_eq!(embd.shape(), vec![49152, 576]);
    // llama.cpp keeps the embedding of a Q4_1 model in Q8_0.
    assert_eq!(embd.ggml_type.name, "Q8_0");
    assert_eq!(embd.size, 49152 * 576 / 32 * 34);
    assert_eq!(
        h.tensor("blk.0.attn_q.weight").unwrap().ggml_type.name,
        "Q4_1"
    );
    let end = h
        .tensors
        .iter()
        .map(|t| h.data_offset + t.offset + t.size)
        .max()
        .unwrap();
    assert!(
        end <= h.file_len && h.file_len - end < 32,
        "data runs to the end"
    );

    // The header region alone parses to the same header; less of it asks for more.
    let bytes = std::fs::read(&path).unwrap();
    let prefix = &bytes[..h.data_offset as usize];
    assert_eq!(
        GgufHeader::parse_prefix(prefix, h.file_len).unwrap(),
        h,
        "parse of the header region"
    );
    assert!(matches!(
        GgufHeader::parse_prefix(&bytes[..4096], h.file_len),
        Err(GgufError::NeedMore(_))
    ));
    // Cut anywhere, it is refused, never read past its end.
    for cut in [
        10,
        4096,
        1 << 20,
        h.data_offset as usize - 1,
        bytes.len() - 1,
    ] {
        let err = GgufHeader::parse(&bytes[..cut]).unwrap_err();
        assert!(
            err.to_string().contains("truncated") || matches!(err, GgufError::Implausible { .. }),
            "cut at {cut}: {err}"
        );
    }
}

#[test]
fn written_files_read_back() {
    let mut metadata = small_metadata();
    metadata.extend([
        entry("u8", Value::U8(200)),
        entry("i8", Value::I8(-3)),
        entry("u16", Value::U16(60000)),
        entry("i16", Value::I16(-300)),
        entry("i32", Value::I32(-70000)),
        entry("f32", Value::F32(0.5)),
        entry("bool", Value::Bool(true)),
        entry("u64", Value::U64(1 << 40)),
        entry("i64", Value::I64(-(1 << 40))),
        entry("f64", Value::F64(0.25)),
        entry("empty", Value::Array(Array::Strings(vec![]))),
        entry(
            "bools",
            Value::Array(Array::Numbers {
                code: code::BOOL,
                values: vec![1.0, 0.0],
            }),
        ),
    ]);
    let bytes = to_bytes(&metadata, &small_tensors());
    let h = GgufHeader::parse(&bytes).unwrap();
    for (key, value) in &metadata {
        assert_eq!(h.metadata.get(key), Some(value), "{key}");
    }
    assert_eq!(h.metadata.number("u64").unwrap(), Some((1u64 << 40) as f64));
    assert_eq!(h.metadata.numbers("bools").unwrap(), Some(vec![1.0, 0.0]));
    assert_eq!(h.metadata.strings("empty").unwrap(), Some(&[][..]));
    assert!(matches!(
        h.metadata.string("u8"),
        Err(GgufError::WrongType { .. })
    ));
    assert!(h.metadata.strings("general.architecture").is_err());
    assert!(h.metadata.numbers("general.architecture").is_err());
    assert_eq!(h.tensors.len(), 3);
    assert_eq!(h.tensors[1].shape(), vec![2, 32]);
    assert_eq!(h.tensors[1].size, 40);
    assert_eq!(h.tensors[1].offset, 128);
    assert_eq!(h.data_offset % 32, 0);
    // float64 metadata is valid GGUF, and loadable.
    h.check_loadable().unwrap();
    GgufHeader::parse(&small())
        .unwrap()
        .check_loadable()
        .unwrap();
}

#[test]
fn refuses_what_is_not_a_gguf_file() {
    let good = small();
    let with = |at: usize, bytes: &[u8]| {
        let mut b = good.clone();
        b[at..at + bytes.len()].copy_from_slice(bytes);
        GgufHeader::parse(&b).unwrap_err()
    };
    let err = with(0, b"GGML");
    assert!(matches!(err, GgufError::NotGguf { .. }), "{err}");
    assert!(err.to_string().contains("GGML"), "{err}");
    assert!(matches!(
        GgufHeader::parse(b"<html>404</html>").unwrap_err(),
        GgufError::NotGguf { .. }
    ));
    for version in [0u32, 1, 4, 0xffff_ffff] {
        let err = with(4, &version.to_le_bytes());
        assert!(
            matches!(err, GgufError::Version(v) if v == version),
            "{err}"
        );
    }
    assert!(with(4, &1u32.to_le_bytes())
        .to_string()
        .contains("versions 2 and 3"));
    assert!(matches!(with(4, &3u32.to_be_bytes()), GgufError::BigEndian));
    for empty in [&b""[..], b"GG", b"GGUF", b"GGUF\x03\0\0\0"] {
        let err = GgufHeader::parse(empty).unwrap_err();
        assert!(err.to_string().contains("truncated"), "{err}");
    }
}

#[test]
fn refuses_absurd_counts_and_lengths() {
    let good = small();
    let with = |at: usize, value: u64| {
        let mut b = good.clone();
        b[at..at + 8].copy_from_slice(&value.to_le_bytes());
        GgufHeader::parse(&b).unwrap_err()
    };
    // Header counts.
    for (at, what) in [(8, "tensor count"), (16, "metadata entry count")] {
        for value in [1 << 60, u64::MAX, good.len() as u64] {
            let err = with(at, value);
            assert!(
                matches!(err, GgufError::Implausible { .. }) && err.to_string().contains(what),
                "{what} {value}: {err}"
            );
        }
    }
    // The first key's length.
    let err = with(24, 1 << 60);
    assert!(matches!(err, GgufError::Implausible { .. }), "{err}");
    assert!(with(24, u64::MAX).to_string().contains("metadata key #0"));
    // The string value of general.architecture: its length runs past the end.
    let arch_len = 24 + 8 + "general.architecture".len() + 4;
    assert!(matches!(
        with(arch_len, good.len() as u64),
        GgufError::Implausible { .. }
    ));
    // The token array's count: 2^60 strings.
    let tokens_header = arch_len
        + 8
        + "llama".len()
        + (8 + "llama.block_count".len() + 4 + 4)
        + 8
        + "tokenizer.ggml.tokens".len()
        + 4;
    assert_eq!(&good[tokens_header..tokens_header + 4], &8u32.to_le_bytes());
    let err = with(tokens_header + 4, 1 << 60);
    assert!(
        matches!(err, GgufError::Implausible { value, .. } if value == 1 << 60),
        "{err}"
    );
    assert!(err.to_string().contains("tokenizer.ggml.tokens"), "{err}");
    // One string inside it claims more bytes than are left.
    let err = with(tokens_header + 12, 1 << 40);
    assert!(matches!(err, GgufError::Implausible { .. }), "{err}");
    // A string longer than any metadata has, even where the file could hold it.
    let big = to_bytes(&[entry("big", s(&"x".repeat(100)))], &[]);
    let mut b = big.clone();
    b[24 + 8 + 3 + 4..][..8].copy_from_slice(&(MAX_STRING_BYTES + 1).to_le_bytes());
    b.resize(b.len() + (MAX_STRING_BYTES as usize), b' ');
    assert!(matches!(
        GgufHeader::parse(&b).unwrap_err(),
        GgufError::Implausible { limit, .. } if limit == MAX_STRING_BYTES
    ));
}

/// Rewrites the tensor descriptions of `small()`: `edit` gets each one's fields.
fn with_tensors(edit: impl Fn(usize, &mut TensorData, &mut u64)) -> Vec<u8> {
    let good = small();
    let h = GgufHeader::parse(&good).unwrap();
    let mut out = good[..tensor_infos_offset(&good)].to_vec();
    let mut data = good[h.data_offset as usize..].to_vec();
    for (i, t) in small_tensors().into_iter().enumerate() {
        let mut t = t;
        let mut offset = h.tensors[i].offset;
        edit(i, &mut t, &mut offset);
        out.extend((t.name.len() as u64).to_le_bytes());
        out.extend(t.name.as_bytes());
        out.extend((t.dims.len() as u32).to_le_bytes());
        for d in &t.dims {
            out.extend(d.to_le_bytes());
        }
        out.extend(t.code.to_le_bytes());
        out.extend(offset.to_le_bytes());
    }
    out.resize(out.len().div_ceil(32) * 32, 0);
    out.append(&mut data);
    out
}

#[test]
fn tensor_descriptions_are_checked() {
    // Unchanged, the rewrite is the file itself.
    assert_eq!(with_tensors(|_, _, _| {}), small());
    let refuse = |edit: &dyn Fn(usize, &mut TensorData, &mut u64), expect: &str| {
        let bytes = with_tensors(edit);
        let err = GgufHeader::parse(&bytes)
            .and_then(|h| h.check_loadable())
            .unwrap_err();
        assert!(err.to_string().contains(expect), "want {expect:?}: {err}");
        err
    };
    // Dimensions whose product overflows 64 bits.
    let err = refuse(
        &|i, t, _| {
            if i == 0 {
                t.dims = vec![1 << 32, 1 << 32, 1 << 32];
            }
        },
        "overflows",
    );
    assert!(matches!(err, GgufError::Overflow(_)));
    // A size that overflows once multiplied by the element size.
    refuse(
        &|i, t, _| {
            if i == 0 {
                t.dims = vec![1 << 62];
            }
        },
        "overflows",
    );
    // Data past the end of the file.
    refuse(
        &|i, _, offset| {
            if i == 2 {
                *offset = 1 << 20;
            }
        },
        "run past the end of the file",
    );
    refuse(
        &|i, _, offset| {
            if i == 2 {
                *offset = u64::MAX - 31;
            }
        },
        "run past the end",
    );
    refuse(
        &|i, t, _| {
            if i == 0 {
                t.dims = vec![1 << 20];
            }
        },
        "truncated",
    );
    // Overlapping data.
    refuse(
        &|i, _, offset| {
            if i == 2 {
                *offset = 128;
            }
        },
        "overlaps",
    );
    // Misaligned data.
    refuse(
        &|i, _, offset| {
            if i == 2 {
                *offset += 4;
            }
        },
        "not a multiple of the alignment",
    );
    // Too many dimensions, none, or an empty one.
    refuse(
        &|i, t, _| {
            if i == 0 {
                t.dims = vec![2, 2, 2, 2, 2];
            }
        },
        "5 dimensions",
    );
    refuse(
        &|i, t, _| {
            if i == 0 {
                t.dims = vec![];
            }
        },
        "no dimensions",
    );
    refuse(
        &|i, t, _| {
            if i == 0 {
                t.dims = vec![32, 0];
            }
        },
        "empty",
    );
    // A quantized row that is not whole blocks.
    refuse(
        &|i, t, _| {
            if i == 1 {
                t.dims = vec![16, 4];
            }
        },
        "whole Q4_1 blocks",
    );
    // Unknown and unsupported types.
    let err = refuse(
        &|i, t, _| {
            if i == 0 {
                t.code = 4;
            }
        },
        "unknown type 4",
    );
    assert!(matches!(err, GgufError::UnknownTensorType { code: 4, .. }));
    refuse(
        &|i, t, _| {
            if i == 0 {
                t.code = 1000;
            }
        },
        "unknown type 1000",
    );
    for (code, name) in [(16, "IQ2_XXS"), (20, "IQ4_NL"), (39, "MXFP4"), (26, "I32")] {
        let ty = GgmlType::from_code(code).unwrap();
        let size = (256 / ty.block_elements * ty.block_bytes) as usize;
        let bytes = to_bytes(
            &small_metadata(),
            &[tensor("blk.0.attn_q.weight", code, &[256], size)],
        );
        let err = GgufHeader::parse(&bytes)
            .unwrap()
            .check_loadable()
            .unwrap_err();
        assert!(
            matches!(err, GgufError::UnsupportedTensorType { .. }),
            "{err}"
        );
        assert!(err.to_string().contains(name), "{err}");
        assert!(err.to_string().contains(SUPPORTED_TENSOR_TYPES_TEXT));
    }
    // Names.
    refuse(
        &|i, t, _| {
            if i == 2 {
                t.name = "output_norm.weight".into();
            }
        },
        "appears twice",
    );
    refuse(
        &|i, t, _| {
            if i == 1 {
                t.name = "token_embd".into();
            }
        },
        "must be named *.weight",
    );
    refuse(
        &|i, t, _| {
            if i == 2 {
                t.name = "token_embd.scales".into();
            }
        },
        "token_embd.scales",
    );
}

fn one_entry(key: &[u8], code: u32, payload: &[u8]) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    b.extend(1u64.to_le_bytes());
    b.extend((key.len() as u64).to_le_bytes());
    b.extend(key);
    b.extend(code.to_le_bytes());
    b.extend(payload);
    b
}

#[test]
fn metadata_is_checked() {
    let err = GgufHeader::parse(&one_entry(b"x", 13, &[0; 8])).unwrap_err();
    assert!(
        matches!(err, GgufError::UnknownValueType { code: 13, .. }),
        "{err}"
    );
    let mut nested = code::ARRAY.to_le_bytes().to_vec();
    nested.extend(1u64.to_le_bytes());
    let err = GgufHeader::parse(&one_entry(b"x", code::ARRAY, &nested)).unwrap_err();
    assert!(err.to_string().contains("array of arrays"), "{err}");
    let mut unknown = 99u32.to_le_bytes().to_vec();
    unknown.extend(1u64.to_le_bytes());
    assert!(matches!(
        GgufHeader::parse(&one_entry(b"x", code::ARRAY, &unknown)).unwrap_err(),
        GgufError::UnknownValueType { code: 99, .. }
    ));
    let err = GgufHeader::parse(&one_entry(b"\xff\xfe", code::U8, &[1])).unwrap_err();
    assert!(matches!(err, GgufError::Utf8(_)), "{err}");
    let mut bad_text = 2u64.to_le_bytes().to_vec();
    bad_text.extend(b"\xc3\x28");
    assert!(matches!(
        GgufHeader::parse(&one_entry(b"x", code::STRING, &bad_text)).unwrap_err(),
        GgufError::Utf8(_)
    ));
    let dup = to_bytes(&[entry("a", Value::U8(1)), entry("a", Value::U8(2))], &[]);
    assert!(matches!(
        GgufHeader::parse(&dup).unwrap_err(),
        GgufError::DuplicateKey(_)
    ));
    // Alignment: zero, not a power of two, or not uint32 are damage; 64 is valid GGUF.
    for bad in [Value::U32(0), Value::U32(48), Value::U64(32)] {
        let bytes = to_bytes(&[entry("general.alignment", bad.clone())], &[]);
        let err = GgufHeader::parse(&bytes).unwrap_err();
        assert!(err.to_string().contains("power of two"), "{bad:?}: {err}");
    }
    let mut metadata = small_metadata();
    metadata.push(entry("general.alignment", Value::U32(64)));
    let h = GgufHeader::parse(&to_bytes(&metadata, &small_tensors())).unwrap();
    assert_eq!(h.alignment, 64);
    assert_eq!(h.data_offset % 64, 0);
    h.check_loadable().unwrap();
}

/// A deterministic pseudo-random stream.
fn rng(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    }
}

#[test]
fn damaged_files_never_panic() {
    let good = small();
    // Every cut: refused, except the whole file (and its trailing padding cut off, which
    // the last tensor's data does not use).
    for cut in 0..good.len() {
        if let Ok(h) = GgufHeader::parse(&good[..cut]) {
            let end = h
                .tensors
                .iter()
                .map(|t| h.data_offset + t.offset + t.size)
                .max();
            assert!(end.unwrap() <= cut as u64, "cut at {cut} parsed");
        }
    }
    // Random bytes overwritten, inserted, removed: any outcome but a panic.
    let mut next = rng(0x9e37_79b9_7f4a_7c15);
    let (mut ok, mut refused) = (0, 0);
    for _ in 0..5000 {
        let mut b = good.clone();
        for _ in 0..1 + next() % 4 {
            let at = (next() % b.len() as u64) as usize;
            match next() % 4 {
                0 => b[at] = next() as u8,
                1 => b[at] ^= 1 << (next() % 8),
                2 => {
                    b.remove(at);
                }
                _ => {
                    let wide = (next() % 8) as usize;
                    let value = [0xff; 8];
                    let end = (at + wide).min(b.len());
                    b[at..end].copy_from_slice(&value[..end - at]);
                }
            }
        }
        match GgufHeader::parse(&b).and_then(|h| h.check_loadable()) {
            Ok(()) => ok += 1,
            Err(e) => {
                assert!(!e.to_string().is_empty());
                refused += 1;
            }
        }
    }
    println!("damaged GGUF files: {ok} read, {refused} refused");
    assert!(refused > ok);
}

#[test]
fn read_file_reads_only_what_the_header_spans() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("small.gguf");
    std::fs::write(&path, small()).unwrap();
    assert_eq!(
        GgufHeader::read_file(&path).unwrap(),
        GgufHeader::parse(&small()).unwrap()
    );
    let missing = GgufHeader::read_file(&dir.path().join("missing.gguf")).unwrap_err();
    assert!(matches!(missing, GgufError::Io { .. }), "{missing}");
    // A header that goes on for more than the first read (16 MiB of strings).
    let long: Vec<String> = (0..4096)
        .map(|i| format!("{i:04}{}", "x".repeat(4096)))
        .collect();
    let bytes = to_bytes(
        &[entry(
            "tokenizer.ggml.tokens",
            Value::Array(Array::Strings(long)),
        )],
        &[tensor("output_norm.weight", 0, &[8], 32)],
    );
    assert!(bytes.len() as u64 > FIRST_READ);
    std::fs::write(&path, &bytes).unwrap();
    let h = GgufHeader::read_file(&path).unwrap();
    assert_eq!(h.tensors.len(), 1);
    assert_eq!(
        h.metadata
            .strings("tokenizer.ggml.tokens")
            .unwrap()
            .unwrap()
            .len(),
        4096
    );
}

/// Every block type the engine decodes has exactly one ggml code, and `ALL` lists them in
/// code order (as its documentation says).
#[test]
fn every_block_type_has_one_code() {
    use kivi_kernels::ggml::BlockType;
    let decoded: Vec<BlockType> = (0..64)
        .filter_map(GgmlType::from_code)
        .filter_map(|ty| ty.blocks())
        .collect();
    assert_eq!(decoded, BlockType::ALL);
    for ty in (0..64).filter_map(GgmlType::from_code) {
        assert_eq!(
            ty.loadable(),
            BlockType::from_name(ty.name).is_some(),
            "{}",
            ty.name
        );
    }
}
