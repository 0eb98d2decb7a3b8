//! Inputs the fuzz targets (fuzz/fuzz_targets) once failed on, kept as regression tests.
//! Each fixture is the fuzzer's input, byte for byte, in `tests/fixtures/fuzz/`.

use std::path::PathBuf;

use kivi_engine::gguf::{GgufError, GgufHeader};

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/fuzz")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// gguf_metadata, found by CI's 60 s run: a float metadata value that is NaN. The reader
/// was right; the target compared the header of the whole file with the header of a
/// prefix by `==`, and NaN is not equal to itself. Both parses must agree value for value.
#[test]
fn a_nan_metadata_value_parses_the_same_from_a_prefix() {
    let data = fixture("gguf-nan-metadata.gguf");
    let header = GgufHeader::parse(&data).expect("a well-formed file");
    let nan = format!("{:?}", header.metadata);
    assert!(nan.contains("NaN"), "the fixture holds a NaN value: {nan}");
    let half = &data[..data.len() / 2];
    match GgufHeader::parse_prefix(half, data.len() as u64) {
        Ok(h) => assert_eq!(format!("{h:?}"), format!("{header:?}")),
        Err(GgufError::NeedMore(end)) => {
            assert!(end > half.len() as u64 && end <= data.len() as u64)
        }
        Err(e) => panic!("a prefix of a valid file was refused: {e}"),
    }
}
